// distribute::detail: the transport of an elastic strategy whose next generation could not be
// formed. The strategy keeps an engine over it, so that every later call of the strategy throws
// UnavailableError citing why, instead of finding no engine at all.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cluster/worker_transport.h"
#include "distribute/errors.h"

namespace distribute::detail {

class FailedTransport final : public cluster::WorkerTransport {
 public:
  FailedTransport(int workers, int worker_id, std::string reason)
      : workers_(workers), worker_id_(worker_id), hosts_(static_cast<std::size_t>(workers)), reason_(std::move(reason)) {}

  int num_workers() const override { return workers_; }
  int worker_id() const override { return worker_id_; }
  int workers_on_this_host() const override { return 1; }
  const std::vector<std::string>& hosts() const override { return hosts_; }
  std::vector<int> exchange(std::span<const std::byte>, std::span<std::byte>, Deadline) override { fail(); }
  std::vector<int> exchange_input(std::span<const std::byte>, std::span<std::byte>, Deadline) override { fail(); }
  void send_farewell(std::span<const std::byte>) override {}
  void send_gave_up(const cluster::StepName&) override {}
  std::vector<std::pair<int, std::string>> take_gave_up() override { return {}; }
  int all_reduce(DType, void*, std::int64_t, Compression, Deadline, const cluster::StepName&) override { fail(); }
  void all_gather(const void*, std::span<const std::size_t>, void*, Deadline, const cluster::StepName&) override {
    fail();
  }
  void broadcast(void*, std::size_t, int, Deadline, const cluster::StepName&) override { fail(); }

 private:
  [[noreturn]] void fail() const { throw UnavailableError(reason_); }

  int workers_;
  int worker_id_;
  std::vector<std::string> hosts_;
  std::string reason_;
};

}  // namespace distribute::detail
