// PreemptionCheckpointHandler: the SIGTERM flag, the handler's stop request that each step's vote
// carries, and the save when the workers agreed to stop.
#include "distribute/checkpoint/preemption.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "cluster/stop_request.h"
#include "checkpoint/require_cross_replica.h"
#include "distribute/check.h"
#include "distribute/errors.h"
#include "cluster/coordinator.h"
#include "strategy/cross_worker.h"

namespace distribute {
namespace {

// The one thing the SIGTERM handler writes: when the first signal since the last save began came
// (CLOCK_MONOTONIC ns, which steady_clock reads here), 0 while none did. A lock-free atomic, all
// a signal handler may touch; the handler that watches SIGTERM (one at a time) owns it.
std::atomic<std::int64_t> g_sigterm_ns{0};
static_assert(std::atomic<std::int64_t>::is_always_lock_free);

std::int64_t monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

extern "C" void on_sigterm(int) {
  std::int64_t none = 0;
  g_sigterm_ns.compare_exchange_strong(none, monotonic_ns());
}

// Ends the process with RestartRequested's exit code when one escapes main (or a thread): the
// default exit_fn throws it so that the stack unwinds, and a program that does not catch it
// still exits as it did when the default was std::exit(kRestartExitCode).
std::terminate_handler g_previous_terminate = nullptr;

[[noreturn]] void on_terminate() {
  if (const std::exception_ptr escaped = std::current_exception()) {
    try {
      std::rethrow_exception(escaped);
    } catch (const RestartRequested& request) {
      std::exit(request.exit_code());
    } catch (...) {
    }
  }
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
}

[[noreturn]] void throw_restart_requested() {
  static std::once_flag installed;
  std::call_once(installed, [] { g_previous_terminate = std::set_terminate(on_terminate); });
  throw RestartRequested();
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
  SigtermWatch() {
    detail::MutexLock lock(g_sigterm_mu);
    DISTRIBUTE_CHECK(!g_sigterm_watched, FailedPreconditionError,
                     "PreemptionCheckpointHandler: another handler watches SIGTERM already; make one handler per "
                     "process, or give this one a termination_watcher_fn");
    // Cleared after the check (until then the flag is the other handler's) and before the
    // installation (after which clearing it could lose a signal).
    g_sigterm_ns.store(0);
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
    if (g_sigterm_ns.exchange(0) != 0) ::raise(SIGTERM);
  }

  SigtermWatch(const SigtermWatch&) = delete;
  SigtermWatch& operator=(const SigtermWatch&) = delete;
};

PreemptionCheckpointHandler::PreemptionCheckpointHandler(Strategy& strategy, CheckpointManager& manager,
                                                         TerminationConfig config)
    : strategy_(strategy),
      manager_(manager),
      config_(std::move(config)),
      total_run_calls_(std::make_shared<std::int64_t>(0)),
      stop_(std::make_unique<cluster::StopRequest>()) {
  detail::require_cross_replica("PreemptionCheckpointHandler");
  DISTRIBUTE_CHECK(config_.grace_period.count() >= 0, InvalidArgumentError,
                   "PreemptionCheckpointHandler: grace_period is ", config_.grace_period.count(),
                   " s; give 0 (save at the next step) or more");
  if (!config_.termination_watcher_fn) {
    // A member, so that its destructor puts the disposition back however the constructor ends.
    sigterm_watch_ = std::make_unique<SigtermWatch>();
    // Without a grace period the signal itself is the stop request, carried by the next vote.
    if (config_.grace_period.count() == 0) stop_->follow(&g_sigterm_ns);
  }
  std::shared_ptr<std::int64_t> count = total_run_calls_;
  manager_.checkpoint().add(
      "preemption/total_run_calls",
      Saveable(DType::kInt64, Shape(), [count] { return Tensor::scalar(*count, Device::cpu()); },
               [count](const Tensor& value) { *count = value.item<std::int64_t>(); }));
  manager_.restore_or_initialize();
  // Last: nothing after it throws, so the destructor that stops carrying it always runs.
  if (cluster::Coordinator* agreement = strategy_.extended().coordinator()) {
    DISTRIBUTE_CHECK(agreement->carry_stop_request(*stop_), FailedPreconditionError,
                     "PreemptionCheckpointHandler: another handler serves this strategy already; make one handler "
                     "per strategy");
    agreement->clear_stop_request();  // an earlier handler's agreed stop is not this one's
  }
}

PreemptionCheckpointHandler::~PreemptionCheckpointHandler() {
  if (cluster::Coordinator* agreement = strategy_.extended().coordinator()) {
    agreement->stop_carrying_stop_request();
  }
}

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
  if (terminated_at_ns_ == 0) {
    if (sigterm_watch_) {
      terminated_at_ns_ = g_sigterm_ns.load();
    } else if (config_.termination_watcher_fn()) {
      terminated_at_ns_ = monotonic_ns();
    }
  }
  if (terminated_at_ns_ == 0 || stop_->is_raised()) return;
  // A grace period: stop once what is left of it would only just hold two saves and two steps
  // (the step that carries the stop request runs before the save, and steps vary).
  const std::optional<std::chrono::duration<double>> save = manager_.last_save_time();
  // Both terms >= 0 (the signal handler may store its time after this thread read the clock), so
  // their difference cannot overflow.
  const std::chrono::nanoseconds since_signal(std::max<std::int64_t>(0, monotonic_ns() - terminated_at_ns_));
  const std::chrono::nanoseconds left = grace_in_ns(config_.grace_period) - since_signal;
  if (!save || left <= 2 * (*save + last_step_)) stop_->raise();
}

void PreemptionCheckpointHandler::after_step() {
  ++*total_run_calls_;
  if (!stop_agreed()) return;
  // Cleared before the save: a signal during it asks for another (if exit_fn returns).
  clear_stop();
  manager_.save(*total_run_calls_, /*check_interval=*/false);
  if (!config_.exit_fn) throw_restart_requested();
  config_.exit_fn();
}

void PreemptionCheckpointHandler::save_checkpoint_if_preempted() {
  before_step(StepCaller::kSaveCheckpointIfPreempted);
  after_step();
}

bool PreemptionCheckpointHandler::stop_agreed() {
  cluster::Coordinator* agreement = strategy_.extended().coordinator();
  if (agreement != nullptr && strategy_.extended().num_workers() > 1) return agreement->stop_requested();
  return stop_->is_raised();
}

void PreemptionCheckpointHandler::clear_stop() {
  terminated_at_ns_ = 0;
  if (sigterm_watch_) g_sigterm_ns.store(0);
  stop_->clear();
  if (cluster::Coordinator* agreement = strategy_.extended().coordinator()) {
    agreement->clear_stop_request();
  }
}

}  // namespace distribute
