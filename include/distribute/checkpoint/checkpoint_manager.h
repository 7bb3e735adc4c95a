// CheckpointManager: numbered checkpoints in one directory, the newest kept and the oldest deleted
// (tf.train.CheckpointManager). A training loop saves every so many steps and, when it is started
// again, carries on from the newest checkpoint that can be read:
//
//   Checkpoint checkpoint({{"w", w}, {"step", step}});
//   CheckpointManager manager(checkpoint, "/tmp/run", {.max_to_keep = 3, .checkpoint_interval = 100});
//   manager.restore_or_initialize();            // the newest readable checkpoint, or nothing
//   for (...; ++s) { ...; manager.save(s); }      // writes /tmp/run/ckpt-<s>.safetensors every 100 steps
//
// Files: <directory>/<checkpoint_name>-<number>.safetensors (Checkpoint's format), and the index
// <directory>/<checkpoint_name>.index.json, TF's `checkpoint` file: the checkpoints kept, oldest
// first, the last of them the latest. Each save writes the checkpoint file, then replaces the
// index (both written to a temporary file, flushed to disk and renamed, and the directory flushed),
// and only then deletes the checkpoints beyond max_to_keep: a crash at any point leaves an index
// that names complete files. The index is what the manager knows: files it does not name are
// neither restored nor deleted, and a manager made again on the same directory (a restarted job)
// continues its numbering and its interval from it.
//
// Not thread-safe: one thread calls a manager, in cross-replica context, as for Checkpoint.
//
// Multi-worker jobs (the checkpoint's first variable has a strategy of several workers): making
// a manager, save and restore_or_initialize are collective, so every worker calls them in the same
// order. The chief (worker 0) alone touches the directory: it creates it, reads the index and
// sends the list of checkpoints to the others, writes each checkpoint and the index, and on
// restore reads the file and broadcasts its values. So the other workers need no copy of the
// directory (no shared file system), and every worker returns the same paths, the chief's: from
// save, latest_checkpoint, checkpoints, restore_or_initialize and directory, whatever directory
// string it was given. An error on the chief (a directory it cannot write) is thrown on every
// worker, of the same type.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "distribute/checkpoint/checkpoint.h"

namespace distribute {

struct CheckpointManagerOptions {
  // How many checkpoints are kept; each save beyond it deletes the oldest. <= 0 keeps them all.
  int max_to_keep = 5;
  // Files are <directory>/<checkpoint_name>-<number>.safetensors: a non-empty file name, without
  // '/'. Managers of different names share a directory without touching each other's files.
  std::string checkpoint_name = "ckpt";
  // In steps, > 0: save(step) with check_interval writes only once step >= the last saved number
  // + checkpoint_interval (the checkpoint's number is the step). Unset: every save writes.
  std::optional<std::int64_t> checkpoint_interval;
};

class CheckpointManager {
 public:
  // Creates `directory` when it does not exist and reads its index. InvalidArgumentError naming it
  // when the directory cannot be created or written (checked by creating a file in it) or is not a
  // directory, and for options out of range (an empty or path-like checkpoint_name, a
  // checkpoint_interval <= 0); DataLossError when the index exists but cannot be parsed, or names a
  // file that save would not have named (another name, or a number spelled otherwise: "ckpt-02").
  CheckpointManager(Checkpoint checkpoint, std::filesystem::path directory, CheckpointManagerOptions options = {});

  // Saves the checkpoint as number `checkpoint_number` (>= 0; default: one more than the largest
  // number kept, 1 when none is, as TF's save_counter numbers from 1) and returns its path, or
  // nullopt when check_interval and checkpoint_interval are set and the step has not advanced by
  // the interval since the last save (the first save always writes). Saving a number again
  // replaces its file, which becomes the latest. InvalidArgumentError for a negative number, or for
  // check_interval with an interval and no number (the step the interval counts); OutOfRangeError,
  // before anything is written, for the default number when the largest kept is INT64_MAX.
  // Checkpoint::save's errors otherwise; after any error the index and this manager are as they
  // were, and so are the files the index names but that of a number saved again, which may hold
  // the new values.
  std::optional<std::filesystem::path> save(std::optional<std::int64_t> checkpoint_number = {},
                                            bool check_interval = true);

  // The newest checkpoint saved; nullopt before the first.
  std::optional<std::filesystem::path> latest_checkpoint() const;
  // Every checkpoint kept, oldest first.
  std::vector<std::filesystem::path> checkpoints() const;

  // Restores the newest readable checkpoint and returns its path; nullopt when there is none yet
  // (a fresh start: the variables keep their initial values). A checkpoint whose file is missing
  // or is truncated or corrupt (DataLossError) is passed over with a warning on stderr that names
  // it, for the one before it. DataLossError listing each when none of the checkpoints can be
  // read; Checkpoint::restore's InvalidArgumentError when a file is of another model (its names,
  // dtypes or shapes differ), which no older checkpoint would mend.
  std::optional<std::filesystem::path> restore_or_initialize();

  // The directory given, or in a multi-worker job the chief's.
  const std::filesystem::path& directory() const { return directory_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  // For adding entries (Checkpoint::add) before the first save or restore.
  Checkpoint& checkpoint() { return checkpoint_; }
  // How long the last save that wrote took on this worker (the values read, the file and the index
  // written; on a worker other than the chief, until the chief said it was done); nullopt before.
  std::optional<std::chrono::duration<double>> last_save_time() const { return last_save_time_; }

 private:
  std::filesystem::path path_of(std::int64_t number) const;
  std::filesystem::path index_path() const;
  void read_index();
  void write_index(const std::vector<std::int64_t>& numbers) const;
  // The values of the newest checkpoint that can be read, and its number; nullopt when there is
  // none. Warns of each one passed over; restore_or_initialize's errors.
  std::optional<std::int64_t> load_newest_readable(std::vector<Tensor>& values) const;

  Checkpoint checkpoint_;
  std::filesystem::path directory_;
  CheckpointManagerOptions options_;
  // The numbers of the checkpoints kept, oldest first, as the index lists them.
  std::vector<std::int64_t> numbers_;
  std::optional<std::chrono::duration<double>> last_save_time_;
};

}  // namespace distribute
