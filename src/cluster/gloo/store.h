// distribute::cluster::gloo_backend: the rendezvous stores the Gloo backend meets through (Gloo's
// Redis and file stores), with the two things Gloo's interface lacks: asking whether a key is there
// without waiting (Gloo's own waits poll and count the time waited in whole seconds), and a set
// that only the first of several workers wins (the elastic membership's claims, gloo/membership.h).
#pragma once

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/rendezvous/store.h>

#include <optional>
#include <string>
#include <vector>

namespace distribute::cluster::gloo_backend {

class FileStore final : public ::gloo::rendezvous::FileStore {
 public:
  using ::gloo::rendezvous::FileStore::check;
  using ::gloo::rendezvous::FileStore::FileStore;
  // Writes `value` under `key` unless the key exists; whether this call wrote it. The file appears
  // whole (a link to a finished temporary file), so a reader never sees part of it.
  bool claim(const std::string& key, const std::vector<char>& value);
};

class RedisStore final : public ::gloo::rendezvous::RedisStore {
 public:
  using ::gloo::rendezvous::RedisStore::RedisStore;
  // SETNX: whether this call set `key`.
  bool claim(const std::string& key, const std::vector<char>& value);
};

// Whether `store` holds `key` now, without waiting (a store of another kind is asked with a wait
// of a millisecond).
bool store_holds(::gloo::rendezvous::Store& store, const std::string& key);
// The value under `key`, or nothing when the key is not there yet.
std::optional<std::vector<char>> store_read(::gloo::rendezvous::Store& store, const std::string& key);
// Sets `key` to `value` only if no one has: whether this call did. Atomic in the Redis and file
// stores above; a store of another kind (Gloo's HashStore, one process) checks, then sets.
bool store_claim(::gloo::rendezvous::Store& store, const std::string& key, const std::vector<char>& value);

}  // namespace distribute::cluster::gloo_backend
