// MultiWorkerMirroredStrategy and MpiClusterResolver: MirroredStrategy's replicas on each worker,
// joined through MPI.
#include "distribute/mpi/multi_worker_mirrored_strategy.h"

#include <mpi.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/mpi/mpi_communicator.h"
#include "mpi/mpi_cross_worker.h"
#include "strategy/mirrored_extended.h"

namespace distribute {
namespace {

// Every rank's host name, gathered over `comm`.
std::vector<std::string> rank_hosts(MPI_Comm comm) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) hosts.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return hosts;
}

}  // namespace

MpiClusterResolver::MpiClusterResolver() {
  detail::ensure_mpi_initialized();
  MPI_Comm_rank(MPI_COMM_WORLD, &task_id_);
  spec_ = ClusterSpec({{"worker", rank_hosts(MPI_COMM_WORLD)}});
}

MpiClusterResolver::MpiClusterResolver(const Communicator& comm) {
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
  comm_ = std::make_shared<const Communicator>(comm);
}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy()
    : MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions{}) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions options)
    : resolver_(options.cluster_resolver != nullptr ? std::move(options.cluster_resolver)
                                                    : std::make_shared<const MpiClusterResolver>()) {
  std::vector<Device> devices = detail::parse_mirrored_devices(options.local_devices);
  // The workers are the ranks of the resolver's communicator, else of MPI_COMM_WORLD.
  const auto* mpi_resolver = dynamic_cast<const MpiClusterResolver*>(resolver_.get());
  const MpiClusterResolver::Communicator* comm = mpi_resolver != nullptr ? mpi_resolver->communicator() : nullptr;
  auto engine = std::make_unique<detail::MpiCrossWorker>(comm != nullptr ? comm->comm : MPI_COMM_WORLD);
  const int rank = engine->worker_id();
  const int workers = engine->num_workers();
  const int tasks = resolver_->cluster_spec().num_tasks("worker") + resolver_->cluster_spec().num_tasks("chief");
  DISTRIBUTE_CHECK(tasks == workers, InvalidArgumentError, "MultiWorkerMirroredStrategy: the cluster resolver lists ",
                   tasks, " tasks but MPI launched ", workers, " processes; launch one process per task");
  // Every worker must bring as many replicas: a collective's ids and MEANs count on it.
  const std::int64_t local = static_cast<std::int64_t>(devices.size());
  std::vector<std::int64_t> all(static_cast<std::size_t>(workers));
  const std::vector<int> missing = engine->exchange(std::as_bytes(std::span(&local, 1)),
                                                    std::as_writable_bytes(std::span(all)),
                                                    detail::deadline_after(options.communication.timeout));
  DISTRIBUTE_CHECK(missing.empty(), DeadlineExceededError, "MultiWorkerMirroredStrategy: timed out after ",
                   options.communication.timeout.count(), " s: workers ", absl::StrJoin(missing, ", "),
                   " did not construct their strategy");
  for (int w = 0; w < workers; ++w) {
    DISTRIBUTE_CHECK(all[static_cast<std::size_t>(w)] == local, InvalidArgumentError,
                     "MultiWorkerMirroredStrategy: worker ", w, " has ", all[static_cast<std::size_t>(w)],
                     " local replicas but worker ", rank, " has ", local,
                     "; every worker needs the same number of local devices");
  }
  auto sync = std::make_shared<detail::WorkerSync>(std::move(engine), static_cast<int>(local));
  MirroredStrategyOptions mirrored;
  mirrored.communication = options.communication;
  set_extended(detail::make_mirrored_extended(*this, std::move(devices), mirrored, std::move(sync)));
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
