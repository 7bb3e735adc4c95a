// Checkpoint: safetensors files written atomically and read back with every rule checked.
#include "distribute/checkpoint/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <ios>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/timeline.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/chief.h"
#include "checkpoint/json_text.h"
#include "checkpoint/require_cross_replica.h"
#include "strategy/cross_worker.h"

namespace distribute {
namespace {

// safetensors stores little-endian data, which is the tensors' own layout only on such hosts.
static_assert(std::endian::native == std::endian::little, "checkpoints assume a little-endian host");

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kCrcKey = "distribute.crc32";

using NamedEntries = std::vector<std::pair<std::string, Saveable>>;

struct SafetensorsType {
  const char* name;
  std::size_t size;
  std::optional<DType> dtype;  // nullopt: a safetensors type that distribute's tensors do not hold
};

// Every safetensors dtype, so that offsets of tensors of any type are checked.
constexpr SafetensorsType kTypes[] = {
    {"F32", 4, DType::kFloat32}, {"F64", 8, DType::kFloat64}, {"I32", 4, DType::kInt32},
    {"I64", 8, DType::kInt64},   {"F16", 2, DType::kFloat16}, {"BF16", 2, DType::kBFloat16},
    {"BOOL", 1, std::nullopt},   {"U8", 1, std::nullopt},     {"I8", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},    {"U32", 4, std::nullopt},    {"U64", 8, std::nullopt},
};

const SafetensorsType* find_type(std::string_view name) {
  for (const SafetensorsType& t : kTypes) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

const char* safetensors_name(DType dtype) {
  for (const SafetensorsType& t : kTypes) {
    if (t.dtype == dtype) return t.name;
  }
  throw InternalError(absl::StrCat("Checkpoint: no safetensors dtype for ", dtype_name(dtype)));
}

std::uint32_t crc_update(std::uint32_t crc, const void* data, std::size_t size) {
  // zlib takes a null buffer as a request for the initial value, whatever `crc` is.
  if (size == 0) return crc;
  return static_cast<std::uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), size));
}

std::string hex32(std::uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

// ---- save

// Every entry's whole value, on the host. On every worker: reading an ON_READ variable or state in
// shards is a collective.
std::vector<Tensor> read_all(const NamedEntries& variables) {
  std::vector<Tensor> values;
  values.reserve(variables.size());
  for (const auto& [name, variable] : variables) {
    const Tensor value = variable.read();
    values.push_back(value.device().is_cpu() ? value : value.to(Device::cpu()));
  }
  return values;
}

// Checksums above this size are computed on a thread of their own while the data is written
// (into the header, rewritten before the file is flushed): on a fast disk the CRC would otherwise
// add a third to the time of a save.
constexpr std::size_t kOverlappedCrcBytes = std::size_t{8} << 20;

std::uint32_t crc_of(const std::vector<Tensor>& values) {
  std::uint32_t crc = 0;
  for (const Tensor& t : values) crc = crc_update(crc, t.raw_data(), t.nbytes());
  return crc;
}

// The file's start: the header's length (8 bytes, little-endian), then the JSON header padded with
// spaces to a multiple of 8 bytes. Its length does not depend on `crc` (always 8 hex digits).
std::string head_of(const NamedEntries& variables, const std::vector<Tensor>& values, std::uint32_t crc) {
  nlohmann::ordered_json header;
  std::uint64_t offset = 0;
  for (std::size_t k = 0; k < values.size(); ++k) {
    const Tensor& t = values[k];
    header[variables[k].first] = {{"dtype", safetensors_name(t.dtype())},
                                  {"shape", t.shape().dims()},
                                  {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  nlohmann::ordered_json document = {{kMetadataKey, {{kCrcKey, hex32(crc)}}}};
  document.update(header);
  std::string json = document.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  const std::uint64_t size = json.size();
  std::string head(reinterpret_cast<const char*>(&size), 8);
  return head + json;
}

// The head, then each tensor's bytes, replacing `path` atomically.
void write(const std::filesystem::path& path, const NamedEntries& variables, const std::vector<Tensor>& values) {
  std::size_t total = 0;
  for (const Tensor& t : values) total += t.nbytes();
  const bool overlapped = total >= kOverlappedCrcBytes;
  std::future<std::uint32_t> crc;
  if (overlapped) crc = std::async(std::launch::async, [&values] { return crc_of(values); });
  std::string head = head_of(variables, values, overlapped ? 0 : crc_of(values));
  std::vector<detail::ByteRange> pieces = {{head.data(), head.size()}};
  for (const Tensor& t : values) pieces.push_back({t.raw_data(), t.nbytes()});
  std::string final_head;
  const auto finish_head = [&] {
    final_head = head_of(variables, values, crc.get());
    DISTRIBUTE_CHECK(final_head.size() == head.size(), InternalError, "Checkpoint::save: the header changed size");
    return detail::ByteRange{final_head.data(), final_head.size()};
  };
  detail::write_atomically(path, pieces, "Checkpoint::save",
                           overlapped ? std::function<detail::ByteRange()>(finish_head) : nullptr);
}

// ---- restore

struct Entry {
  std::string dtype_name;
  const SafetensorsType* type = nullptr;
  std::vector<std::int64_t> dims;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

class Reader {
 public:
  Reader(const std::filesystem::path& path, std::string bytes) : path_(path), bytes_(std::move(bytes)) {}

  // The header's tensors by name, every structural rule checked; DataLossError otherwise.
  std::map<std::string, Entry> parse() {
    DISTRIBUTE_CHECK(bytes_.size() >= 8, DataLossError, corrupt(), "it has ", bytes_.size(),
                     " bytes, fewer than the 8 of a safetensors header length");
    std::uint64_t header_size = 0;
    std::memcpy(&header_size, bytes_.data(), 8);
    DISTRIBUTE_CHECK(header_size <= bytes_.size() - 8, DataLossError, corrupt(), "its header length says ",
                     header_size, " bytes but ", bytes_.size() - 8, " follow");
    data_begin_ = 8 + header_size;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(bytes_.begin() + 8, bytes_.begin() + static_cast<std::ptrdiff_t>(data_begin_));
    } catch (const nlohmann::json::parse_error& e) {
      throw DataLossError(absl::StrCat(corrupt(), "its header is not valid JSON (", e.what(), ")"));
    }
    DISTRIBUTE_CHECK(header.is_object(), DataLossError, corrupt(), "its header is not a JSON object");
    std::map<std::string, Entry> entries;
    for (const auto& [name, value] : header.items()) {
      if (name == kMetadataKey) {
        read_metadata(value);
      } else {
        entries.emplace(name, read_entry(name, value));
      }
    }
    check_layout(entries);
    return entries;
  }

  const char* data(const Entry& e) const { return bytes_.data() + data_begin_ + e.begin; }

 private:
  // The start of every message.
  std::string corrupt() const {
    return absl::StrCat("Checkpoint::restore: \"", path_.string(), "\" is truncated or corrupt: ");
  }

  static bool is_index(const nlohmann::json& v) { return v.is_number_unsigned(); }

  void read_metadata(const nlohmann::json& metadata) {
    DISTRIBUTE_CHECK(metadata.is_object(), DataLossError, corrupt(), "its __metadata__ is not an object");
    for (const auto& [key, value] : metadata.items()) {
      DISTRIBUTE_CHECK(value.is_string(), DataLossError, corrupt(), "its __metadata__ entry '", key,
                       "' is not a string");
      if (key == kCrcKey) crc_ = value.get<std::string>();
    }
  }

  Entry read_entry(const std::string& name, const nlohmann::json& value) const {
    DISTRIBUTE_CHECK(value.is_object(), DataLossError, corrupt(), "tensor '", name, "' is not described by an object");
    Entry e;
    auto dtype = value.find("dtype");
    DISTRIBUTE_CHECK(dtype != value.end() && dtype->is_string(), DataLossError, corrupt(), "tensor '", name,
                     "' has no string \"dtype\"");
    e.dtype_name = dtype->get<std::string>();
    e.type = find_type(e.dtype_name);
    DISTRIBUTE_CHECK(e.type != nullptr, DataLossError, corrupt(), "tensor '", name, "' has the unknown dtype \"",
                     e.dtype_name, "\"");
    auto shape = value.find("shape");
    DISTRIBUTE_CHECK(shape != value.end() && shape->is_array() && std::all_of(shape->begin(), shape->end(), is_index),
                     DataLossError, corrupt(), "tensor '", name, "' has no \"shape\" list of non-negative integers");
    std::uint64_t elements = 1;
    for (const nlohmann::json& d : *shape) {
      const auto dim = d.get<std::uint64_t>();
      const bool fits =
          dim <= static_cast<std::uint64_t>(INT64_MAX) && !__builtin_mul_overflow(elements, dim, &elements);
      DISTRIBUTE_CHECK(fits, DataLossError, corrupt(), "tensor '", name, "' has a shape whose size overflows");
      e.dims.push_back(static_cast<std::int64_t>(dim));
    }
    auto offsets = value.find("data_offsets");
    DISTRIBUTE_CHECK(offsets != value.end() && offsets->is_array() && offsets->size() == 2 &&
                         is_index((*offsets)[0]) && is_index((*offsets)[1]),
                     DataLossError, corrupt(), "tensor '", name,
                     "' has no \"data_offsets\" pair of non-negative integers");
    e.begin = (*offsets)[0].get<std::uint64_t>();
    e.end = (*offsets)[1].get<std::uint64_t>();
    std::uint64_t expected = 0;
    const bool fits = !__builtin_mul_overflow(elements, e.type->size, &expected);
    DISTRIBUTE_CHECK(fits && e.begin <= e.end && e.end - e.begin == expected, DataLossError, corrupt(), "tensor '",
                     name, "' has data_offsets [", e.begin, ", ", e.end, "] for ", elements, " elements of ",
                     e.dtype_name, ", which take ", expected, " bytes");
    return e;
  }

  // The tensors' data must tile the data section exactly, as safetensors requires.
  void check_layout(const std::map<std::string, Entry>& entries) const {
    std::vector<std::pair<std::uint64_t, const std::string*>> starts;
    for (const auto& [name, e] : entries) starts.emplace_back(e.begin, &name);
    std::sort(starts.begin(), starts.end());
    std::uint64_t position = 0;
    for (const auto& [begin, name] : starts) {
      DISTRIBUTE_CHECK(begin == position, DataLossError, corrupt(), "tensor '", *name, "' starts at data byte ",
                       begin, " where ", position == 0 ? "the data starts" : "the previous tensor ends at ",
                       position == 0 ? std::string() : absl::StrCat(position),
                       " (its data offsets overlap or leave a gap)");
      position = entries.at(*name).end;
    }
    const std::uint64_t data_size = bytes_.size() - data_begin_;
    DISTRIBUTE_CHECK(position == data_size, DataLossError, corrupt(), "the header describes ", position,
                     " bytes of data but the file has ", data_size);
    if (crc_) {
      const std::string crc = hex32(crc_update(0, bytes_.data() + data_begin_, data_size));
      DISTRIBUTE_CHECK(crc == *crc_, DataLossError, corrupt(), "the data's CRC-32 is ", crc,
                       " but the header records ", *crc_);
    }
  }

  const std::filesystem::path& path_;
  std::string bytes_;
  std::uint64_t data_begin_ = 0;
  std::optional<std::string> crc_;
};

std::string read_file(const std::filesystem::path& path) {
  // A directory opens as a stream, and reading it throws std::ios_base::failure.
  std::error_code ignored;
  DISTRIBUTE_CHECK(!std::filesystem::is_directory(path, ignored), InvalidArgumentError, "Checkpoint::restore: \"",
                   path.string(), "\" is a directory; pass the path of a checkpoint file");
  std::ifstream in(path, std::ios::binary);
  DISTRIBUTE_CHECK(in.is_open(), InvalidArgumentError, "Checkpoint::restore: cannot open \"", path.string(),
                   "\": ", std::strerror(errno));
  // In blocks: a character at a time, a checkpoint of a few MiB took longer to read than to save.
  std::string bytes;
  std::error_code no_size;
  if (const auto size = std::filesystem::file_size(path, no_size); !no_size) bytes.reserve(size);
  try {
    std::array<char, 1 << 16> block;
    while (in.read(block.data(), block.size()) || in.gcount() > 0) {
      bytes.append(block.data(), static_cast<std::size_t>(in.gcount()));
    }
  } catch (const std::ios_base::failure& e) {
    throw InternalError(absl::StrCat("Checkpoint::restore: reading \"", path.string(), "\" failed: ", e.what()));
  }
  DISTRIBUTE_CHECK(!in.bad(), InternalError, "Checkpoint::restore: reading \"", path.string(), "\" failed");
  return bytes;
}

// Every name, dtype and shape in which the file and the checkpoint's variables differ.
std::vector<std::string> find_mismatches(const NamedEntries& variables, const std::map<std::string, Entry>& entries) {
  std::vector<std::string> mismatches;
  std::set<std::string_view> named;
  for (const auto& [name, variable] : variables) {
    named.insert(name);
    auto it = entries.find(name);
    if (it == entries.end()) {
      mismatches.push_back(absl::StrCat("'", name, "': in the checkpoint, not in the file"));
      continue;
    }
    const Entry& e = it->second;
    if (e.type->dtype != variable.dtype()) {
      mismatches.push_back(absl::StrCat("'", name, "': dtype ", e.dtype_name, " in the file, ",
                                        dtype_name(variable.dtype()), " (", safetensors_name(variable.dtype()),
                                        ") in the checkpoint"));
    }
    if (Shape(e.dims) != variable.shape()) {
      mismatches.push_back(absl::StrCat("'", name, "': shape ", Shape(e.dims).to_string(), " in the file, ",
                                        variable.shape().to_string(), " in the checkpoint"));
    }
  }
  for (const auto& [name, e] : entries) {
    if (!named.contains(name)) mismatches.push_back(absl::StrCat("'", name, "': in the file, not in the checkpoint"));
  }
  return mismatches;
}

// The file's tensors in the order of `variables`, on the host.
std::vector<Tensor> values_of(const NamedEntries& variables, const Reader& reader,
                              const std::map<std::string, Entry>& entries) {
  std::vector<Tensor> values;
  values.reserve(variables.size());
  for (const auto& [name, variable] : variables) {
    const Entry& e = entries.at(name);
    Tensor t = Tensor::empty(variable.dtype(), variable.shape(), Device::cpu());
    if (t.nbytes() != 0) std::memcpy(t.raw_data(), reader.data(e), t.nbytes());
    values.push_back(std::move(t));
  }
  return values;
}

// Every strategy of the variables kept between two steps (detail::BetweenRuns) for its lifetime,
// taken in one order (by address) so that two checkpoints of shared strategies never wait for
// each other.
class StepBoundary {
 public:
  explicit StepBoundary(const std::vector<std::pair<std::string, Variable>>& variables) {
    std::vector<StrategyExtended*> strategies;
    for (const auto& [name, variable] : variables) strategies.push_back(&variable.distribute_strategy().extended());
    std::sort(strategies.begin(), strategies.end(), std::less<>());
    strategies.erase(std::unique(strategies.begin(), strategies.end()), strategies.end());
    for (StrategyExtended* strategy : strategies) held_.push_back(std::make_unique<detail::BetweenRuns>(*strategy));
  }

 private:
  std::vector<std::unique_ptr<detail::BetweenRuns>> held_;
};

}  // namespace

Checkpoint::Checkpoint(std::vector<std::pair<std::string, Variable>> variables,
                       std::vector<std::pair<std::string, Saveable>> state)
    : variables_(std::move(variables)) {
  for (const auto& [name, variable] : variables_) {
    check_name(name);
    DISTRIBUTE_CHECK(variable.defined(), InvalidArgumentError, "Checkpoint: the variable named '", name,
                     "' is undefined (default-constructed)");
    entries_.emplace_back(name, Saveable(variable));
  }
  for (auto& [name, saveable] : state) add(std::move(name), std::move(saveable));
}

void Checkpoint::check_name(const std::string& name) const {
  DISTRIBUTE_CHECK(!name.empty(), InvalidArgumentError, "Checkpoint: entry ", entries_.size(), " has an empty name");
  DISTRIBUTE_CHECK(name != kMetadataKey, InvalidArgumentError, "Checkpoint: entry ", entries_.size(), " is named '",
                   kMetadataKey, "', the key safetensors keeps for the header's metadata");
  DISTRIBUTE_CHECK(detail::is_valid_utf8(name), InvalidArgumentError, "Checkpoint: entry ", entries_.size(),
                   "'s name ", detail::quoted(name), " is not valid UTF-8 (the invalid bytes shown as U+FFFD); the "
                   "file's header is JSON, whose names are UTF-8");
  const bool repeated = std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == name; });
  DISTRIBUTE_CHECK(!repeated, InvalidArgumentError, "Checkpoint: the name '", name, "' is given twice");
}

void Checkpoint::add(std::string name, Saveable state) {
  check_name(name);
  entries_.emplace_back(std::move(name), std::move(state));
}

void Checkpoint::save(const std::filesystem::path& path) const {
  detail::require_cross_replica("Checkpoint::save");
  StrategyExtended* workers = detail::multi_worker_strategy_of(variables_);
  detail::agree_on_operation(workers, "Checkpoint::save", entries_);
  save_agreed(workers, path);
}

void Checkpoint::save_agreed(StrategyExtended* workers, const std::filesystem::path& path) const {
  const detail::timeline::Span span(detail::timeline::kProgramTrack, "checkpoint_save");
  // The values are the variables' own storage until written: the strategies stay between steps.
  const StepBoundary boundary(variables_);
  std::vector<Tensor> values = read_all(entries_);
  detail::on_chief(workers, [&] { write(path, entries_, values); });
}

std::vector<Tensor> Checkpoint::read_copies() const {
  const StepBoundary boundary(variables_);
  std::vector<Tensor> values = read_all(entries_);
  for (Tensor& value : values) value = value.clone();  // read_all may give a variable's own storage
  return values;
}

void Checkpoint::restore(const std::filesystem::path& path) {
  detail::require_cross_replica("Checkpoint::restore");
  StrategyExtended* workers = detail::multi_worker_strategy_of(variables_);
  detail::agree_on_operation(workers, "Checkpoint::restore", entries_);
  std::vector<Tensor> values;
  detail::on_chief(workers, [&] { values = load(path); });
  assign(workers, std::move(values));
}

std::vector<Tensor> Checkpoint::load(const std::filesystem::path& path) const {
  Reader reader(path, read_file(path));
  const std::map<std::string, Entry> entries = reader.parse();
  const std::vector<std::string> mismatches = find_mismatches(entries_, entries);
  DISTRIBUTE_CHECK(mismatches.empty(), InvalidArgumentError, "Checkpoint::restore: \"", path.string(),
                   "\" does not match the checkpoint's variables (", mismatches.size(), " mismatches):\n  ",
                   absl::StrJoin(mismatches, "\n  "));
  return values_of(entries_, reader, entries);
}

void Checkpoint::assign(StrategyExtended* workers, std::vector<Tensor> values) {
  if (workers != nullptr) {
    // The chief's values reach every worker before any changes: nothing changes unless all can.
    const bool chief = detail::is_chief(workers);
    values.resize(entries_.size());
    for (std::size_t k = 0; k < entries_.size(); ++k) {
      const Saveable& entry = entries_[k].second;
      values[k] = detail::broadcast_from_chief(
          *workers, chief ? values[k] : Tensor::empty(entry.dtype(), entry.shape(), Device::cpu()));
    }
  }
  const StepBoundary boundary(variables_);
  for (std::size_t k = 0; k < entries_.size(); ++k) entries_[k].second.write(values[k]);
}

}  // namespace distribute
