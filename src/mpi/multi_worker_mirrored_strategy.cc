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
#include <numeric>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/error_code.h"
#include "base/timeline.h"
#include "device/gpu_runtime.h"
#include "distribute/device/gpu.h"
#include "distribute/mpi/mpi_cluster_resolver.h"
#include "mpi/cluster_resolver.h"
#include "cluster/coordinator.h"
#include "cluster/mpi/mpi_worker_transport.h"
#include "cluster/timeline_job.h"
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
  detail::MutexLock lock(cluster::mpi::MpiRuntime::instance().mutex());
  return cluster::mpi::processor_names(comm);
}

// Sends `mine` to every worker and receives theirs into `all`, worker by worker, during the
// strategy's construction.
void exchange_at_construction(cluster::WorkerTransport& engine, std::span<const std::byte> mine, std::span<std::byte> all,
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

// What each worker tells the others at construction: how its own checks ended (an absl::StatusCode,
// and the size of its message, which follows when a worker failed) and its number of replicas.
struct ConstructionReport {
  std::int32_t code;
  std::int32_t unused;
  std::uint64_t message_size;
  std::int64_t local_replicas;
};

// Every worker's report, exchanged. A worker whose checks failed (`failure`) rethrows its error
// and every other worker throws one of its type naming it, as after a failed step; workers with
// different numbers of replicas all throw the same InvalidArgumentError.
void agree_at_construction(cluster::WorkerTransport& engine, std::exception_ptr failure, std::int64_t local,
                           std::chrono::duration<double> timeout) {
  std::string message;
  ConstructionReport mine{0, 0, 0, local};
  if (failure) {
    message = detail::describe_exception(failure);
    const absl::StatusCode code = detail::status_code_of(failure, absl::StatusCode::kInternal);
    mine = {static_cast<std::int32_t>(code), 0, message.size(), local};
  }
  const int workers = engine.num_workers();
  std::vector<ConstructionReport> all(static_cast<std::size_t>(workers));
  exchange_at_construction(engine, std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)), timeout);
  const auto failed = std::find_if(all.begin(), all.end(), [](const ConstructionReport& r) { return r.code != 0; });
  if (failed != all.end()) {
    std::vector<std::size_t> sizes;
    for (const ConstructionReport& r : all) sizes.push_back(r.message_size);
    std::string messages(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}), '\0');
    engine.all_gather(message.data(), sizes, messages.data(), detail::deadline_after(timeout),
                      "the strategy's construction");
    if (failure) std::rethrow_exception(failure);
    const auto w = static_cast<std::size_t>(failed - all.begin());
    const std::size_t at = std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(w), std::size_t{0});
    throw_status(absl::Status(static_cast<absl::StatusCode>(failed->code),
                              absl::StrCat("worker ", w, " could not construct its strategy: ",
                                           messages.substr(at, sizes[w]))));
  }
  std::vector<std::int64_t> counts;
  for (const ConstructionReport& r : all) counts.push_back(r.local_replicas);
  DISTRIBUTE_CHECK(std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end(),
                   InvalidArgumentError, "MultiWorkerMirroredStrategy: ", local_replica_counts_text(counts),
                   "; every worker needs the same number of local devices");
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
void check_gpus_distinct(cluster::WorkerTransport& engine, const std::vector<Device>& devices,
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
  detail::MutexLock lock(cluster::mpi::MpiRuntime::instance().mutex());
  int keyval = MPI_KEYVAL_INVALID;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, stop_timeline_on_delete, &keyval, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
}

}  // namespace

MpiClusterResolver::MpiClusterResolver() {
  cluster::mpi::MpiRuntime::instance().ensure_initialized();
  MPI_Comm_rank(MPI_COMM_WORLD, &task_id_);
  spec_ = ClusterSpec({{"worker", rank_hosts(MPI_COMM_WORLD)}});
}

MpiClusterResolver::MpiClusterResolver(const MpiCommunicator& comm) {
  cluster::mpi::MpiRuntime::instance().ensure_initialized();
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
  // This worker's own checks. One that fails is kept until the other workers have heard of it: a
  // worker that threw here would leave them in the steps of the construction they take together
  // (MPI makes communicators in blocking calls), waiting for it.
  std::exception_ptr failure;
  std::vector<Device> devices;
  std::chrono::duration<double> timeout{0};  // until options.communication.timeout is known valid
  StalledCollectiveAction on_stall = StalledCollectiveAction::kEndJob;
  try {
    devices = detail::parse_mirrored_devices(options.local_devices);
    detail::check_timeout(options.communication.timeout, "MultiWorkerMirroredStrategy: options.communication.timeout",
                          "no timeout");
    timeout = options.communication.timeout;
    on_stall = options.on_stalled_collective;
    DISTRIBUTE_CHECK(on_stall == StalledCollectiveAction::kEndJob || on_stall == StalledCollectiveAction::kFailStrategy,
                     InvalidArgumentError, "MultiWorkerMirroredStrategy: options.on_stalled_collective is ",
                     static_cast<int>(on_stall), ", which is no StalledCollectiveAction (kEndJob or kFailStrategy)");
  } catch (...) {
    failure = std::current_exception();
    on_stall = StalledCollectiveAction::kEndJob;
  }
  const MpiCommunicator* comm = resolver_->mpi_communicator();
  const MPI_Comm base = comm != nullptr ? comm->comm : MPI_COMM_WORLD;
  auto engine = std::make_unique<cluster::mpi::MpiWorkerTransport>(
      base, on_stall == StalledCollectiveAction::kFailStrategy ? cluster::OnStall::kFailStrategy
                                                                 : cluster::OnStall::kEndJob);
  const int rank = engine->worker_id();
  const int workers = engine->num_workers();
  if (!failure) {
    try {
      detail::check_cluster_resolver(*resolver_, rank, workers);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const auto local = static_cast<std::int64_t>(devices.size());
  agree_at_construction(*engine, failure, local, timeout);
  if (devices[0].is_gpu()) {
    check_gpus_distinct(*engine, devices, options.communication.timeout);
  }
  auto coordinator = std::make_shared<cluster::Coordinator>(std::move(engine), static_cast<int>(local));
  MirroredStrategyOptions mirrored;
  mirrored.communication = options.communication;
  set_extended(detail::make_mirrored_extended(*this, std::move(devices), mirrored, std::move(coordinator)));
  // Every worker makes its first strategy, so every worker makes the timeline's transport here.
  static std::once_flag timeline_job;
  std::call_once(timeline_job, [&] {
    // The timeline's transport of its own, apart from the strategies' traffic.
    detail::timeline::set_job(cluster::make_timeline_job(
        std::make_unique<cluster::mpi::MpiWorkerTransport>(base, cluster::OnStall::kFailStrategy),
        options.communication.timeout, [] {
          int finalized = 0;
          MPI_Finalized(&finalized);
          return finalized == 0;
        }));
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
