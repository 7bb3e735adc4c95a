// MultiWorkerMirroredStrategy: MirroredStrategy across processes (tf.distribute.
// MultiWorkerMirroredStrategy). The same program runs as every worker of a job; each worker has its
// local replicas (threads, as in MirroredStrategy) and num_replicas_in_sync() counts every
// worker's. Replica ids are global: worker w's local replica l is w * num_local_replicas() + l.
// run() takes and returns this worker's values (PerReplica and experimental_local_results are
// local); collectives, merge_call and the cross-replica operations are collective across the
// workers.
//
// The workers talk through one of two backends (CollectiveBackend): MPI, for a job mpirun or srun
// launched, or Gloo's TCP pairs, for workers started as plain processes (a shell loop, a
// Kubernetes pod each) that meet through a rendezvous store. The strategy, its checks, timeouts and
// errors are the same over both. Everything here is implemented in the library the components
// distribute::mpi and distribute::gloo link (find_package(distribute CONFIG REQUIRED COMPONENTS
// gloo)); this header includes neither <mpi.h> nor Gloo's headers.
#pragma once

#include "distribute/config.h"
#if !DISTRIBUTE_HAS_MULTI_WORKER
#error "this build of distribute has no multi-worker backend: install Open MPI (Debian: libopenmpi-dev openmpi-bin) or Gloo (libgloo-dev), configure distribute with -DDISTRIBUTE_WITH_MPI=ON or -DDISTRIBUTE_WITH_GLOO=ON, reinstall it, and link distribute::mpi or distribute::gloo"
#endif

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distribute/cluster/cluster_resolver.h"
#include "distribute/collective/communication_options.h"
#include "distribute/strategy/strategy.h"

namespace distribute {

class ElasticState;  // distribute/elastic/elastic.h

// Which engine carries the workers' messages and data.
enum class CollectiveBackend {
  // MPI for a process an MPI launcher started (mpirun, or srun with PMI: it finds OMPI_COMM_WORLD_SIZE,
  // PMI_SIZE or PMIX_RANK) or given an MpiClusterResolver; otherwise Gloo, where it was built.
  kAuto,
  kMpi,
  kGloo,
};
const char* backend_name(CollectiveBackend backend);

// Where the workers of a Gloo job meet, and how this one is reached.
struct GlooOptions {
  // The rendezvous store: "redis://HOST:PORT" (a redis-server every worker reaches) or
  // "file:///DIR" (a directory every worker shares). Empty: the resolver's rendezvous_address(),
  // else the DISTRIBUTE_RENDEZVOUS variable; a job of one worker needs none.
  std::string rendezvous;
  // Names this run's keys in the store, so that jobs sharing a store stay apart. Empty: the
  // DISTRIBUTE_JOB_ID variable, else the launcher's id of the run (torchrun's TORCHELASTIC_RUN_ID,
  // Slurm's SLURM_JOB_ID.SLURM_STEP_ID), else "distribute". A run finding a previous run's keys
  // under its id is refused (FailedPreconditionError): give each run its own id, or a fresh store.
  std::string job_id;
  // Where this worker accepts its peers' connections: an address (or a name that resolves to one),
  // else the network interface whose address to use ("eth0"). With neither: the interface the
  // GLOO_SOCKET_IFNAME variable names (as PyTorch's Gloo reads it), else the host of this task's
  // address in the resolver's cluster spec (TF_CONFIG's "host:port"), else the host name (which
  // Debian resolves to 127.0.1.1, reachable from this machine only: set one of these on several).
  std::string hostname;
  std::string interface;
  // How long the workers wait at construction for each other to arrive at the store, and then
  // again to connect: processes that a launcher starts seconds apart still meet, whatever the
  // collectives' own timeout (CommunicationOptions::timeout) is.
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(60)};
};

// What a worker does when the data phase of a collective across the workers stalls past its
// timeout after every worker agreed to it: a peer stopped answering mid-transfer (stopped, hung,
// or busy outside the strategy). Over MPI the worker first asks the others whether they are alive
// and names those that do not answer (docs/multi_worker.md, "The errors"); over Gloo it names the
// peers whose transfers did not complete.
enum class StalledCollectiveAction {
  // Reports the stall on stderr and ends the whole job (MPI_Abort; over Gloo this worker exits and
  // the others find it gone): for a job that is nothing but the training loop, which cannot go on
  // without the silent worker.
  kEndJob,
  // Throws DeadlineExceededError from the stalled call, with the same report, and leaves the
  // strategy unusable (UnavailableError from every later collective) while the process goes on:
  // for a program that gave the strategy a sub-communicator (mpi_cluster_resolver) and keeps other
  // MPI work. Over MPI the stalled transfers cannot be cancelled; they go on into buffers of the
  // strategy's own, kept until they complete or the process exits, never into the caller's
  // tensors. This costs a copy into those buffers and one out of them in every data phase.
  kFailStrategy,
};

// A change of an elastic job's workers, as ElasticOptions::on_membership_change hears of it on
// every worker of the new generation.
struct MembershipChange {
  // 0 for the job's first workers, then one more at each change.
  int generation = 0;
  int num_workers = 0;
  int previous_num_workers = 0;  // 0 for a worker's first generation
  int worker_id = 0;             // this worker's id in the new generation
  // Who joined ("worker 3 on host2", by their new ids) and who left (by their ids before).
  std::vector<std::string> joined;
  std::vector<std::string> left;
  // Why: "the job started", "this worker joined the job", "workers wait to join", or the error
  // of the collective that failed.
  std::string reason;
};

// Elastic membership (over Gloo only): a worker that fails or stops answering is left behind and
// the others go on; a worker started later joins at the next step boundary; neither restarts a
// process. Training goes through run_elastic with an ElasticState (distribute/elastic/elastic.h),
// which rolls back to the last committed step and takes the state from a surviving worker.
// docs/multi_worker.md, "Elastic training", has the rules.
struct ElasticOptions {
  // Elastic when min_workers > 0: below it, run_elastic saves and throws UnavailableError.
  int min_workers = 0;
  // At most this many workers (0: no limit); a worker started when the job is full waits for a
  // place until GlooOptions::rendezvous_timeout.
  int max_workers = 0;
  // After a failure, how long the workers of the next generation wait without another arriving
  // before the workers that have not come are taken for gone.
  std::chrono::milliseconds settle_time{std::chrono::seconds(1)};
  // Called on every worker after each change (the first generation included), in cross-replica
  // context, before the state is synchronised.
  std::function<void(const MembershipChange&)> on_membership_change;
  bool enabled() const { return min_workers > 0; }
};

struct MultiWorkerMirroredStrategyOptions {
  // This worker's replicas; empty: every GPU, else {"CPU:0"}. Every worker must have as many.
  std::vector<std::string> local_devices;
  // The defaults of every collective: a timeout here bounds every wait for another worker too
  // (over Gloo, the meeting at construction has a timeout of its own: GlooOptions).
  CommunicationOptions communication;
  // Null: over MPI an MpiClusterResolver; over Gloo a TFConfigClusterResolver where TF_CONFIG is
  // set, else an EnvironmentClusterResolver where RANK is, else a SlurmClusterResolver inside a
  // Slurm step, else a job of this one worker.
  std::shared_ptr<const ClusterResolver> cluster_resolver;
  CollectiveBackend backend = CollectiveBackend::kAuto;
  GlooOptions gloo;
  // Each worker acts on its own setting, so give every worker the same; a value that is neither
  // is an InvalidArgumentError from the constructor. It governs the data that crosses the workers
  // through MPI or Gloo; with GPU replicas, an NCCL data phase past the timeout always fails the
  // strategy without ending the job (docs/multi_worker.md, "GPUs").
  StalledCollectiveAction on_stalled_collective = StalledCollectiveAction::kEndJob;
  // Off by default. When enabled (over Gloo only), a data phase that stalls fails the strategy's
  // generation whatever on_stalled_collective says, and the workers form the next one.
  ElasticOptions elastic;
};

class MultiWorkerMirroredStrategy final : public Strategy {
 public:
  // Collective across the workers: every worker constructs its strategy, and they agree on the
  // number of local replicas (InvalidArgumentError when they differ).
  //
  // Over MPI it initialises MPI when the program has not (asking for MPI_THREAD_MULTIPLE;
  // UnavailableError below MPI_THREAD_SERIALIZED) and then finalises it at exit; a program that
  // initialised MPI keeps it. Over Gloo the workers meet at the rendezvous store
  // (DeadlineExceededError naming the workers that did not come within the timeout;
  // UnavailableError when the store cannot be reached), then connect every pair of them.
  // InvalidArgumentError for a backend this build lacks, or an MpiClusterResolver over Gloo.
  MultiWorkerMirroredStrategy();
  explicit MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions options);
  ~MultiWorkerMirroredStrategy() override;
  std::string name() const override;
  const ClusterResolver& cluster_resolver() const;
  // The backend chosen at construction: kMpi or kGloo.
  CollectiveBackend backend() const { return backend_; }
  // Whether the workers are elastic (options.elastic), and their generation (0 otherwise).
  bool elastic() const { return elastic_ != nullptr; }
  int generation() const;

 private:
  friend class ElasticState;
  friend void run_elastic(MultiWorkerMirroredStrategy& strategy, ElasticState& state,
                          const std::function<void()>& train);
  struct Elastic;
  // Elastic jobs: forms this worker's first generation (construction).
  void start_elastic(const MultiWorkerMirroredStrategyOptions& options, std::vector<Device> devices);
  // Leaves the current generation (its transport closed, so that workers waiting on this one
  // hear of it at once) and forms the next with the workers that come; `reason` is reported.
  void change_membership(const std::string& reason);
  // Collective: whether a worker waits to join and the job has room for it (the chief asks).
  bool newcomer_waiting();
  int min_workers() const;

  std::shared_ptr<const ClusterResolver> resolver_;
  CollectiveBackend backend_ = CollectiveBackend::kAuto;
  std::unique_ptr<Elastic> elastic_;
};

}  // namespace distribute
