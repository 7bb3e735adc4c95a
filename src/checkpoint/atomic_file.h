// Files replaced atomically: the bytes go to a temporary file beside the target, which is flushed
// to disk and renamed over it, then the directory is flushed so that the rename survives a crash
// too. A reader sees the old file or the new one, never a torn one. Checkpoint::save writes its
// safetensors file this way and CheckpointManager its index.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>

namespace distribute::detail {

struct ByteRange {
  const void* data;
  std::size_t size;
};

// Writes `pieces` back to back to `path`, replacing it atomically. `what` (a method's name) opens
// every error message: InvalidArgumentError when the temporary file cannot be created, InternalError
// when writing, flushing or renaming fails (then `path` is untouched and no temporary file is left).
// `final_head`, when given, is called once the pieces are written and before the flush: the bytes
// it returns are written again at the start of the file, over as many bytes written before. So a
// header may hold what is computed from the data while the data is being written.
void write_atomically(const std::filesystem::path& path, std::span<const ByteRange> pieces, const char* what,
                      const std::function<ByteRange()>& final_head = {});

// Flushes the directory holding `file` to disk, so that a rename or unlink in it is durable. Best
// effort: a file system that cannot sync directories still holds complete files.
void sync_directory(const std::filesystem::path& file);

}  // namespace distribute::detail
