// Device: parsing TF device strings, names, and the thread's default device.
#include "distribute/device/device.h"

#include <utility>

#include <charconv>
#include <vector>

#include "absl/container/node_hash_set.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "base/mutex.h"
#include "distribute/check.h"

namespace distribute {
namespace {

constexpr int kMaxDeviceIndex = 1 << 16;

[[noreturn]] void bad_device(absl::string_view spec, absl::string_view why) {
  throw InvalidArgumentError(absl::StrCat(
      "invalid device string \"", spec, "\": ", why,
      "; expected \"CPU:0\", \"GPU:1\", \"/device:GPU:1\" or "
      "\"/job:localhost/replica:0/task:0/device:CPU:0\""));
}

int parse_index(absl::string_view spec, absl::string_view text, absl::string_view field) {
  int value = -1;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 0 || value > kMaxDeviceIndex) {
    bad_device(spec, absl::StrCat(field, " \"", text, "\" is not an integer in [0, ", kMaxDeviceIndex, "]"));
  }
  return value;
}

const std::string& localhost() {
  static const std::string* name = new std::string("localhost");
  return *name;
}

// Job names other than "localhost", each stored once for the whole program (never freed: devices
// hold pointers to them).
struct JobNames {
  detail::Mutex mu;
  absl::node_hash_set<std::string> names ABSL_GUARDED_BY(mu);
};

// The one copy of `job` for the whole program (null for "localhost").
const std::string* intern_job(absl::string_view job) {
  if (job == localhost()) return nullptr;
  static JobNames* jobs = new JobNames();
  detail::MutexLock lock(jobs->mu);
  return &*jobs->names.emplace(job).first;
}

}  // namespace

const std::string& Device::job() const { return job_ != nullptr ? *job_ : localhost(); }

std::strong_ordering operator<=>(const Device& a, const Device& b) {
  if (auto c = a.type_ <=> b.type_; c != 0) return c;
  if (auto c = a.index_ <=> b.index_; c != 0) return c;
  if (auto c = a.job().compare(b.job()) <=> 0; c != 0) return c;
  if (auto c = a.replica_ <=> b.replica_; c != 0) return c;
  return a.task_ <=> b.task_;
}

Device::Device(Type type, int index) : type_(type), index_(index) {
  DISTRIBUTE_CHECK(index >= 0 && index <= kMaxDeviceIndex, InvalidArgumentError, "device index ",
                   index, " is out of range [0, ", kMaxDeviceIndex, "]");
}

Device Device::parse(std::string_view spec_text) {
  const absl::string_view spec(spec_text.data(), spec_text.size());
  Device device;
  bool have_device = false;
  auto set_type_and_index = [&](absl::string_view type, absl::string_view index) {
    if (have_device) bad_device(spec, "it names more than one device");
    const std::string lower = absl::AsciiStrToLower(type);
    if (lower == "cpu") {
      device.type_ = Type::kCpu;
    } else if (lower == "gpu") {
      device.type_ = Type::kGpu;
    } else {
      bad_device(spec, absl::StrCat("unknown device type \"", type, "\" (CPU and GPU are known)"));
    }
    device.index_ = parse_index(spec, index, "device index");
    have_device = true;
  };
  const bool full = !spec.empty() && spec.front() == '/';
  if (absl::StrContains(spec, "//") || (spec.size() > 1 && spec.back() == '/')) {
    bad_device(spec, "it has an empty part between slashes");
  }
  std::vector<absl::string_view> parts = absl::StrSplit(spec, '/', absl::SkipEmpty());
  if (parts.empty()) bad_device(spec, "it is empty");
  if (!full && parts.size() != 1) bad_device(spec, "a short name is TYPE:INDEX");
  for (absl::string_view part : parts) {
    std::vector<absl::string_view> kv = absl::StrSplit(part, absl::MaxSplits(':', 1));
    if (kv.size() == 1) bad_device(spec, absl::StrCat("\"", part, "\" has no ':'"));
    const std::string key = absl::AsciiStrToLower(kv[0]);
    if (full && key == "job") {
      if (kv[1].empty()) bad_device(spec, "the job name is empty");
      device.job_ = intern_job(kv[1]);
    } else if (full && key == "replica") {
      device.replica_ = parse_index(spec, kv[1], "replica");
    } else if (full && key == "task") {
      device.task_ = parse_index(spec, kv[1], "task");
    } else if (full && key == "device") {
      std::vector<absl::string_view> tv = absl::StrSplit(kv[1], absl::MaxSplits(':', 1));
      if (tv.size() != 2) bad_device(spec, "the device part needs TYPE:INDEX");
      set_type_and_index(tv[0], tv[1]);
    } else {
      set_type_and_index(kv[0], kv[1]);
    }
  }
  if (!have_device) bad_device(spec, "it names no device type and index");
  return device;
}

std::string Device::to_string() const {
  return absl::StrCat("/job:", job(), "/replica:", replica_, "/task:", task_, "/device:", short_name());
}

std::string Device::short_name() const {
  return absl::StrCat(type_ == Type::kCpu ? "CPU:" : "GPU:", index_);
}

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.to_string(); }

namespace {
constinit thread_local const Device* t_default_device = nullptr;
}  // namespace

Device default_device() { return t_default_device != nullptr ? *t_default_device : Device::cpu(); }

Device default_host_device() {
  const Device here = default_device();
  return here.is_cpu() ? here : Device::cpu();
}

const Device* detail::set_default_device(const Device* device) noexcept {
  return std::exchange(t_default_device, device);
}

}  // namespace distribute
