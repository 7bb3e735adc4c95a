// CheckpointManager: numbered checkpoint files and the index that lists them.
#include "distribute/checkpoint/checkpoint_manager.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/chief.h"
#include "checkpoint/json_text.h"
#include "checkpoint/require_cross_replica.h"
#include "distribute/check.h"
#include "distribute/errors.h"

namespace distribute {
namespace {

constexpr const char* kExtension = ".safetensors";
constexpr const char* kLatestKey = "latest_checkpoint";
constexpr const char* kAllKey = "all_checkpoints";

// "<name>-<number>.safetensors" -> number; nullopt for any other file name, and for a number
// spelled otherwise than save spells it ("02", "-0"): each number has one file, which the index
// must name.
std::optional<std::int64_t> number_of(std::string_view file, std::string_view name) {
  const std::string_view extension = kExtension;
  if (!file.starts_with(name) || !file.ends_with(extension)) return std::nullopt;
  file.remove_prefix(name.size());
  file.remove_suffix(extension.size());
  if (!file.starts_with('-') || file.size() < 2) return std::nullopt;
  file.remove_prefix(1);
  std::int64_t number = 0;
  const auto [end, error] = std::from_chars(file.data(), file.data() + file.size(), number);
  if (error != std::errc() || end != file.data() + file.size() || number < 0) return std::nullopt;
  if (absl::StrCat(number) != file) return std::nullopt;
  return number;
}

// Whether a file can be created in `directory`, by creating one: permission bits do not bind root,
// and a read-only file system shows only then. 0, or the errno that says why not.
int write_error_in(const std::filesystem::path& directory, const std::string& name) {
  const std::filesystem::path probe = directory / absl::StrCat(".", name, ".probe.", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

void warn(const std::string& message) { std::fprintf(stderr, "distribute: warning: %s\n", message.c_str()); }

}  // namespace

CheckpointManager::CheckpointManager(Checkpoint checkpoint, std::filesystem::path directory,
                                     CheckpointManagerOptions options)
    : checkpoint_(std::move(checkpoint)), directory_(std::move(directory)), options_(std::move(options)) {
  const std::string& name = options_.checkpoint_name;
  DISTRIBUTE_CHECK(!name.empty() && name.find_first_of(std::string_view("/\0", 2)) == std::string::npos,
                   InvalidArgumentError, "CheckpointManager: checkpoint_name ", detail::quoted(name),
                   " is no file name; give a non-empty name without '/'");
  DISTRIBUTE_CHECK(detail::is_valid_utf8(name), InvalidArgumentError, "CheckpointManager: checkpoint_name ",
                   detail::quoted(name), " is not valid UTF-8 (the invalid bytes shown as U+FFFD); the index is "
                   "JSON, whose strings are UTF-8");
  DISTRIBUTE_CHECK(!options_.checkpoint_interval || *options_.checkpoint_interval > 0, InvalidArgumentError,
                   "CheckpointManager: checkpoint_interval is ", options_.checkpoint_interval.value_or(0),
                   "; give a number of steps > 0, or leave it unset to save at every call");
  DISTRIBUTE_CHECK(!directory_.empty(), InvalidArgumentError,
                   "CheckpointManager: the directory is empty; give the directory to keep checkpoints in");
  StrategyExtended* workers = detail::multi_worker_strategy_of(checkpoint_.variables());
  detail::agree_on_operation(workers, "CheckpointManager's constructor", checkpoint_.entries_);
  detail::on_chief(workers, [&] {
    std::error_code error;
    std::filesystem::create_directories(directory_, error);
    DISTRIBUTE_CHECK(!error, InvalidArgumentError, "CheckpointManager: cannot create the directory \"",
                     directory_.string(), "\": ", error.message());
    DISTRIBUTE_CHECK(std::filesystem::is_directory(directory_, error), InvalidArgumentError,
                     "CheckpointManager: \"", directory_.string(), "\" is not a directory");
    const int write_error = write_error_in(directory_, name);
    DISTRIBUTE_CHECK(write_error == 0, InvalidArgumentError, "CheckpointManager: cannot write in the directory \"",
                     directory_.string(), "\": ", std::strerror(write_error));
    read_index();
  });
  if (workers != nullptr) {
    // The chief's index is every worker's: they number, skip and restore alike.
    const std::string numbers = detail::chief_bytes(workers, absl::StrJoin(numbers_, " "));
    numbers_.clear();
    for (absl::string_view n : absl::StrSplit(numbers, ' ', absl::SkipEmpty())) {
      std::int64_t number = 0;
      DISTRIBUTE_CHECK(absl::SimpleAtoi(n, &number), InternalError,
                       "CheckpointManager: the chief's checkpoint numbers do not parse: ", numbers);
      numbers_.push_back(number);
    }
    // The paths every worker returns name the chief's files, whatever directory string it was given.
    directory_ = detail::chief_bytes(workers, directory_.string());
  }
}

std::filesystem::path CheckpointManager::path_of(std::int64_t number) const {
  return directory_ / absl::StrCat(options_.checkpoint_name, "-", number, kExtension);
}

std::filesystem::path CheckpointManager::index_path() const {
  return directory_ / absl::StrCat(options_.checkpoint_name, ".index.json");
}

void CheckpointManager::read_index() {
  const std::filesystem::path path = index_path();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return;
  const auto corrupt = [&] { return absl::StrCat("CheckpointManager: the index \"", path.string(), "\" "); };
  DISTRIBUTE_CHECK(std::filesystem::is_regular_file(path, error), DataLossError, corrupt(),
                   "is not a regular file");
  std::ifstream in(path);
  DISTRIBUTE_CHECK(in.is_open(), DataLossError, corrupt(), "cannot be opened: ", std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw DataLossError(absl::StrCat(corrupt(), "is not valid JSON (", e.what(), ")"));
  }
  const auto all = index.is_object() ? index.find(kAllKey) : index.end();
  DISTRIBUTE_CHECK(index.is_object() && all != index.end() && all->is_array(), DataLossError, corrupt(),
                   "has no \"", kAllKey, "\" list");
  std::set<std::int64_t> seen;
  for (const nlohmann::json& file : *all) {
    const std::optional<std::int64_t> number =
        file.is_string() ? number_of(file.get_ref<const std::string&>(), options_.checkpoint_name) : std::nullopt;
    DISTRIBUTE_CHECK(number.has_value(), DataLossError, corrupt(), "lists ", file.dump(), ", which is no \"",
                     options_.checkpoint_name, "-<number>", kExtension,
                     "\" file name (<number> as save writes it: decimal digits without a sign or leading zeros)");
    DISTRIBUTE_CHECK(seen.insert(*number).second, DataLossError, corrupt(), "lists ", file.dump(), " twice");
    numbers_.push_back(*number);
  }
}

void CheckpointManager::write_index(const std::vector<std::int64_t>& numbers) const {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (std::int64_t n : numbers) all.push_back(path_of(n).filename().string());
  const nlohmann::ordered_json index = {{kLatestKey, all.back()}, {kAllKey, all}};
  const std::string text = index.dump(2) + "\n";
  const detail::ByteRange piece{text.data(), text.size()};
  detail::write_atomically(index_path(), std::span(&piece, 1), "CheckpointManager::save");
}

std::optional<std::filesystem::path> CheckpointManager::save(std::optional<std::int64_t> checkpoint_number,
                                                             bool check_interval) {
  detail::require_cross_replica("CheckpointManager::save");
  DISTRIBUTE_CHECK(!checkpoint_number || *checkpoint_number >= 0, InvalidArgumentError,
                   "CheckpointManager::save: checkpoint_number is ", checkpoint_number.value_or(0),
                   "; checkpoints are numbered from 0");
  if (check_interval && options_.checkpoint_interval) {
    DISTRIBUTE_CHECK(checkpoint_number.has_value(), InvalidArgumentError,
                     "CheckpointManager::save: checkpoint_interval is set but no checkpoint_number was given; pass "
                     "the step as the number, or check_interval = false to save regardless");
    // A difference of two non-negative numbers, which cannot overflow as their sum could.
    if (!numbers_.empty() && *checkpoint_number - numbers_.back() < *options_.checkpoint_interval) {
      return std::nullopt;
    }
  }
  const std::int64_t largest = numbers_.empty() ? 0 : *std::max_element(numbers_.begin(), numbers_.end());
  DISTRIBUTE_CHECK(checkpoint_number || largest < std::numeric_limits<std::int64_t>::max(), OutOfRangeError,
                   "CheckpointManager::save: the largest number kept is ", largest,
                   ", and no int64 follows it; pass a checkpoint_number, or save in another directory");
  // Not value_or, which would compute largest + 1 for a given number too.
  const std::int64_t number = checkpoint_number ? *checkpoint_number : largest + 1;
  const std::filesystem::path path = path_of(number);
  const auto start = std::chrono::steady_clock::now();
  StrategyExtended* workers = detail::multi_worker_strategy_of(checkpoint_.variables());
  detail::agree_on_operation(workers, "CheckpointManager::save", checkpoint_.entries_);
  checkpoint_.save_agreed(workers, path);

  std::vector<std::int64_t> kept;
  std::copy_if(numbers_.begin(), numbers_.end(), std::back_inserter(kept), [&](std::int64_t n) { return n != number; });
  kept.push_back(number);
  std::vector<std::int64_t> dropped;
  if (options_.max_to_keep > 0 && kept.size() > static_cast<std::size_t>(options_.max_to_keep)) {
    const auto end = kept.end() - options_.max_to_keep;
    dropped.assign(kept.begin(), end);
    kept.erase(kept.begin(), end);
  }
  detail::on_chief(workers, [&] { write_index(kept); });
  numbers_ = std::move(kept);
  last_save_time_ = std::chrono::steady_clock::now() - start;
  if (!detail::is_chief(workers)) return path;
  // Only now, with the new file and the index that names it on disk, may the oldest go.
  for (std::int64_t n : dropped) {
    std::error_code error;
    std::filesystem::remove(path_of(n), error);
    if (error) warn(absl::StrCat("CheckpointManager: cannot delete \"", path_of(n).string(), "\": ", error.message()));
  }
  if (!dropped.empty()) detail::sync_directory(index_path());
  return path;
}

std::optional<std::filesystem::path> CheckpointManager::latest_checkpoint() const {
  if (numbers_.empty()) return std::nullopt;
  return path_of(numbers_.back());
}

std::vector<std::filesystem::path> CheckpointManager::checkpoints() const {
  std::vector<std::filesystem::path> paths;
  paths.reserve(numbers_.size());
  for (std::int64_t n : numbers_) paths.push_back(path_of(n));
  return paths;
}

std::optional<std::filesystem::path> CheckpointManager::restore_or_initialize() {
  detail::require_cross_replica("CheckpointManager::restore_or_initialize");
  StrategyExtended* workers = detail::multi_worker_strategy_of(checkpoint_.variables());
  detail::agree_on_operation(workers, "CheckpointManager::restore_or_initialize", checkpoint_.entries_);
  std::vector<Tensor> values;
  std::optional<std::int64_t> chosen;
  detail::on_chief(workers, [&] { chosen = load_newest_readable(values); });
  if (workers != nullptr) {
    const std::string number = detail::chief_bytes(workers, chosen ? absl::StrCat(*chosen) : std::string());
    chosen.reset();
    if (std::int64_t n = 0; absl::SimpleAtoi(number, &n)) chosen = n;
  }
  if (!chosen) return std::nullopt;
  checkpoint_.assign(workers, std::move(values));
  return path_of(*chosen);
}

std::optional<std::int64_t> CheckpointManager::load_newest_readable(std::vector<Tensor>& values) const {
  std::vector<std::string> failures;
  for (auto it = numbers_.rbegin(); it != numbers_.rend(); ++it) {
    const std::filesystem::path path = path_of(*it);
    std::string failure;
    std::error_code error;
    if (!std::filesystem::exists(path, error)) {
      failure = absl::StrCat("\"", path.string(), "\", named by the index \"", index_path().string(),
                             "\", is missing");
    } else {
      try {
        values = checkpoint_.load(path);
        return *it;
      } catch (const DataLossError& e) {
        failure = e.what();
      }
    }
    if (std::next(it) != numbers_.rend()) {
      warn(absl::StrCat("CheckpointManager::restore_or_initialize: ", failure, "; falling back to \"",
                        path_of(*std::next(it)).string(), "\""));
    }
    failures.push_back(std::move(failure));
  }
  DISTRIBUTE_CHECK(failures.empty(), DataLossError, "CheckpointManager::restore_or_initialize: none of the ",
                   failures.size(), " checkpoints in \"", index_path().string(), "\" can be restored:\n  ",
                   absl::StrJoin(failures, "\n  "));
  return std::nullopt;
}

}  // namespace distribute
