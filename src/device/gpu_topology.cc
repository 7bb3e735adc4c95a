// Logical GPUs: configuring them before first use, numbering, memory limits.
#include "device/gpu_topology.h"

#include "absl/strings/str_cat.h"
#include "device/gpu_runtime.h"
#include "distribute/check.h"

namespace distribute {
namespace detail {

GpuTopology::GpuTopology(int num_physical)
    : num_physical_(num_physical), configs_(static_cast<std::size_t>(num_physical)) {}

void GpuTopology::configure(int physical_gpu, std::vector<LogicalDeviceConfiguration> configs) {
  DISTRIBUTE_CHECK(physical_gpu >= 0 && physical_gpu < num_physical_, OutOfRangeError,
                   "set_logical_device_configuration: physical GPU ", physical_gpu, " does not exist; ",
                   num_physical_, " physical GPU(s) are visible",
                   num_physical_ == 0 ? absl::StrCat(" (", gpu_unavailable_reason(), ")") : std::string());
  DISTRIBUTE_CHECK(!configs.empty(), InvalidArgumentError,
                   "set_logical_device_configuration: the list of logical devices for physical GPU ", physical_gpu,
                   " is empty; pass one LogicalDeviceConfiguration per logical GPU wanted");
  MutexLock lock(mu_);
  DISTRIBUTE_CHECK(!frozen_.load(std::memory_order_relaxed), FailedPreconditionError,
                   "set_logical_device_configuration: GPUs are already in use, so their logical devices can no "
                   "longer change; configure them at the start of the program, before any strategy or tensor "
                   "uses a GPU");
  configs_[static_cast<std::size_t>(physical_gpu)] = std::move(configs);
}

const std::vector<GpuTopology::Logical>& GpuTopology::frozen() {
  if (frozen_.load(std::memory_order_acquire)) return logical_;
  MutexLock lock(mu_);
  if (!frozen_.load(std::memory_order_relaxed)) {
    for (int p = 0; p < num_physical_; ++p) {
      const auto& configs = configs_[static_cast<std::size_t>(p)];
      if (configs.empty()) {
        logical_.push_back({p, 0});
      } else {
        for (const LogicalDeviceConfiguration& c : configs) logical_.push_back({p, c.memory_limit});
      }
    }
    frozen_.store(true, std::memory_order_release);
  }
  return logical_;
}

int GpuTopology::num_logical() { return static_cast<int>(frozen().size()); }

const GpuTopology::Logical& GpuTopology::logical(const Device& gpu) {
  const std::vector<Logical>& all = frozen();
  DISTRIBUTE_CHECK(gpu.is_gpu() && gpu.index() < static_cast<int>(all.size()), OutOfRangeError, gpu.short_name(),
                   " does not exist: ", all.size(), " logical GPU(s) are visible",
                   all.empty() ? absl::StrCat(" (", gpu_unavailable_reason(), ")") : std::string(),
                   "; list_logical_gpus() names them");
  return all[static_cast<std::size_t>(gpu.index())];
}

int GpuTopology::physical_of(const Device& gpu) { return logical(gpu).physical; }

std::size_t GpuTopology::memory_limit(const Device& gpu) { return logical(gpu).memory_limit; }

GpuTopology& gpu_topology() {
  static GpuTopology* topology = new GpuTopology(gpu::physical_device_count());
  return *topology;
}

}  // namespace detail

int num_physical_gpus() { return detail::gpu_topology().num_physical(); }

std::string gpu_unavailable_reason() { return detail::gpu::unavailable_reason(); }

void set_logical_device_configuration(int physical_gpu, std::vector<LogicalDeviceConfiguration> configs) {
  DISTRIBUTE_CHECK(detail::gpu::built(), UnimplementedError,
                   "set_logical_device_configuration: this build of distribute has no GPU backend "
                   "(reconfigure with -DDISTRIBUTE_WITH_CUDA=ON)");
  detail::gpu_topology().configure(physical_gpu, std::move(configs));
}

std::vector<Device> list_logical_gpus() {
  std::vector<Device> out;
  const int n = detail::gpu_topology().num_logical();
  for (int k = 0; k < n; ++k) out.push_back(Device::gpu(k));
  return out;
}

int physical_gpu_of(const Device& gpu) { return detail::gpu_topology().physical_of(gpu); }

}  // namespace distribute
