// MultiWorkerMirroredStrategy: MirroredStrategy's replicas on each worker, joined through the
// backend it chooses (multi_worker/backends.h). What every worker checks and agrees on at
// construction is here, the same over every backend.
#include "distribute/strategy/multi_worker_mirrored_strategy.h"

#include <algorithm>
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
#include "base/host_name.h"
#include "base/timeline.h"
#include "cluster/coordinator.h"
#include "cluster/timeline_job.h"
#include "device/gpu_runtime.h"
#include "distribute/device/gpu.h"
#include "multi_worker/backends.h"
#include "multi_worker/failed_transport.h"
#include "strategy/mirrored_extended.h"

namespace distribute {
namespace {

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
  return detail::host_name();
}

// NCCL refuses two ranks on one GPU of one host, with an error that names neither the workers nor
// the remedy; workers that share a host and list the same GPU (every GPU, by default) are told
// here, each the same error, before any NCCL communicator is made.
void check_gpus_distinct(cluster::WorkerTransport& engine, const std::vector<Device>& devices,
                         std::chrono::duration<double> timeout) {
  constexpr std::size_t kField = 256;  // a host name or a PCI bus id, NUL-padded
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

const char* kBuildBackends = DISTRIBUTE_HAS_MPI && DISTRIBUTE_HAS_GLOO ? "MPI and Gloo"
                             : DISTRIBUTE_HAS_MPI                     ? "MPI only"
                                                                      : "Gloo only";

// The backend the options ask for, where this build has it.
CollectiveBackend choose_backend(CollectiveBackend asked, [[maybe_unused]] const ClusterResolver* resolver) {
  switch (asked) {
    case CollectiveBackend::kMpi:
      DISTRIBUTE_CHECK(DISTRIBUTE_HAS_MPI, InvalidArgumentError,
                       "MultiWorkerMirroredStrategy: options.backend is kMpi, but this build of distribute has ",
                       kBuildBackends, ": install Open MPI (Debian: libopenmpi-dev openmpi-bin) and rebuild it with "
                       "-DDISTRIBUTE_WITH_MPI=ON, or choose kGloo");
      return asked;
    case CollectiveBackend::kGloo:
      DISTRIBUTE_CHECK(DISTRIBUTE_HAS_GLOO, InvalidArgumentError,
                       "MultiWorkerMirroredStrategy: options.backend is kGloo, but this build of distribute has ",
                       kBuildBackends, ": install Gloo (Debian: libgloo-dev) and rebuild it with "
                       "-DDISTRIBUTE_WITH_GLOO=ON, or choose kMpi");
#if DISTRIBUTE_HAS_MPI
      DISTRIBUTE_CHECK(!detail::is_mpi_resolver(resolver), InvalidArgumentError,
                       "MultiWorkerMirroredStrategy: options.backend is kGloo but the cluster resolver is an "
                       "MpiClusterResolver, whose workers are MPI's ranks; choose kMpi, or describe the job with a "
                       "TFConfigClusterResolver or EnvironmentClusterResolver");
#endif
      return asked;
    case CollectiveBackend::kAuto:
#if DISTRIBUTE_HAS_MPI
      if (detail::mpi_is_chosen(resolver)) return CollectiveBackend::kMpi;
#endif
      return DISTRIBUTE_HAS_GLOO ? CollectiveBackend::kGloo : CollectiveBackend::kMpi;
  }
  throw InvalidArgumentError(absl::StrCat("MultiWorkerMirroredStrategy: options.backend is ", static_cast<int>(asked),
                                          ", which is no CollectiveBackend (kAuto, kMpi or kGloo)"));
}

std::shared_ptr<const ClusterResolver> default_resolver(CollectiveBackend backend) {
#if DISTRIBUTE_HAS_MPI
  if (backend == CollectiveBackend::kMpi) return detail::default_mpi_resolver();
#endif
#if DISTRIBUTE_HAS_GLOO
  if (backend == CollectiveBackend::kGloo) return detail::default_gloo_resolver();
#endif
  throw InternalError(absl::StrCat("MultiWorkerMirroredStrategy: no ", backend_name(backend), " backend"));
}

detail::WorkerConnection connect(CollectiveBackend backend, const ClusterResolver& resolver,
                                 [[maybe_unused]] const GlooOptions& gloo, cluster::OnStall on_stall,
                                 std::exception_ptr failure) {
#if DISTRIBUTE_HAS_MPI
  if (backend == CollectiveBackend::kMpi) return detail::connect_over_mpi(resolver, on_stall, std::move(failure));
#endif
#if DISTRIBUTE_HAS_GLOO
  if (backend == CollectiveBackend::kGloo) {
    return detail::connect_over_gloo(resolver, gloo, on_stall, std::move(failure));
  }
#endif
  throw InternalError(absl::StrCat("MultiWorkerMirroredStrategy: no ", backend_name(backend), " backend"));
}

// The options' elastic settings, checked: InvalidArgumentError for a backend other than Gloo
// or bounds that cannot hold.
void check_elastic_options(const ElasticOptions& elastic, CollectiveBackend backend) {
  DISTRIBUTE_CHECK(elastic.min_workers >= 1 && (elastic.max_workers == 0 || elastic.max_workers >= elastic.min_workers),
                   InvalidArgumentError, "MultiWorkerMirroredStrategy: options.elastic has min_workers ",
                   elastic.min_workers, " and max_workers ", elastic.max_workers,
                   "; give 1 <= min_workers <= max_workers (max_workers 0: no limit)");
  DISTRIBUTE_CHECK(elastic.settle_time > std::chrono::milliseconds::zero(), InvalidArgumentError,
                   "MultiWorkerMirroredStrategy: options.elastic.settle_time is ", elastic.settle_time.count(),
                   " ms; give a positive time (1 s by default)");
  DISTRIBUTE_CHECK(backend == CollectiveBackend::kGloo, InvalidArgumentError,
                   "MultiWorkerMirroredStrategy: options.elastic needs the Gloo backend, whose workers meet at a "
                   "rendezvous store and can change; this strategy chose ", backend_name(backend),
                   " (MPI's ranks are fixed for the job): set options.backend to kGloo and start the workers "
                   "without mpirun");
}

// "worker 2 on host1".
std::string member_text(int id, const detail::ElasticMember& member) {
  return absl::StrCat("worker ", id, " on ", member.host);
}

// What changed from `before` (this worker's generation before, null for its first) to `now`.
MembershipChange describe_change(const detail::ElasticGeneration* before, const detail::ElasticGeneration& now,
                                 std::string reason) {
  MembershipChange change;
  change.generation = now.number;
  change.num_workers = now.num_workers();
  change.worker_id = now.worker_id;
  change.reason = std::move(reason);
  const bool follows = before != nullptr && before->number == now.previous_number;
  if (follows) change.previous_num_workers = before->num_workers();
  std::vector<bool> stayed(follows ? before->members.size() : 0, false);
  for (int w = 0; w < now.num_workers(); ++w) {
    const detail::ElasticMember& member = now.members[static_cast<std::size_t>(w)];
    if (member.previous_id < 0) {
      if (now.number > 0) change.joined.push_back(member_text(w, member));
    } else if (follows) {
      stayed[static_cast<std::size_t>(member.previous_id)] = true;
    }
  }
  for (std::size_t w = 0; w < stayed.size(); ++w) {
    if (!stayed[w]) change.left.push_back(member_text(static_cast<int>(w), before->members[w]));
  }
  return change;
}

}  // namespace

// An elastic strategy's job: its membership, its generation now, and what each generation's engine
// is made from.
struct MultiWorkerMirroredStrategy::Elastic {
#if DISTRIBUTE_HAS_GLOO
  std::shared_ptr<detail::ElasticGlooJob> job;
#endif
  detail::ElasticGeneration generation;
  ElasticOptions options;
  std::vector<Device> devices;
  CommunicationOptions communication;

  // The engine of the current generation: its transport, the checks every worker makes at
  // construction, the coordinator.
  std::unique_ptr<StrategyExtended> make_engine(Strategy& strategy) const;
};

std::unique_ptr<StrategyExtended> MultiWorkerMirroredStrategy::Elastic::make_engine(Strategy& strategy) const {
#if DISTRIBUTE_HAS_GLOO
  std::unique_ptr<cluster::WorkerTransport> transport = detail::connect_generation(*job, generation);
  const auto local = static_cast<std::int64_t>(devices.size());
  agree_at_construction(*transport, nullptr, local, communication.timeout);
  if (devices[0].is_gpu()) check_gpus_distinct(*transport, devices, communication.timeout);
  auto coordinator = std::make_shared<cluster::Coordinator>(std::move(transport), static_cast<int>(local));
  MirroredStrategyOptions mirrored;
  mirrored.communication = communication;
  return detail::make_mirrored_extended(strategy, devices, mirrored, std::move(coordinator));
#else
  (void)strategy;
  throw InternalError("MultiWorkerMirroredStrategy: elastic without Gloo");
#endif
}

namespace {

// Tells this worker's program of `change`: the timeline, then the options' callback.
void report_change(const ElasticOptions& options, const MembershipChange& change) {
  if (detail::timeline::on()) {
    detail::timeline::instant(detail::timeline::kProgramTrack, "membership_change",
                              absl::StrCat("generation ", change.generation, ": ", change.num_workers, " workers (",
                                           change.reason, ")"));
  }
  if (options.on_membership_change) options.on_membership_change(change);
}

}  // namespace

const char* backend_name(CollectiveBackend backend) {
  switch (backend) {
    case CollectiveBackend::kAuto:
      return "auto";
    case CollectiveBackend::kMpi:
      return "MPI";
    case CollectiveBackend::kGloo:
      return "Gloo";
  }
  return "unknown";
}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy()
    : MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions{}) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions options)
    : backend_(choose_backend(options.backend, options.cluster_resolver.get())) {
  resolver_ = options.cluster_resolver != nullptr ? std::move(options.cluster_resolver) : default_resolver(backend_);
  if (options.elastic.min_workers != 0 || options.elastic.max_workers != 0) {
    // An elastic worker's checks fail before it joins: the others form their generations without it.
    check_elastic_options(options.elastic, backend_);
    detail::check_timeout(options.communication.timeout, "MultiWorkerMirroredStrategy: options.communication.timeout",
                          "no timeout");
    start_elastic(options, detail::parse_mirrored_devices(options.local_devices));
    return;
  }
  // This worker's own checks. One that fails is kept until the other workers have heard of it: a
  // worker that threw here would leave them in the steps of the construction they take together
  // (MPI makes communicators in blocking calls; Gloo's workers wait for each other at the store),
  // waiting for it.
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
  const cluster::OnStall stall =
      on_stall == StalledCollectiveAction::kFailStrategy ? cluster::OnStall::kFailStrategy : cluster::OnStall::kEndJob;
  detail::WorkerConnection connection = connect(backend_, *resolver_, options.gloo, stall, failure);
  const auto local = static_cast<std::int64_t>(devices.size());
  agree_at_construction(*connection.transport, connection.failure, local, timeout);
  if (devices[0].is_gpu()) {
    check_gpus_distinct(*connection.transport, devices, options.communication.timeout);
  }
  auto coordinator = std::make_shared<cluster::Coordinator>(std::move(connection.transport), static_cast<int>(local));
  MirroredStrategyOptions mirrored;
  mirrored.communication = options.communication;
  set_extended(detail::make_mirrored_extended(*this, std::move(devices), mirrored, std::move(coordinator)));
  // Every worker makes its first strategy, so every worker makes the timeline's transport here.
  static std::once_flag timeline_job;
  std::call_once(timeline_job, [&] {
    // The timeline's transport of its own, apart from the strategies' traffic.
    detail::timeline::set_job(cluster::make_timeline_job(connection.make_timeline_transport(),
                                                         options.communication.timeout,
                                                         std::move(connection.timeline_reachable)));
    if (connection.after_timeline_set) connection.after_timeline_set();
  });
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() = default;

void MultiWorkerMirroredStrategy::start_elastic(const MultiWorkerMirroredStrategyOptions& options,
                                                std::vector<Device> devices) {
  elastic_ = std::make_unique<Elastic>();
  Elastic& elastic = *elastic_;
  elastic.options = options.elastic;
  elastic.devices = std::move(devices);
  elastic.communication = options.communication;
#if DISTRIBUTE_HAS_GLOO
  elastic.job = detail::start_elastic_over_gloo(*resolver_, options.gloo, options.elastic, options.communication.timeout);
  elastic.generation = detail::join_elastic_job(*elastic.job);
#endif
  set_extended(elastic.make_engine(*this));
  report_change(elastic.options, describe_change(nullptr, elastic.generation,
                                                 elastic.generation.number == 0 ? "the job started"
                                                                                : "this worker joined the job"));
}

void MultiWorkerMirroredStrategy::change_membership(const std::string& reason) {
  Elastic& elastic = *elastic_;
  const detail::ElasticGeneration before = elastic.generation;
  const std::vector<int> missed = extended().coordinator()->missing_at_timeout();
  // Gone first: a worker still waiting on this one in the old generation hears at once.
  release_extended();
  try {
#if DISTRIBUTE_HAS_GLOO
    elastic.generation = detail::next_generation(*elastic.job, before, missed);
#endif
    replace_extended(elastic.make_engine(*this));
  } catch (...) {
    const std::string why =
        absl::StrCat("MultiWorkerMirroredStrategy: the elastic job's generation ", before.number + 1,
                     " could not be formed: ", detail::describe_exception(std::current_exception()));
    auto coordinator = std::make_shared<cluster::Coordinator>(
        std::make_unique<detail::FailedTransport>(before.num_workers(), before.worker_id, why),
        static_cast<int>(elastic.devices.size()));
    coordinator->group().make_unusable(why);
    MirroredStrategyOptions mirrored;
    mirrored.communication = elastic.communication;
    replace_extended(detail::make_mirrored_extended(*this, elastic.devices, mirrored, std::move(coordinator)));
    throw;
  }
  report_change(elastic.options, describe_change(&before, elastic.generation, reason));
}

bool MultiWorkerMirroredStrategy::newcomer_waiting() {
  cluster::Coordinator& coordinator = *extended().coordinator();
  // The chief's answer: "0", "1", or why the store could not be asked (every worker throws it).
  std::string answer;
#if DISTRIBUTE_HAS_GLOO
  if (coordinator.is_chief()) {
    try {
      answer.push_back(detail::newcomer_waiting(*elastic_->job, elastic_->generation) ? '1' : '0');
    } catch (const std::exception& e) {
      answer = absl::StrCat("E", e.what());
    }
  }
#endif
  answer = coordinator.broadcast_from_chief(answer, elastic_->communication.timeout, "ElasticState::commit");
  DISTRIBUTE_CHECK(answer.empty() || answer[0] != 'E', UnavailableError,
                   "ElasticState::commit: the chief could not ask the rendezvous store whether workers wait to join: ",
                   answer.substr(1));
  return answer == "1";
}

int MultiWorkerMirroredStrategy::min_workers() const { return elastic_->options.min_workers; }

int MultiWorkerMirroredStrategy::generation() const { return elastic_ != nullptr ? elastic_->generation.number : 0; }

std::string MultiWorkerMirroredStrategy::name() const {
  std::vector<std::string> names;
  for (const Device& d : extended().worker_devices()) names.push_back(d.short_name());
  return absl::StrCat("MultiWorkerMirroredStrategy(worker ", extended().worker_id(), " of ", extended().num_workers(),
                      " over ", backend_name(backend_), ": ", absl::StrJoin(names, ", "), ")");
}

const ClusterResolver& MultiWorkerMirroredStrategy::cluster_resolver() const { return *resolver_; }

}  // namespace distribute
