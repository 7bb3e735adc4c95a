// Files replaced atomically: a temporary file, fsync, rename, fsync of the directory.
#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "distribute/check.h"
#include "distribute/errors.h"

namespace distribute::detail {
namespace {

// An open file descriptor closed (and its file removed unless kept) when it goes.
class TempFile {
 public:
  explicit TempFile(std::filesystem::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!kept_) ::unlink(path_.c_str());
  }

  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }
  bool write(const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }
  bool write_at_start(const ByteRange& bytes) {
    return ::pwrite(fd_, bytes.data, bytes.size, 0) == static_cast<ssize_t>(bytes.size);
  }
  // Flushes to disk and closes.
  bool finish() {
    const bool ok = ::fsync(fd_) == 0;
    const bool closed = ::close(fd_) == 0;
    fd_ = -1;
    return ok && closed;
  }
  void keep() { kept_ = true; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool kept_ = false;
};

std::filesystem::path temp_path_for(const std::filesystem::path& path) {
  static std::atomic<unsigned> counter{0};
  std::filesystem::path temp = path;
  temp += absl::StrCat(".tmp.", ::getpid(), ".", counter.fetch_add(1));
  return temp;
}

}  // namespace

void sync_directory(const std::filesystem::path& file) {
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_atomically(const std::filesystem::path& path, std::span<const ByteRange> pieces, const char* what,
                      const std::function<ByteRange()>& final_head) {
  TempFile file(temp_path_for(path));
  DISTRIBUTE_CHECK(file.is_open(), InvalidArgumentError, what, ": cannot create \"", file.path().string(), "\": ",
                   std::strerror(errno));
  bool ok = true;
  for (const ByteRange& piece : pieces) ok = ok && file.write(piece.data, piece.size);
  if (final_head) ok = file.write_at_start(final_head()) && ok;
  ok = ok && file.finish();
  DISTRIBUTE_CHECK(ok, InternalError, what, ": writing \"", file.path().string(), "\" failed: ", std::strerror(errno));
  const bool renamed = ::rename(file.path().c_str(), path.c_str()) == 0;
  DISTRIBUTE_CHECK(renamed, InternalError, what, ": cannot rename \"", file.path().string(), "\" to \"",
                   path.string(), "\": ", std::strerror(errno));
  file.keep();
  sync_directory(path);
}

}  // namespace distribute::detail
