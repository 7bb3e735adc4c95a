// distribute::Timeline and the event sites' recording: per-thread ring buffers, and the Chrome
// trace-event JSON written at stop().
#include "distribute/timeline.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/timeline.h"
#include "distribute/check.h"
#include "distribute/errors.h"
#include "nlohmann/json.hpp"

namespace distribute {
namespace detail::timeline {

std::atomic<std::uint64_t> session_id{0};

namespace {

using Clock = std::chrono::steady_clock;

struct Event {
  std::int64_t ns = 0;  // Clock's, since its epoch
  const char* name = nullptr;
  char phase = 'B';  // 'B', 'E' or 'i'
  int track = 0;
  Args args;
  std::string message;  // instant events
};

// One thread's events: a ring of `capacity` events, grown as they come so that a thread that
// records little holds little. The owner pushes and stop() reads, each under `mu`; the lock is
// the owner's alone but for that one read.
class Buffer {
 public:
  explicit Buffer(std::size_t capacity) : capacity_(capacity) {}

  void push(Event event) {
    MutexLock lock(mu_);
    if (events_.size() < capacity_) {
      events_.push_back(std::move(event));
    } else {
      events_[written_ % capacity_] = std::move(event);
    }
    ++written_;
  }

  // The events oldest first, and how many the ring dropped.
  std::vector<Event> take(std::uint64_t& dropped) {
    MutexLock lock(mu_);
    dropped = written_ - events_.size();
    std::vector<Event> out;
    out.reserve(events_.size());
    const std::size_t oldest = events_.size() < capacity_ ? 0 : written_ % capacity_;
    for (std::size_t i = 0; i < events_.size(); ++i) out.push_back(std::move(events_[(oldest + i) % events_.size()]));
    events_.clear();
    return out;
  }

 private:
  const std::size_t capacity_;
  Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  std::uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Session {
  std::string path;
  std::FILE* file = nullptr;
  std::size_t capacity = 0;
  std::vector<std::shared_ptr<Buffer>> buffers;
};

Mutex session_mu;
Session session ABSL_GUARDED_BY(session_mu);
std::uint64_t last_session_id ABSL_GUARDED_BY(session_mu) = 0;
std::atomic<int> worker{0};

struct ThreadBuffer {
  std::uint64_t session = 0;
  std::shared_ptr<Buffer> buffer;
};
thread_local ThreadBuffer thread_buffer;

void record(Event event) {
  const std::uint64_t id = session_id.load(std::memory_order_acquire);
  if (id == 0) return;
  if (thread_buffer.session != id) {
    MutexLock lock(session_mu);
    if (session_id.load(std::memory_order_relaxed) != id) return;  // stopped meanwhile
    thread_buffer.buffer = std::make_shared<Buffer>(session.capacity);
    thread_buffer.session = id;
    session.buffers.push_back(thread_buffer.buffer);
  }
  thread_buffer.buffer->push(std::move(event));
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

// One thread's events with every end whose begin the ring dropped left out, and every begin
// still open closed at `stop_ns`, so that begins and ends pair up on every track.
void balance(std::vector<Event>& events, std::int64_t stop_ns) {
  std::map<int, std::vector<const char*>> open;  // per track, the names begun and not ended
  std::vector<Event> kept;
  kept.reserve(events.size());
  for (Event& event : events) {
    if (event.phase == 'B') {
      open[event.track].push_back(event.name);
    } else if (event.phase == 'E') {
      std::vector<const char*>& stack = open[event.track];
      if (stack.empty()) continue;
      stack.pop_back();
    }
    kept.push_back(std::move(event));
  }
  for (auto& [track, stack] : open) {
    while (!stack.empty()) {
      kept.push_back(Event{.ns = stop_ns, .name = stack.back(), .phase = 'E', .track = track});
      stack.pop_back();
    }
  }
  events = std::move(kept);
}

nlohmann::json to_json(const Event& event, std::int64_t start_ns, int pid) {
  nlohmann::json out = {{"name", event.name},
                        {"ph", std::string(1, event.phase)},
                        {"ts", static_cast<double>(event.ns - start_ns) / 1000.0},
                        {"pid", pid},
                        {"tid", event.track}};
  if (event.phase == 'i') {
    out["s"] = "t";  // scoped to its thread
    out["args"] = {{"message", event.message}};
  } else if (event.phase == 'B' && event.args.kind != nullptr) {
    out["args"] = {{"kind", event.args.kind},
                   {"sequence", event.args.sequence},
                   {"bytes", event.args.bytes},
                   {"backend", std::string(event.args.backend)}};
  }
  return out;
}

// Writes and closes `file`; InternalError naming `path` when the system refuses.
void write_trace(std::FILE* file, const std::string& path, std::vector<Event> events, std::uint64_t dropped,
                 std::size_t capacity) {
  const int pid = worker.load(std::memory_order_relaxed);
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.ns < b.ns; });
  const std::int64_t start_ns = events.empty() ? 0 : events.front().ns;
  nlohmann::json trace_events = nlohmann::json::array();
  trace_events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"ts", 0},
                          {"args", {{"name", absl::StrCat("worker ", pid, " on ", host_name())}}}});
  std::set<int> tracks;
  for (const Event& event : events) tracks.insert(event.track);
  for (int track : tracks) {
    trace_events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", track}, {"ts", 0},
                            {"args", {{"name", absl::StrCat("replica ", track)}}}});
  }
  for (const Event& event : events) trace_events.push_back(to_json(event, start_ns, pid));
  const nlohmann::json trace = {
      {"traceEvents", std::move(trace_events)},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"dropped_events", dropped}, {"events_per_thread", capacity}}}};
  const std::string text = trace.dump();
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size() && std::fflush(file) == 0;
  const int error = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    throw InternalError(absl::StrCat("Timeline::stop: writing the timeline to \"", path,
                                     "\" failed: ", std::strerror(written ? errno : error)));
  }
}

void stop_at_exit() {
  try {
    Timeline::stop();
  } catch (const std::exception& e) {
    std::cerr << "distribute: " << e.what() << "\n";
  }
}

}  // namespace

void begin(int track, const char* name, const Args& args) {
  record(Event{.ns = now_ns(), .name = name, .phase = 'B', .track = track, .args = args});
}

void end(int track, const char* name) { record(Event{.ns = now_ns(), .name = name, .phase = 'E', .track = track}); }

void instant(int track, const char* name, std::string message) {
  record(Event{.ns = now_ns(), .name = name, .phase = 'i', .track = track, .message = std::move(message)});
}

void set_worker(int worker_id) { worker.store(worker_id, std::memory_order_relaxed); }

void start_from_environment_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("DISTRIBUTE_TIMELINE");
    if (path == nullptr || *path == '\0') return;
    Timeline::start(path);
    std::atexit(stop_at_exit);
  });
}

}  // namespace detail::timeline

void Timeline::start(const std::string& path, TimelineOptions options) {
  using namespace detail::timeline;
  DISTRIBUTE_CHECK(options.events_per_thread > 0, InvalidArgumentError,
                   "Timeline::start: TimelineOptions::events_per_thread is 0; each thread needs room for one "
                   "event at least");
  detail::MutexLock lock(session_mu);
  DISTRIBUTE_CHECK(session_id.load(std::memory_order_relaxed) == 0, FailedPreconditionError,
                   "Timeline::start(\"", path, "\"): a timeline is recording into \"", session.path,
                   "\" already; call Timeline::stop() first");
  std::FILE* file = std::fopen(path.c_str(), "w");
  const int open_error = errno;
  DISTRIBUTE_CHECK(file != nullptr, InvalidArgumentError, "Timeline::start: cannot write the timeline to \"", path,
                   "\": ", std::strerror(open_error));
  session = Session{.path = path, .file = file, .capacity = options.events_per_thread};
  session_id.store(++last_session_id, std::memory_order_release);
}

bool Timeline::stop() {
  using namespace detail::timeline;
  Session stopped;
  {
    detail::MutexLock lock(session_mu);
    if (session_id.load(std::memory_order_relaxed) == 0) return false;
    session_id.store(0, std::memory_order_release);
    stopped = std::move(session);
    session = Session{};
  }
  const std::int64_t stop_ns = now_ns();
  std::vector<Event> events;
  std::uint64_t dropped = 0;
  for (const std::shared_ptr<Buffer>& buffer : stopped.buffers) {
    std::uint64_t buffer_dropped = 0;
    std::vector<Event> mine = buffer->take(buffer_dropped);
    dropped += buffer_dropped;
    balance(mine, stop_ns);
    std::move(mine.begin(), mine.end(), std::back_inserter(events));
  }
  write_trace(stopped.file, stopped.path, std::move(events), dropped, stopped.capacity);
  return true;
}

bool Timeline::active() { return detail::timeline::on(); }

}  // namespace distribute
