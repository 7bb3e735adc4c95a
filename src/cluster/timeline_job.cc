// The timeline's Job over a coordinator.
#include "cluster/timeline_job.h"

#include <string>
#include <utility>

#include "cluster/coordinator.h"

namespace distribute::cluster {
namespace {

class CoordinatorJob final : public detail::timeline::Job {
 public:
  // Without a strategy timeout, how long Timeline::stop() waits for a worker.
  static constexpr std::chrono::seconds kDefaultTimeout{60};

  CoordinatorJob(std::unique_ptr<WorkerTransport> transport, std::chrono::duration<double> timeout,
                 std::function<bool()> reachable)
      : coordinator_(std::move(transport), 1),
        timeout_(timeout.count() > 0 ? timeout : kDefaultTimeout),
        reachable_(std::move(reachable)) {}
  int worker_id() const override { return coordinator_.worker_id(); }
  int num_workers() const override { return coordinator_.num_workers(); }
  std::string host() const override { return coordinator_.host(); }
  bool reachable() const override { return reachable_(); }
  std::chrono::duration<double> timeout() const override { return timeout_; }
  std::vector<int> exchange(std::int64_t mine, std::span<std::int64_t> all, detail::Deadline deadline) override {
    return coordinator_.exchange_reports(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(all), deadline);
  }
  std::string all_gather(const std::string& mine, std::span<const std::size_t> sizes,
                         detail::Deadline deadline) override {
    std::size_t total = 0;
    for (std::size_t size : sizes) total += size;
    std::string all(total, '\0');
    coordinator_.group().transport().all_gather(mine.data(), sizes, all.data(), deadline,
                                                "Timeline::stop's gathering of the workers' events");
    return all;
  }

 private:
  Coordinator coordinator_;
  const std::chrono::duration<double> timeout_;
  const std::function<bool()> reachable_;
};

}  // namespace

std::unique_ptr<detail::timeline::Job> make_timeline_job(std::unique_ptr<WorkerTransport> transport,
                                                         std::chrono::duration<double> timeout,
                                                         std::function<bool()> reachable) {
  return std::make_unique<CoordinatorJob>(std::move(transport), timeout, std::move(reachable));
}

}  // namespace distribute::cluster
