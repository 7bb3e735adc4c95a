// distribute::detail: what MultiWorkerMirroredStrategy's construction (backend-neutral, in
// multi_worker/multi_worker_mirrored_strategy.cc) asks of each backend it was built with: the
// workers joined (a transport for the strategy, and the way to make one more for the timeline),
// found from the resolver and the options. Declared here, defined in src/mpi/ and src/gloo/.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/worker_transport.h"
#include "distribute/config.h"
#include "distribute/strategy/multi_worker_mirrored_strategy.h"
#include "multi_worker/elastic_generation.h"

namespace distribute::detail {

struct WorkerConnection {
  // The strategy's transport.
  std::unique_ptr<cluster::WorkerTransport> transport;
  // A transport of the timeline's own (made once per process, after the first strategy's), and
  // whether it still works; then what to do once the timeline has it.
  std::function<std::unique_ptr<cluster::WorkerTransport>()> make_timeline_transport;
  std::function<bool()> timeline_reachable;
  std::function<void()> after_timeline_set;
  // This worker's own checks of the resolver failed (`failure`): the backend still joined the
  // workers where it could, so that they hear of the failure instead of waiting for this one.
  std::exception_ptr failure;
};

// `failure`: this worker's own checks of its options failed; the backend still joins the workers
// if it can (over MPI it always can), and returns the failure in WorkerConnection::failure.
#if DISTRIBUTE_HAS_MPI
// Whether kAuto picks MPI: an MpiClusterResolver, or a process an MPI launcher started.
bool mpi_is_chosen(const ClusterResolver* resolver);
bool is_mpi_resolver(const ClusterResolver* resolver);
std::shared_ptr<const ClusterResolver> default_mpi_resolver();
WorkerConnection connect_over_mpi(const ClusterResolver& resolver, cluster::OnStall on_stall,
                                  std::exception_ptr failure);
#endif
#if DISTRIBUTE_HAS_GLOO
std::shared_ptr<const ClusterResolver> default_gloo_resolver();
WorkerConnection connect_over_gloo(const ClusterResolver& resolver, const GlooOptions& options,
                                   cluster::OnStall on_stall, std::exception_ptr failure);

// An elastic job over Gloo: its store and membership (gloo/membership.h), and how each
// generation's workers connect.
struct ElasticGlooJob;
// `collective_timeout` bounds how long a generation waits for a worker its survivors saw alive.
std::shared_ptr<ElasticGlooJob> start_elastic_over_gloo(const ClusterResolver& resolver, const GlooOptions& options,
                                                        const ElasticOptions& elastic,
                                                        std::chrono::duration<double> collective_timeout);
// This process's first generation; the one after `current`, which this worker left having given
// up waiting for the workers `missed` (ids in `current`; empty when it left for another reason).
ElasticGeneration join_elastic_job(ElasticGlooJob& job);
ElasticGeneration next_generation(ElasticGlooJob& job, const ElasticGeneration& current,
                                  const std::vector<int>& missed);
// Whether a worker waits to join the generation after `current`, and the job has room for it.
bool newcomer_waiting(ElasticGlooJob& job, const ElasticGeneration& current);
// The transport of `generation`'s workers (a data phase that stalls fails it).
std::unique_ptr<cluster::WorkerTransport> connect_generation(ElasticGlooJob& job, const ElasticGeneration& generation);
#endif

}  // namespace distribute::detail
