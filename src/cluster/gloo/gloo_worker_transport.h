// distribute::cluster::gloo_backend: the workers' transport over Gloo's TCP pairs, the second
// backend of cluster/worker_transport.h beside MPI, for jobs that no mpirun launched. The workers
// meet through a rendezvous store (Gloo's Redis or file store, under a prefix of the job's), each
// giving its rank and the number of workers; Gloo then connects every pair of them, once for the
// large messages and once for each kind of small one. Small messages (the control channel's
// exchanges, a small all_reduce's data) and the ring all_reduce's (cluster/ring_all_reduce.h,
// pipelined in pieces, which gives the same bits as over MPI, compression included) go on pairs
// that the calling threads read themselves, each read polled against its step's deadline, and
// that they or the ring's writing thread write; all_gather and broadcast go through Gloo's event
// thread.
//
// Gloo treats a wait that passes its timeout as a broken connection: it fails every pair of the
// context. So does this transport, on all its pairs: after a deadline passes in any call, every
// later call throws UnavailableError naming the step that broke it, the workers that were waited
// for are named by the call that timed out, and a worker that comes late finds the connections
// reset instead of the messages sent before the others gave up.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cluster/gloo/store.h"
#include "cluster/worker_transport.h"

namespace distribute::cluster::gloo_backend {

struct GlooTransportOptions {
  // This worker's rank and the number of workers; every worker gives the same `workers`.
  int rank = 0;
  int workers = 1;
  // The keys of this group in the store: workers of one group share it, and no other group's do.
  std::string prefix;
  // The address this worker accepts its peers' connections on, else the interface whose address
  // it takes; with neither, its host name's.
  std::string hostname;
  std::string interface;
  // How long to wait for every worker to arrive at the store, then again to connect.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  OnStall on_stall = OnStall::kFailStrategy;
};

// A mesh of pairs for small messages, the ring's writing thread, and the outcome of a step's
// transfers (gloo_worker_transport.cc).
class PolledMesh;
class RingWriter;
struct TransferResult;

class GlooWorkerTransport final : public WorkerTransport {
 public:
  // Meets the other workers through `store`. DeadlineExceededError naming the workers that did
  // not arrive when connect_timeout passes; UnavailableError when Gloo cannot connect.
  GlooWorkerTransport(::gloo::rendezvous::Store& store, GlooTransportOptions options);
  ~GlooWorkerTransport() override;

  int num_workers() const override { return options_.workers; }
  int worker_id() const override { return options_.rank; }
  int workers_on_this_host() const override { return on_host_; }
  const std::vector<std::string>& hosts() const override { return hosts_; }
  std::vector<int> exchange(std::span<const std::byte> mine, std::span<std::byte> all,
                            detail::Deadline deadline) override;
  std::vector<int> exchange_input(std::span<const std::byte> mine, std::span<std::byte> all,
                                  detail::Deadline deadline) override;
  void send_farewell(std::span<const std::byte> mine) override;
  void send_gave_up(const StepName& what) override;
  std::vector<std::pair<int, std::string>> take_gave_up() override;
  int all_reduce(DType dtype, void* data, std::int64_t count, Compression compression, detail::Deadline deadline,
                 const StepName& what) override;
  void all_gather(const void* mine, std::span<const std::size_t> sizes, void* out, detail::Deadline deadline,
                  const StepName& what) override;
  void broadcast(void* data, std::size_t bytes, int root, detail::Deadline deadline, const StepName& what) override;

 private:
  class RingLinks;
  // A channel of exchanges: the slot of its large ones, the mesh of the others (made once
  // connected), and the lock that keeps its exchanges in order.
  struct ExchangeChannel {
    std::uint64_t slot;
    std::unique_ptr<PolledMesh> polled;
    std::mutex mutex;
  };
  std::vector<int> exchange_on(ExchangeChannel& channel, std::span<const std::byte> mine, std::span<std::byte> all,
                               detail::Deadline deadline);
  // A small all_reduce in one round: every worker's buffer to every other, summed in worker order.
  void all_reduce_direct(DType dtype, std::byte* data, std::int64_t count, detail::Deadline deadline,
                         const StepName& what);
  // Throws UnavailableError once a step has broken the context.
  void check_usable() const;
  // A data phase that failed (a timeout or a lost peer): marks the transport broken (and after a
  // timeout, fails every connection), then ends the job or throws DeadlineExceededError, as
  // options_.on_stall says.
  [[noreturn]] void data_phase_failed(const StepName& what, const TransferResult& failure);
  // Ends every connection at once, as Gloo does when a wait times out: the peers waiting for this
  // worker then find it gone.
  void fail_connections();

  GlooTransportOptions options_;
  std::shared_ptr<::gloo::rendezvous::Context> context_;
  std::vector<std::string> hosts_;
  int on_host_ = 1;
  ExchangeChannel headers_;
  ExchangeChannel input_;
  std::mutex data_mutex_;  // one data phase at a time
  std::unique_ptr<PolledMesh> direct_;  // the small all_reduce's, under data_mutex_
  std::unique_ptr<PolledMesh> ring_up_;    // the ring's bytes to higher ranks, under data_mutex_
  std::unique_ptr<PolledMesh> ring_down_;  // and to lower ranks
  std::unique_ptr<RingWriter> ring_writer_;  // writes the ring's messages, under data_mutex_
  std::vector<PolledMesh*> polled_meshes() const {
    return {headers_.polled.get(), input_.polled.get(), direct_.get(), ring_up_.get(), ring_down_.get()};
  }
  std::vector<std::byte> ring_scratch_;    // ring_all_reduce's, under data_mutex_
  // Every worker's buffer of a direct all_reduce, apart from ring_scratch_: a small sum between
  // two large ones would otherwise shrink it, and the next large one zero-fill it again.
  std::vector<std::byte> direct_scratch_;
  mutable std::mutex broken_mutex_;
  std::optional<std::string> broken_by_;
};

}  // namespace distribute::cluster::gloo_backend
