// distribute::cluster::gloo_backend: the workers' transport over Gloo's TCP pairs, the second
// backend of cluster/worker_transport.h beside MPI, for jobs that no mpirun launched. The workers
// meet through a rendezvous store (Gloo's Redis or file store, under a prefix of the job's), each
// giving its rank and the number of workers; Gloo then connects every pair of them. The control
// channel's exchanges are point-to-point messages on slots of their own; the data channel's
// all_reduce goes around the same ring as over MPI (cluster/ring_all_reduce.h, so the two backends
// give the same bits, compression included), its all_gather and broadcast are Gloo's.
//
// Gloo treats a wait that passes its timeout as a broken connection: it fails every pair of the
// context. So does this transport: after a deadline passes in any call, every later call throws
// UnavailableError naming the step that broke it, and the workers that were waited for are named
// by the call that timed out.
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

// Receives posted one message ahead on a slot (gloo_worker_transport.cc).
class PostedReceives;

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
  // A channel of exchanges: its slots, its receives posted ahead (made once connected), and the
  // lock that keeps its exchanges in order.
  struct ExchangeChannel {
    std::uint64_t slot;
    std::uint64_t posted_slot;
    std::unique_ptr<PostedReceives> posted;
    std::mutex mutex;
  };
  std::vector<int> exchange_on(ExchangeChannel& channel, std::span<const std::byte> mine, std::span<std::byte> all,
                               detail::Deadline deadline);
  // A small all_reduce in one round: every worker's buffer to every other, summed in worker order.
  void all_reduce_direct(DType dtype, std::byte* data, std::int64_t count, detail::Deadline deadline,
                         const StepName& what);
  // Throws UnavailableError once a step has broken the context.
  void check_usable() const;
  // A data phase that Gloo failed (`failure`: a timeout or a lost peer, described): marks the
  // transport broken, then ends the job or throws DeadlineExceededError, as options_.on_stall says.
  [[noreturn]] void data_phase_failed(const StepName& what, const std::string& failure);

  GlooTransportOptions options_;
  std::shared_ptr<::gloo::rendezvous::Context> context_;
  std::vector<std::string> hosts_;
  int on_host_ = 1;
  ExchangeChannel headers_;
  ExchangeChannel input_;
  std::mutex data_mutex_;  // one data phase at a time
  std::unique_ptr<PostedReceives> direct_;  // the small all_reduce's, under data_mutex_
  std::vector<std::byte> ring_scratch_;
  // Sends that nobody waits for (farewells), kept with their bytes until the transport goes.
  struct PendingSend;
  std::mutex pending_mutex_;
  std::vector<std::unique_ptr<PendingSend>> pending_;
  mutable std::mutex broken_mutex_;
  std::optional<std::string> broken_by_;
};

}  // namespace distribute::cluster::gloo_backend
