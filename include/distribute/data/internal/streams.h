// data::internal: the transformations that choose which items a pass yields and in which order
// (take, skip, shard, repeat, shuffle), written once for any item type. A dataset applies them to
// its elements or, when it makes its elements by index (Indexed in dataset.h), to the indices:
// then a shuffle of from_tensor_slices buffers 8-byte indices instead of tensor handles, and the
// elements are made only when they come out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "distribute/data/internal/elements.h"
#include "distribute/data/internal/pass.h"

namespace distribute::data::internal {

// The indices 0, 1, ..., size - 1.
inline Next<std::int64_t> indices(std::int64_t size) {
  return [size, i = std::int64_t{0}]() mutable -> std::optional<std::int64_t> {
    if (i == size) return std::nullopt;
    return i++;
  };
}

// The first `count` items (-1: all).
template <class Item>
Next<Item> taken(Next<Item> source, std::int64_t count) {
  return [source = std::move(source), left = count]() mutable -> std::optional<Item> {
    if (left == 0) return std::nullopt;
    if (left > 0) --left;
    return source();
  };
}

// All but the first `count` items (-1: none).
template <class Item>
Next<Item> skipped(Next<Item> source, std::int64_t count) {
  return [source = std::move(source), left = count]() mutable -> std::optional<Item> {
    for (; left != 0; left = left > 0 ? left - 1 : left) {
      if (!source()) return std::nullopt;
    }
    return source();
  };
}

// Items index, index + num_shards, ...
template <class Item>
Next<Item> sharded(Next<Item> source, std::int64_t num_shards, std::int64_t index) {
  return [source = std::move(source), num_shards, index, position = std::int64_t{0}]() mutable -> std::optional<Item> {
    for (;;) {
      std::optional<Item> item = source();
      if (!item || position++ % num_shards == index) return item;
    }
  };
}

// `count` passes of `start` one after the other (-1: forever). A pass without items ends it:
// every pass would be as empty, and repeating one would never end.
template <class Item>
Next<Item> repeated(Start<Item> start, std::int64_t count) {
  return [start = std::move(start), count, source = Next<Item>(), passes = std::int64_t{0},
          yielded = false]() mutable -> std::optional<Item> {
    for (;;) {
      if (!source) {
        if (passes == count) return std::nullopt;
        source = start();
        ++passes;
        yielded = false;
      }
      if (std::optional<Item> item = source()) {
        yielded = true;
        return item;
      }
      source = nullptr;
      if (!yielded) return std::nullopt;
    }
  };
}

// tf.data's shuffle: each call fills a buffer with the next items up to `capacity`, then takes
// one of them at random.
template <class Item>
Next<Item> shuffled(Next<Item> source, std::size_t capacity, ShuffleRng rng) {
  return [source = std::move(source), capacity, rng, buffer = std::vector<Item>(),
          ended = false]() mutable -> std::optional<Item> {
    while (!ended && buffer.size() < capacity) {
      std::optional<Item> item = source();
      if (!item) {
        ended = true;
        break;
      }
      buffer.push_back(std::move(*item));
    }
    if (buffer.empty()) return std::nullopt;
    const std::size_t pick = rng.below(buffer.size());
    Item out = std::move(buffer[pick]);
    if (pick + 1 != buffer.size()) buffer[pick] = std::move(buffer.back());
    buffer.pop_back();
    return out;
  };
}

}  // namespace distribute::data::internal
