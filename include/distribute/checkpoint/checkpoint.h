// Checkpoint: saves named variables to one file and restores them (tf.train.Checkpoint for
// distributed variables). A variable is saved once, whatever its number of components: an
// ON_WRITE variable's first component (they are equal), an ON_READ variable's aggregate (what a
// cross-replica read gives). Restoring assigns each value in cross-replica context, so every
// component of an ON_WRITE variable gets it and an ON_READ variable reads it back; the variables
// may belong to another strategy, with another number of replicas, than those that were saved.
//
//   Checkpoint checkpoint({{"w", w}, {"b", b}});
//   checkpoint.save("model.safetensors");
//   checkpoint.restore("model.safetensors");
//
// The file is safetensors, so Python's safetensors and numpy read it: an 8-byte little-endian
// header length, a JSON header {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
// ...} padded with spaces to a multiple of 8 bytes, then the tensors' little-endian bytes back to
// back in the checkpoint's order. The header's "__metadata__" holds "distribute.crc32": the CRC-32
// of the data, in 8 hex digits, which restore checks when present (files from other writers have
// none).
//
// save writes a temporary file beside `path`, flushes it to disk and renames it over `path`: a
// crash leaves the old file or the new one, never a torn one. restore reads and checks the whole
// file before it changes anything: a truncated or corrupt file is a DataLossError; names, dtypes
// or shapes that do not match the checkpoint's variables are one InvalidArgumentError listing
// every mismatch (a variable missing from the file, a tensor the checkpoint does not name, each
// differing dtype and shape). Both run in cross-replica context (FailedPreconditionError inside a
// replica's fn); a path that cannot be opened (for restore, also a directory) is an
// InvalidArgumentError, a failed read, write or rename (saving over a directory) an InternalError.
//
// Multi-worker jobs (the first variable's strategy has several workers): save and restore are
// collective, so every worker calls them, in the same order. save reads every value on every
// worker (an ON_READ variable's aggregate spans the workers), the chief (worker 0) alone writes the
// file, and then every worker returns, or throws the chief's error. restore: the chief alone reads
// the file and broadcasts its values, so the other workers need no copy of it (no shared file
// system); when the chief cannot restore, every worker throws its error, of the same type.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "distribute/variables/saveable.h"
#include "distribute/variables/variable.h"

namespace distribute {

class Checkpoint {
 public:
  // The variables, then `state` kept otherwise (Saveable: e.g. Optimizer::checkpoint_state() of
  // an optimizer whose slots are in shards), each under its name. InvalidArgumentError for an
  // undefined variable, or a name that is empty, repeated or "__metadata__" (the safetensors
  // header's own key).
  explicit Checkpoint(std::vector<std::pair<std::string, Variable>> variables,
                      std::vector<std::pair<std::string, Saveable>> state = {});

  // Adds `state` under `name` after the entries so far (PreemptionCheckpointHandler keeps its step
  // count this way); the constructor's InvalidArgumentError for an empty, reserved or repeated name.
  void add(std::string name, Saveable state);

  void save(const std::filesystem::path& path) const;
  void restore(const std::filesystem::path& path);

  const std::vector<std::pair<std::string, Variable>>& variables() const { return variables_; }

 private:
  friend class CheckpointManager;
  friend class ElasticState;
  // save once the workers agreed on the call, which CheckpointManager makes its own.
  void save_agreed(StrategyExtended* workers, const std::filesystem::path& path) const;
  // restore's two halves, which CheckpointManager takes apart to choose a file on the chief: the
  // file's values, every rule checked (on the chief); then every worker's entries set to the
  // chief's values (on every worker).
  std::vector<Tensor> load(const std::filesystem::path& path) const;
  void assign(StrategyExtended* workers, std::vector<Tensor> values);
  // Every entry's value, copied to the host, between steps (ElasticState's copy of a commit).
  std::vector<Tensor> read_copies() const;
  void check_name(const std::string& name) const;

  std::vector<std::pair<std::string, Variable>> variables_;
  std::vector<std::pair<std::string, Saveable>> entries_;  // the variables', then the state's
};

}  // namespace distribute
