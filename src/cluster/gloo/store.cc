// The Gloo backend's stores: checks without waiting, and claims that one caller wins.
#include "cluster/gloo/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <gloo/common/error.h>

#include "absl/strings/str_cat.h"
#include "distribute/errors.h"

namespace distribute::cluster::gloo_backend {

bool FileStore::claim(const std::string& key, const std::vector<char>& value) {
  const std::string path = objectPath(key);
  const std::string temporary = absl::StrCat(path, ".claim.", ::getpid(), ".", reinterpret_cast<std::uintptr_t>(&key));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw UnavailableError(absl::StrCat("the rendezvous directory ", basePath_, " cannot be written: ",
                                        std::strerror(errno)));
  }
  std::size_t written = 0;
  while (written < value.size()) {
    const ssize_t n = ::write(fd, value.data() + written, value.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      throw UnavailableError(absl::StrCat("cannot write ", temporary, ": ", std::strerror(error)));
    }
    written += static_cast<std::size_t>(n);
  }
  ::close(fd);
  // link() fails with EEXIST where another worker's file is there already: the claim is atomic.
  const int linked = ::link(temporary.c_str(), path.c_str());
  const int error = errno;
  ::unlink(temporary.c_str());
  if (linked == 0) return true;
  if (error == EEXIST) return false;
  throw UnavailableError(absl::StrCat("cannot create ", path, " in the rendezvous directory: ", std::strerror(error)));
}

bool RedisStore::claim(const std::string& key, const std::vector<char>& value) {
  void* raw = redisCommand(redis_, "SETNX %b %b", key.data(), key.size(), value.data(), value.size());
  if (raw == nullptr) {
    throw UnavailableError(absl::StrCat("the Redis server stopped answering: ", redis_->errstr));
  }
  const std::unique_ptr<redisReply, void (*)(void*)> reply(static_cast<redisReply*>(raw), freeReplyObject);
  if (reply->type != REDIS_REPLY_INTEGER) {
    throw UnavailableError(absl::StrCat("the Redis server refused SETNX ", key, ": ",
                                        reply->type == REDIS_REPLY_ERROR ? reply->str : "an unexpected reply"));
  }
  return reply->integer == 1;
}

bool store_holds(::gloo::rendezvous::Store& store, const std::string& key) {
  if (auto* redis = dynamic_cast<::gloo::rendezvous::RedisStore*>(&store)) return redis->check({key});
  if (auto* file = dynamic_cast<FileStore*>(&store)) return file->check({key});
  try {
    store.wait({key}, std::chrono::milliseconds(1));  // a HashStore waits on a condition variable
    return true;
  } catch (const ::gloo::Exception&) {
    return false;
  }
}

std::optional<std::vector<char>> store_read(::gloo::rendezvous::Store& store, const std::string& key) {
  if (!store_holds(store, key)) return std::nullopt;
  return store.get(key);
}

bool store_claim(::gloo::rendezvous::Store& store, const std::string& key, const std::vector<char>& value) {
  if (auto* redis = dynamic_cast<RedisStore*>(&store)) return redis->claim(key, value);
  if (auto* file = dynamic_cast<FileStore*>(&store)) return file->claim(key, value);
  if (store_holds(store, key)) return false;
  store.set(key, value);
  return true;
}

}  // namespace distribute::cluster::gloo_backend
