// MultiWorkerMirroredStrategy and MpiClusterResolver: MirroredStrategy's replicas on each worker,
// joined through MPI.
#include "distribute/mpi/multi_worker_mirrored_strategy.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/timeline.h"
#include "device/gpu_runtime.h"
#include "distribute/device/gpu.h"
#include "distribute/mpi/mpi_cluster_resolver.h"
#include "mpi/mpi_worker_transport.h"
#include "strategy/mirrored_extended.h"

namespace distribute {
namespace {

// This process's host name, NUL-padded to MPI_MAX_PROCESSOR_NAME.
std::array<char, MPI_MAX_PROCESSOR_NAME> processor_name() {
  std::array<char, MPI_MAX_PROCESSOR_NAME> name{};
  int length = 0;
  MPI_Get_processor_name(name.data(), &length);
  return name;
}

// Every rank's host name, gathered over `comm`.
std::vector<std::string> rank_hosts(MPI_Comm comm) {
  const std::array<char, MPI_MAX_PROCESSOR_NAME> name = processor_name();
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) hosts.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return hosts;
}

// Sends `mine` to every worker and receives theirs into `all`, worker by worker, during the
// strategy's construction.
void exchange_at_construction(detail::WorkerTransport& engine, std::span<const std::byte> mine, std::span<std::byte> all,
                              std::chrono::duration<double> timeout) {
  const std::vector<int> missing = engine.exchange(mine, all, detail::deadline_after(timeout));
  DISTRIBUTE_CHECK(missing.empty(), DeadlineExceededError, "MultiWorkerMirroredStrategy: timed out after ",
                   timeout.count(), " s: workers ", absl::StrJoin(missing, ", "), " did not construct their strategy");
}

// "worker 0 has 3 local replicas, workers 1, 2 have 2": the workers grouped by their count, in the
// order of the first worker of each group. Made from the exchanged counts alone, so that every
// worker says the same.
std::string local_replica_counts_text(const std::vector<std::int64_t>& counts) {
  std::vector<std::pair<std::int64_t, std::vector<int>>> groups;
  for (std::size_t w = 0; w < counts.size(); ++w) {
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == counts[w]; });
    if (group == groups.end()) group = groups.insert(groups.end(), {counts[w], {}});
    group->second.push_back(static_cast<int>(w));
  }
  std::vector<std::string> parts;
  for (const auto& [count, workers] : groups) {
    const bool one = workers.size() == 1;
    parts.push_back(absl::StrCat(one ? "worker " : "workers ", absl::StrJoin(workers, ", "), one ? " has " : " have ",
                                 count, parts.empty() ? " local replicas" : ""));
  }
  return absl::StrJoin(parts, ", ");
}

// What names this worker's host to NCCL: NCCL_HOSTID where set (NCCL's own override), else the
// host name.
std::string nccl_host_name() {
  if (const char* id = std::getenv("NCCL_HOSTID"); id != nullptr && *id != '\0') return id;
  return processor_name().data();
}

// NCCL refuses two ranks on one GPU of one host, with an error that names neither the workers nor
// the remedy; workers that share a host and list the same GPU (every GPU, by default) are told
// here, each the same error, before any NCCL communicator is made.
void check_gpus_distinct(detail::WorkerTransport& engine, const std::vector<Device>& devices,
                         std::chrono::duration<double> timeout) {
  constexpr std::size_t kField = MPI_MAX_PROCESSOR_NAME;  // a host name or a PCI bus id, NUL-padded
  const std::size_t fields = 1 + devices.size();
  std::vector<char> mine(fields * kField, '\0');
  const auto put = [&](std::size_t field, const std::string& text) {
    text.copy(mine.data() + field * kField, kField - 1);
  };
  put(0, nccl_host_name());
  for (std::size_t l = 0; l < devices.size(); ++l) put(1 + l, detail::gpu::pci_bus_id(physical_gpu_of(devices[l])));
  const int workers = engine.num_workers();
  std::vector<char> all(mine.size() * static_cast<std::size_t>(workers));
  exchange_at_construction(engine, std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)), timeout);
  const auto field = [&](int w, std::size_t f) {
    return std::string(all.data() + (static_cast<std::size_t>(w) * fields + f) * kField);
  };
  // Every replica of every worker as (host, GPU, worker, local replica), sorted: replicas of one
  // GPU of one host lie side by side, and the first pair of them from two workers is named.
  struct Use {
    std::string host;
    std::string pci;
    int worker;
    std::size_t local;
    auto operator<=>(const Use&) const = default;
  };
  std::vector<Use> uses;
  for (int w = 0; w < workers; ++w) {
    for (std::size_t l = 0; l < devices.size(); ++l) uses.push_back({field(w, 0), field(w, 1 + l), w, l});
  }
  std::sort(uses.begin(), uses.end());
  for (std::size_t i = 0; i + 1 < uses.size(); ++i) {
    const Use& a = uses[i];
    for (std::size_t j = i + 1; j < uses.size() && uses[j].host == a.host && uses[j].pci == a.pci; ++j) {
      const Use& b = uses[j];
      DISTRIBUTE_CHECK(b.worker == a.worker, InvalidArgumentError, "MultiWorkerMirroredStrategy: workers ", a.worker,
                       " and ", b.worker, " run on host ", a.host, " and both list the GPU at PCI ", a.pci,
                       " (their replicas ", a.worker * devices.size() + a.local, " and ",
                       b.worker * devices.size() + b.local, "); NCCL needs one GPU per replica: give each worker "
                       "its own GPUs (local_devices, or CUDA_VISIBLE_DEVICES set per rank)");
    }
  }
}

// A program that finalises MPI itself does so before exit, where the timeline would find the
// other workers gone and each worker would write its own events to the one path. MPI_Finalize
// first deletes MPI_COMM_SELF's attributes, with every process inside it and MPI still working:
// the timeline stops there, collectively.
int stop_timeline_on_delete(MPI_Comm, int, void*, void*) {
  detail::timeline::stop_at_exit();
  return MPI_SUCCESS;
}

void stop_timeline_at_mpi_finalize() {
  detail::MutexLock lock(detail::mpi_mutex);
  int keyval = MPI_KEYVAL_INVALID;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, stop_timeline_on_delete, &keyval, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
}

// The timeline's way to the other workers (base/timeline.h): a transport of its own on the
// workers of the process's first multi-worker strategy, kept until exit.
class TimelineJob final : public detail::timeline::Job {
 public:
  // Without a strategy timeout, how long Timeline::stop() waits for a worker.
  static constexpr std::chrono::seconds kDefaultTimeout{60};

  TimelineJob(MPI_Comm base, std::chrono::duration<double> timeout)
      : transport_(base, StalledCollectiveAction::kFailStrategy),
        timeout_(timeout.count() > 0 ? timeout : kDefaultTimeout) {}
  int worker_id() const override { return transport_.worker_id(); }
  int num_workers() const override { return transport_.num_workers(); }
  std::string host() const override { return transport_.hosts()[static_cast<std::size_t>(worker_id())]; }
  bool reachable() const override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    return finalized == 0;
  }
  std::chrono::duration<double> timeout() const override { return timeout_; }
  std::vector<int> exchange(std::int64_t mine, std::span<std::int64_t> all, detail::Deadline deadline) override {
    return transport_.exchange(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(all), deadline);
  }
  std::string all_gather(const std::string& mine, std::span<const std::size_t> sizes,
                         detail::Deadline deadline) override {
    std::size_t total = 0;
    for (std::size_t size : sizes) total += size;
    std::string all(total, '\0');
    transport_.all_gather(mine.data(), sizes, all.data(), deadline, "Timeline::stop's gathering of the workers' events");
    return all;
  }

 private:
  detail::MpiWorkerTransport transport_;
  const std::chrono::duration<double> timeout_;
};

}  // namespace

MpiClusterResolver::MpiClusterResolver() {
  detail::ensure_mpi_initialized();
  MPI_Comm_rank(MPI_COMM_WORLD, &task_id_);
  spec_ = ClusterSpec({{"worker", rank_hosts(MPI_COMM_WORLD)}});
}

MpiClusterResolver::MpiClusterResolver(const MpiCommunicator& comm) {
  detail::ensure_mpi_initialized();
  DISTRIBUTE_CHECK(comm.comm != MPI_COMM_NULL, InvalidArgumentError,
                   "MpiClusterResolver: the communicator is MPI_COMM_NULL; only the processes that are its ranks "
                   "(MPI_Comm_split gave the others MPI_COMM_NULL) can be its workers");
  int inter = 0;
  MPI_Comm_test_inter(comm.comm, &inter);
  DISTRIBUTE_CHECK(!inter, InvalidArgumentError,
                   "MpiClusterResolver: the communicator is an intercommunicator; pass an intracommunicator "
                   "(MPI_Intercomm_merge makes one)");
  MPI_Comm_rank(comm.comm, &task_id_);
  spec_ = ClusterSpec({{"worker", rank_hosts(comm.comm)}});
  comm_ = std::make_shared<const MpiCommunicator>(comm);
}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy()
    : MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions{}) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions options)
    : resolver_(options.cluster_resolver != nullptr ? std::move(options.cluster_resolver)
                                                    : std::make_shared<const MpiClusterResolver>()) {
  std::vector<Device> devices = detail::parse_mirrored_devices(options.local_devices);
  // Before the first exchange, which the timeout bounds.
  detail::check_timeout(options.communication.timeout, "MultiWorkerMirroredStrategy: options.communication.timeout",
                        "no timeout");
  const StalledCollectiveAction on_stall = options.on_stalled_collective;
  DISTRIBUTE_CHECK(on_stall == StalledCollectiveAction::kEndJob || on_stall == StalledCollectiveAction::kFailStrategy,
                   InvalidArgumentError, "MultiWorkerMirroredStrategy: options.on_stalled_collective is ",
                   static_cast<int>(on_stall), ", which is no StalledCollectiveAction (kEndJob or kFailStrategy)");
  const MpiCommunicator* comm = resolver_->mpi_communicator();
  const MPI_Comm base = comm != nullptr ? comm->comm : MPI_COMM_WORLD;
  auto engine = std::make_unique<detail::MpiWorkerTransport>(base, on_stall);
  const int rank = engine->worker_id();
  const int workers = engine->num_workers();
  const int tasks = resolver_->cluster_spec().num_tasks("worker") + resolver_->cluster_spec().num_tasks("chief");
  DISTRIBUTE_CHECK(tasks == workers, InvalidArgumentError, "MultiWorkerMirroredStrategy: the cluster resolver lists ",
                   tasks, " tasks but MPI launched ", workers, " processes; launch one process per task");
  const int task = resolver_->task_id();
  DISTRIBUTE_CHECK(task == rank, InvalidArgumentError, "MultiWorkerMirroredStrategy: the cluster resolver says this "
                   "process is task ", task, " but it is worker ", rank, " (its rank among the ", workers,
                   " MPI processes that are the workers); a resolver's task_id() must be that rank");
  // Every worker must bring as many replicas: a collective's ids and MEANs count on it.
  const std::int64_t local = static_cast<std::int64_t>(devices.size());
  std::vector<std::int64_t> all(static_cast<std::size_t>(workers));
  exchange_at_construction(*engine, std::as_bytes(std::span(&local, 1)), std::as_writable_bytes(std::span(all)),
                           options.communication.timeout);
  DISTRIBUTE_CHECK(std::adjacent_find(all.begin(), all.end(), std::not_equal_to<>()) == all.end(),
                   InvalidArgumentError, "MultiWorkerMirroredStrategy: ", local_replica_counts_text(all),
                   "; every worker needs the same number of local devices");
  if (devices[0].is_gpu()) {
    check_gpus_distinct(*engine, devices, options.communication.timeout);
  }
  auto group = std::make_shared<detail::WorkerGroup>(std::move(engine), static_cast<int>(local));
  MirroredStrategyOptions mirrored;
  mirrored.communication = options.communication;
  set_extended(detail::make_mirrored_extended(*this, std::move(devices), mirrored, std::move(group)));
  // Every worker makes its first strategy, so every worker makes the timeline's transport here.
  static std::once_flag timeline_job;
  std::call_once(timeline_job, [&] {
    detail::timeline::set_job(std::make_unique<TimelineJob>(base, options.communication.timeout));
    stop_timeline_at_mpi_finalize();
  });
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() = default;

std::string MultiWorkerMirroredStrategy::name() const {
  std::vector<std::string> names;
  for (const Device& d : extended().worker_devices()) names.push_back(d.short_name());
  return absl::StrCat("MultiWorkerMirroredStrategy(worker ", extended().worker_id(), " of ", extended().num_workers(),
                      ": ", absl::StrJoin(names, ", "), ")");
}

const ClusterResolver& MultiWorkerMirroredStrategy::cluster_resolver() const { return *resolver_; }

}  // namespace distribute
