// PreemptionCheckpointHandler: the SIGTERM flag, the stop request each step's vote carries, and
// the save when the workers agreed to stop.
#include "distribute/checkpoint/preemption.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/stop_request.h"
#include "checkpoint/require_cross_replica.h"
#include "distribute/check.h"
#include "distribute/errors.h"
#include "replica/call_agreement.h"

namespace distribute {
namespace {

// What the SIGTERM handler writes: plain lock-free atomics, all it may touch.
std::atomic<bool> g_terminated{false};
std::atomic<bool> g_sigterm_unanswered{false};  // a SIGTERM arrived since the last save began
std::atomic<std::int64_t> g_terminated_at_ns{0};  // CLOCK_MONOTONIC, which steady_clock reads here
std::atomic<bool> g_stop_at_once{true};           // no grace period: the signal raises the stop request
static_assert(std::atomic<std::int64_t>::is_always_lock_free);

std::int64_t monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void mark_terminated() {
  if (!g_terminated.exchange(true)) g_terminated_at_ns.store(monotonic_ns());
  if (g_stop_at_once.load()) detail::stop_request::raised.store(true);
}

extern "C" void on_sigterm(int) {
  g_sigterm_unanswered.store(true);
  mark_terminated();
}

// The disposition replaced by the handler that watches SIGTERM; one handler at a time.
detail::Mutex g_sigterm_mu;
bool g_sigterm_watched ABSL_GUARDED_BY(g_sigterm_mu) = false;
struct sigaction g_previous_sigterm ABSL_GUARDED_BY(g_sigterm_mu);

// The grace period in the clock's unit, saturated: seconds::max() has no nanosecond count.
std::chrono::nanoseconds grace_in_ns(std::chrono::seconds grace_period) {
  constexpr auto kLongest = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::nanoseconds::max());
  return grace_period >= kLongest ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds(grace_period);
}

}  // namespace

class PreemptionCheckpointHandler::SigtermWatch {
 public:
  // Calls `reset` (of the flags a signal raises) between the check that no other handler watches
  // SIGTERM (whose flags they are until then) and the installation (after which a reset could
  // lose a signal).
  explicit SigtermWatch(absl::FunctionRef<void()> reset) {
    detail::MutexLock lock(g_sigterm_mu);
    DISTRIBUTE_CHECK(!g_sigterm_watched, FailedPreconditionError,
                     "PreemptionCheckpointHandler: another handler watches SIGTERM already; make one handler per "
                     "process, or give this one a termination_watcher_fn");
    reset();
    struct sigaction action {};
    action.sa_handler = on_sigterm;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    DISTRIBUTE_CHECK(::sigaction(SIGTERM, &action, &g_previous_sigterm) == 0, InternalError,
                     "PreemptionCheckpointHandler: installing the SIGTERM handler failed");
    g_sigterm_watched = true;
  }

  ~SigtermWatch() {
    {
      detail::MutexLock lock(g_sigterm_mu);
      ::sigaction(SIGTERM, &g_previous_sigterm, nullptr);
      g_sigterm_watched = false;
    }
    // The job was told to end and no save answered: the disposition the signal was meant for
    // gets it now (one that arrives from here on goes to it directly).
    if (g_sigterm_unanswered.exchange(false)) ::raise(SIGTERM);
  }

  SigtermWatch(const SigtermWatch&) = delete;
  SigtermWatch& operator=(const SigtermWatch&) = delete;
};

PreemptionCheckpointHandler::PreemptionCheckpointHandler(Strategy& strategy, CheckpointManager& manager,
                                                         TerminationConfig config)
    : strategy_(strategy),
      manager_(manager),
      config_(std::move(config)),
      total_run_calls_(std::make_shared<std::int64_t>(0)) {
  detail::require_cross_replica("PreemptionCheckpointHandler");
  DISTRIBUTE_CHECK(config_.grace_period.count() >= 0, InvalidArgumentError,
                   "PreemptionCheckpointHandler: grace_period is ", config_.grace_period.count(),
                   " s; give 0 (save at the next step) or more");
  const auto reset = [this] {
    g_stop_at_once.store(config_.grace_period.count() == 0);
    clear_stop();
  };
  if (config_.termination_watcher_fn) {
    reset();
  } else {
    // A member, so that its destructor puts the disposition back however the constructor ends.
    sigterm_watch_ = std::make_unique<SigtermWatch>(reset);
  }
  std::shared_ptr<std::int64_t> count = total_run_calls_;
  manager_.checkpoint().add(
      "preemption/total_run_calls",
      Saveable(DType::kInt64, Shape(), [count] { return Tensor::scalar(*count, Device::cpu()); },
               [count](const Tensor& value) { *count = value.item<std::int64_t>(); }));
  manager_.restore_or_initialize();
}

PreemptionCheckpointHandler::~PreemptionCheckpointHandler() = default;

void PreemptionCheckpointHandler::before_step(StepCaller caller) {
  if (caller == StepCaller::kRun) {
    detail::require_cross_replica("PreemptionCheckpointHandler::run",
                                  "call it in place of Strategy::run, outside any replica's fn");
  } else {
    detail::require_cross_replica("PreemptionCheckpointHandler::save_checkpoint_if_preempted",
                                  "call it once per step, after Strategy::run returns");
  }
  const auto now = std::chrono::steady_clock::now();
  if (last_step_start_) last_step_ = now - *last_step_start_;
  last_step_start_ = now;
  if (config_.termination_watcher_fn && !g_terminated.load() && config_.termination_watcher_fn()) mark_terminated();
  if (!g_terminated.load() || detail::stop_request::is_raised()) return;
  // A grace period: stop once what is left of it would only just hold two saves and two steps
  // (the step that carries the stop request runs before the save, and steps vary).
  const std::optional<std::chrono::duration<double>> save = manager_.last_save_time();
  // Both terms >= 0 (the signal handler may store its time after this thread read the clock), so
  // their difference cannot overflow.
  const std::chrono::nanoseconds since_signal(std::max<std::int64_t>(0, monotonic_ns() - g_terminated_at_ns.load()));
  const std::chrono::nanoseconds left = grace_in_ns(config_.grace_period) - since_signal;
  if (!save || left <= 2 * (*save + last_step_)) detail::stop_request::raised.store(true);
}

void PreemptionCheckpointHandler::after_step() {
  ++*total_run_calls_;
  if (!stop_agreed()) return;
  // Cleared before the save: a signal during it asks for another (if exit_fn returns).
  clear_stop();
  manager_.save(*total_run_calls_, /*check_interval=*/false);
  if (config_.exit_fn) {
    config_.exit_fn();
  } else {
    std::exit(kRestartExitCode);
  }
}

void PreemptionCheckpointHandler::save_checkpoint_if_preempted() {
  before_step(StepCaller::kSaveCheckpointIfPreempted);
  after_step();
}

bool PreemptionCheckpointHandler::stop_agreed() {
  detail::CallAgreement* agreement = detail::call_agreement_of(strategy_.extended());
  if (agreement != nullptr && strategy_.extended().num_workers() > 1) return agreement->stop_requested();
  return detail::stop_request::is_raised();
}

void PreemptionCheckpointHandler::clear_stop() {
  g_terminated.store(false);
  g_sigterm_unanswered.store(false);
  detail::stop_request::raised.store(false);
  if (detail::CallAgreement* agreement = detail::call_agreement_of(strategy_.extended())) {
    agreement->clear_stop_request();
  }
}

}  // namespace distribute
