// The Gloo backend of MultiWorkerMirroredStrategy (multi_worker/backends.h): the workers of a job
// that no MPI launcher started, as a resolver describes it, meet at a rendezvous store (Redis or a
// shared directory) and connect over Gloo's TCP pairs.
#include <gloo/rendezvous/hash_store.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/host_name.h"
#include "cluster/gloo/store.h"
#include "cluster/gloo/gloo_worker_transport.h"
#include "distribute/check.h"
#include "distribute/errors.h"
#include "multi_worker/backends.h"
#include "gloo/membership.h"
#include "multi_worker/cluster_resolver.h"

namespace distribute::detail {
namespace {

constexpr const char* kPrefix = "MultiWorkerMirroredStrategy over Gloo: ";
constexpr const char* kNoStoreRemedy =
    "set options.gloo.rendezvous or DISTRIBUTE_RENDEZVOUS to redis://HOST:PORT (a redis-server every worker "
    "reaches) or file:///DIR (a directory every worker shares)";

// The job of one worker, which meets nobody: what a program run alone, with no launcher's
// variables, describes.
class LoneWorkerResolver final : public ClusterResolver {
 public:
  ClusterSpec cluster_spec() const override { return ClusterSpec({{"worker", {host_name()}}}); }
  std::string task_type() const override { return "worker"; }
  int task_id() const override { return 0; }
};

std::string env_or(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : std::move(fallback);
}

// This run's id where the options give none: ours, else the launcher's, so that a rerun under a
// launcher that numbers its runs meets under keys of its own.
std::string default_job_id() {
  if (std::string id = env_or("DISTRIBUTE_JOB_ID", ""); !id.empty()) return id;
  if (std::string id = env_or("TORCHELASTIC_RUN_ID", ""); !id.empty()) return id;
  if (std::string id = env_or("SLURM_JOB_ID", ""); !id.empty()) {
    const std::string step = env_or("SLURM_STEP_ID", "");
    return step.empty() ? id : absl::StrCat(id, ".", step);
  }
  return "distribute";
}

// The store at `address`: "redis://HOST[:PORT]" or "file:///DIR".
std::shared_ptr<::gloo::rendezvous::Store> open_store(const std::string& address, const std::string& from) {
  constexpr std::string_view kRedis = "redis://";
  constexpr std::string_view kFile = "file://";
  if (address.starts_with(kRedis)) {
    std::string host = address.substr(kRedis.size());
    int port = 6379;
    if (const std::size_t colon = host.rfind(':'); colon != std::string::npos) {
      const std::string digits = host.substr(colon + 1);
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
      DISTRIBUTE_CHECK(error == std::errc() && end == digits.data() + digits.size() && port > 0 && port < 65536,
                       InvalidArgumentError, kPrefix, "the rendezvous address \"", address, "\" (", from,
                       ") has no port number after its host; give redis://HOST:PORT");
      host.resize(colon);
    }
    DISTRIBUTE_CHECK(!host.empty(), InvalidArgumentError, kPrefix, "the rendezvous address \"", address, "\" (", from,
                     ") names no host; give redis://HOST:PORT");
    try {
      return std::make_shared<cluster::gloo_backend::RedisStore>(host, port);
    } catch (const std::exception& e) {
      throw UnavailableError(absl::StrCat(kPrefix, "cannot reach the Redis server at ", host, ":", port, " (", from,
                                          "): ", e.what(), "; start one there (redis-server --port ", port,
                                          " --save '' --appendonly no) or give another address"));
    }
  }
  if (address.starts_with(kFile)) {
    const std::string directory = address.substr(kFile.size());
    DISTRIBUTE_CHECK(std::filesystem::is_directory(directory), FailedPreconditionError, kPrefix,
                     "the rendezvous address \"", address, "\" (", from, ") is no directory; create \"", directory,
                     "\" on a file system every worker shares");
    return std::make_shared<cluster::gloo_backend::FileStore>(directory);
  }
  throw InvalidArgumentError(absl::StrCat(kPrefix, "the rendezvous address \"", address, "\" (", from,
                                          ") is neither redis://HOST:PORT nor file:///DIR"));
}

// The host part of a task's "host:port" address ("[::1]:2222" too); empty for an empty address.
std::string address_host(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

std::shared_ptr<const ClusterResolver> default_gloo_resolver() {
  if (std::getenv("TF_CONFIG") != nullptr) return std::make_shared<const TFConfigClusterResolver>();
  if (std::getenv("RANK") != nullptr) return std::make_shared<const EnvironmentClusterResolver>();
  if (std::getenv("SLURM_PROCID") != nullptr) return std::make_shared<const SlurmClusterResolver>();
  return std::make_shared<const LoneWorkerResolver>();
}

namespace {

// What every connection of a job needs: its store, this worker's transport options, the job's id.
struct GlooJob {
  std::shared_ptr<::gloo::rendezvous::Store> store;
  cluster::gloo_backend::GlooTransportOptions transport;
  std::string id;
};

GlooJob describe_job(const ClusterResolver& resolver, const GlooOptions& options) {
  const ClusterSpec spec = resolver.cluster_spec();
  const std::string task_type = resolver.task_type();
  const int task_id = resolver.task_id();
  GlooJob job;
  cluster::gloo_backend::GlooTransportOptions& transport = job.transport;
  transport.rank = worker_id_in_cluster(spec, task_type, task_id);
  transport.workers = spec.num_tasks("chief") + spec.num_tasks("worker");
  transport.hostname = options.hostname;
  transport.interface = !options.interface.empty() ? options.interface : env_or("GLOO_SOCKET_IFNAME", "");
  if (transport.hostname.empty() && transport.interface.empty()) {
    transport.hostname = address_host(spec.job_tasks(task_type)[static_cast<std::size_t>(task_id)]);
  }
  DISTRIBUTE_CHECK(options.rendezvous_timeout > std::chrono::milliseconds::zero(), InvalidArgumentError, kPrefix,
                   "options.gloo.rendezvous_timeout is ", options.rendezvous_timeout.count(),
                   " ms; give the workers a positive time to meet (60 s by default)");
  transport.connect_timeout = options.rendezvous_timeout;
  job.id = !options.job_id.empty() ? options.job_id : default_job_id();

  if (!options.rendezvous.empty()) {
    job.store = open_store(options.rendezvous, "options.gloo.rendezvous");
  } else if (const std::string address = resolver.rendezvous_address(); !address.empty()) {
    job.store = open_store(address, "the cluster resolver's rendezvous address");
  } else if (const char* variable = std::getenv("DISTRIBUTE_RENDEZVOUS"); variable != nullptr && *variable != '\0') {
    job.store = open_store(variable, "DISTRIBUTE_RENDEZVOUS");
  }
  return job;
}

}  // namespace

WorkerConnection connect_over_gloo(const ClusterResolver& resolver, const GlooOptions& options,
                                   cluster::OnStall on_stall, std::exception_ptr failure) {
  // Every worker makes its strategies in the same order: the n-th of each meets the others' n-th
  // under keys of its own.
  static std::atomic<int> strategies{0};
  const int strategy = strategies.fetch_add(1);
  GlooJob job = describe_job(resolver, options);
  cluster::gloo_backend::GlooTransportOptions transport = job.transport;
  transport.on_stall = on_stall;
  transport.prefix = absl::StrCat(job.id, "/strategy-", strategy);
  std::shared_ptr<::gloo::rendezvous::Store> store = job.store;
  if (store == nullptr) {
    DISTRIBUTE_CHECK(transport.workers == 1, InvalidArgumentError, kPrefix, "the job has ", transport.workers,
                     " workers, which meet at a rendezvous store, but none is given: ", kNoStoreRemedy);
    store = std::make_shared<::gloo::rendezvous::HashStore>();
  }

  WorkerConnection connection;
  connection.transport = std::make_unique<cluster::gloo_backend::GlooWorkerTransport>(*store, transport);
  connection.failure = std::move(failure);
  transport.prefix = absl::StrCat(job.id, "/timeline");
  transport.on_stall = cluster::OnStall::kFailStrategy;
  connection.make_timeline_transport = [store, transport] {
    return std::make_unique<cluster::gloo_backend::GlooWorkerTransport>(*store, transport);
  };
  connection.timeline_reachable = [] { return true; };
  return connection;
}

struct ElasticGlooJob {
  ElasticGlooJob(GlooJob job, ElasticMembershipOptions options)
      : transport(std::move(job.transport)), membership(std::move(job.store), std::move(options)) {}
  cluster::gloo_backend::GlooTransportOptions transport;
  ElasticMembership membership;
};

std::shared_ptr<ElasticGlooJob> start_elastic_over_gloo(const ClusterResolver& resolver, const GlooOptions& options,
                                                        const ElasticOptions& elastic,
                                                        std::chrono::duration<double> collective_timeout) {
  GlooJob job = describe_job(resolver, options);
  DISTRIBUTE_CHECK(job.store != nullptr, InvalidArgumentError, kPrefix,
                   "an elastic job's workers meet at a rendezvous store, and none is given: ", kNoStoreRemedy);
  ElasticMembershipOptions membership;
  membership.prefix = absl::StrCat(job.id, "/elastic");
  membership.initial_rank = job.transport.rank;
  membership.initial_workers = job.transport.workers;
  membership.max_workers = elastic.max_workers;
  membership.settle_time = elastic.settle_time;
  membership.survivor_wait = std::chrono::ceil<std::chrono::milliseconds>(collective_timeout);
  membership.timeout = options.rendezvous_timeout;
  return std::make_shared<ElasticGlooJob>(std::move(job), std::move(membership));
}

ElasticGeneration join_elastic_job(ElasticGlooJob& job) { return job.membership.join(); }

ElasticGeneration next_generation(ElasticGlooJob& job, const ElasticGeneration& current,
                                  const std::vector<int>& missed) {
  return job.membership.next(current, missed);
}

bool newcomer_waiting(ElasticGlooJob& job, const ElasticGeneration& current) {
  return job.membership.newcomer_waiting(current);
}

std::unique_ptr<cluster::WorkerTransport> connect_generation(ElasticGlooJob& job, const ElasticGeneration& generation) {
  cluster::gloo_backend::GlooTransportOptions transport = job.transport;
  transport.rank = generation.worker_id;
  transport.workers = generation.num_workers();
  transport.prefix = absl::StrCat(job.membership.prefix(), "/g", generation.number, "/transport");
  transport.on_stall = cluster::OnStall::kFailStrategy;
  return std::make_unique<cluster::gloo_backend::GlooWorkerTransport>(job.membership.store(), transport);
}

}  // namespace distribute::detail
