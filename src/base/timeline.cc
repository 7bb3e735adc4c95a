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
#include <limits>
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

nlohmann::json to_json(const Event& event, int pid, std::int64_t offset_ns) {
  nlohmann::json out = {{"name", event.name},
                        {"ph", std::string(1, event.phase)},
                        {"ts", event.ns + offset_ns},  // ns of worker 0's clock until write_trace
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

// How this worker's steady clock relates to worker 0's: offset_ns added to a reading of this
// worker's gives worker 0's at the same moment, to within error_ns.
struct ClockSample {
  std::int64_t offset_ns = 0;
  std::int64_t error_ns = 0;
};

std::string track_name(int track) {
  switch (track) {
    case kCrossWorkerTrack: return "cross-worker";
    case kInputTrack: return "input";
    case kProgramTrack: return "program";
    default: return absl::StrCat("replica ", track);
  }
}

// One worker's part of the file: its trace events (metadata first, then by time, "ts" in ns of
// worker 0's clock) and what otherData says of it.
nlohmann::json worker_part(std::vector<Event> events, int pid, const std::string& host, std::uint64_t dropped,
                           const ClockSample& clock) {
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.ns < b.ns; });
  nlohmann::json trace_events = nlohmann::json::array();
  trace_events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"ts", 0},
                          {"args", {{"name", absl::StrCat("worker ", pid, " on ", host)}}}});
  std::set<int> tracks;
  for (const Event& event : events) tracks.insert(event.track);
  for (int track : tracks) {
    trace_events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", track}, {"ts", 0},
                            {"args", {{"name", track_name(track)}}}});
  }
  for (const Event& event : events) trace_events.push_back(to_json(event, pid, clock.offset_ns));
  return {{"worker", pid},
          {"events", std::move(trace_events)},
          {"dropped", dropped},
          {"clock_offset_ns", clock.offset_ns},
          {"clock_error_ns", clock.error_ns}};
}

// Writes the workers' parts (the chief's alone for one process) as one trace, times in µs from
// the first event, and closes `file`; InternalError naming `path` when the system refuses.
// `job_data` goes into otherData.
void write_trace(std::FILE* file, const std::string& path, std::vector<nlohmann::json> parts, std::size_t capacity,
                 nlohmann::json job_data) {
  std::int64_t start_ns = std::numeric_limits<std::int64_t>::max();
  for (const nlohmann::json& part : parts) {
    for (const nlohmann::json& event : part.at("events")) {
      if (event.at("ph") != "M") start_ns = std::min(start_ns, event.at("ts").get<std::int64_t>());
    }
  }
  nlohmann::json trace_events = nlohmann::json::array();
  std::uint64_t dropped = 0;
  for (nlohmann::json& part : parts) {
    dropped += part.at("dropped").get<std::uint64_t>();
    for (nlohmann::json& event : part.at("events")) {
      if (event.at("ph") != "M") event["ts"] = static_cast<double>(event.at("ts").get<std::int64_t>() - start_ns) / 1000.0;
      trace_events.push_back(std::move(event));
    }
  }
  nlohmann::json other = {{"dropped_events", dropped}, {"events_per_thread", capacity}};
  other.update(job_data);
  const nlohmann::json trace = {
      {"traceEvents", std::move(trace_events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
  const std::string text = trace.dump();
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size() && std::fflush(file) == 0;
  const int error = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    throw InternalError(absl::StrCat("Timeline::stop: writing the timeline to \"", path,
                                     "\" failed: ", std::strerror(written ? errno : error)));
  }
}

// Set once and kept until exit, like the MPI communicators it works on.
Job* job ABSL_GUARDED_BY(session_mu) = nullptr;

// Ping-pong rounds of the clock measurement; the round with the shortest round trip is kept.
constexpr int kClockRounds = 16;

// Measures this worker's clock against worker 0's (every worker at once): in a round each worker
// reads its clock (t1) and exchanges; then reads it again (t2) and exchanges that, and reads it
// once the others' have come (t3). Worker 0's t2 was read after every worker's t1 came and before
// its own second message left, so it lies between this worker's t1 and t3: the offset is
// t2 - (t1 + t3) / 2 to within half the round trip. Returns the workers that did not answer.
std::vector<int> measure_clock(Job& workers, Deadline deadline, ClockSample& sample) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(workers.num_workers()));
  std::int64_t best_round_trip = std::numeric_limits<std::int64_t>::max();
  for (int round = 0; round < kClockRounds; ++round) {
    const std::int64_t t1 = now_ns();
    if (std::vector<int> missing = workers.exchange(t1, all, deadline); !missing.empty()) return missing;
    const std::int64_t t2 = now_ns();
    if (std::vector<int> missing = workers.exchange(t2, all, deadline); !missing.empty()) return missing;
    const std::int64_t t3 = now_ns();
    if (t3 - t1 < best_round_trip) {
      best_round_trip = t3 - t1;
      sample = {.offset_ns = all[0] - (t1 + t3) / 2, .error_ns = (best_round_trip + 1) / 2};
    }
  }
  if (workers.worker_id() == 0) sample = {};
  return {};
}

// Brings every worker's part to worker 0: there, `parts` is each worker's in worker order.
// Returns the workers that did not answer; throws what the transport's data step throws.
std::vector<int> gather(Job& workers, const std::string& mine, Deadline deadline, std::vector<std::string>& parts) {
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(workers.num_workers()));
  std::vector<int> missing = workers.exchange(static_cast<std::int64_t>(mine.size()), sizes, deadline);
  if (!missing.empty()) return missing;
  const std::vector<std::size_t> counts(sizes.begin(), sizes.end());
  const std::string all = workers.all_gather(mine, counts, deadline);
  parts.clear();
  std::size_t from = 0;
  for (std::size_t count : counts) {
    parts.push_back(all.substr(from, count));
    from += count;
  }
  return {};
}

// Timeline::stop() on a worker of a multi-worker job: measures the clocks, and worker 0 writes
// every worker's events into its file; the others close theirs unwritten, unless worker 0 did not
// answer (then each writes its own). A worker that does not answer within the job's timeout is
// left out, and named in otherData.missing_workers.
void stop_job(Session& stopped, std::vector<Event> events, std::uint64_t dropped, Job& workers) {
  const Deadline deadline = deadline_after(workers.timeout());
  const int me = workers.worker_id();
  ClockSample clock;
  std::vector<int> missing = measure_clock(workers, deadline, clock);
  nlohmann::json mine = worker_part(std::move(events), me, workers.host(), dropped, clock);
  std::vector<std::string> parts;
  std::string failure;
  if (missing.empty()) {
    try {
      missing = gather(workers, mine.dump(), deadline, parts);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  const bool gathered = missing.empty() && failure.empty();
  if (me != 0 && std::find(missing.begin(), missing.end(), 0) == missing.end()) {
    std::fclose(stopped.file);
    return;
  }
  std::vector<nlohmann::json> written;
  if (gathered) {
    for (const std::string& part : parts) written.push_back(nlohmann::json::parse(part));
  } else {
    written.push_back(std::move(mine));
  }
  nlohmann::json job_data = {
      {"workers", workers.num_workers()},
      {"clock_sync", absl::StrCat("each worker's clock is aligned to worker 0's by the shortest of ", kClockRounds,
                                  " round trips to it at stop(); the error is at most clock_error_us")}};
  for (const nlohmann::json& part : written) {
    const std::string id = std::to_string(part.at("worker").get<int>());
    job_data["clock_offset_us"][id] = static_cast<double>(part.at("clock_offset_ns").get<std::int64_t>()) / 1000.0;
    job_data["clock_error_us"][id] = static_cast<double>(part.at("clock_error_ns").get<std::int64_t>()) / 1000.0;
  }
  if (!missing.empty()) job_data["missing_workers"] = missing;
  if (!failure.empty()) job_data["gather_error"] = failure;
  write_trace(stopped.file, stopped.path, std::move(written), stopped.capacity, std::move(job_data));
}

}  // namespace

void stop_at_exit() {
  try {
    Timeline::stop();
  } catch (const std::exception& e) {
    std::cerr << "distribute: " << e.what() << "\n";
  }
}

void set_job(std::unique_ptr<Job> the_job) {
  MutexLock lock(session_mu);
  if (job == nullptr) job = the_job.release();
}

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
  Job* the_job = nullptr;
  {
    detail::MutexLock lock(session_mu);
    if (session_id.load(std::memory_order_relaxed) == 0) return false;
    session_id.store(0, std::memory_order_release);
    stopped = std::move(session);
    session = Session{};
    the_job = job;
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
  if (the_job != nullptr && the_job->num_workers() > 1 && the_job->reachable()) {
    stop_job(stopped, std::move(events), dropped, *the_job);
    return true;
  }
  std::vector<nlohmann::json> parts;
  parts.push_back(worker_part(std::move(events), worker.load(std::memory_order_relaxed), host_name(), dropped, {}));
  write_trace(stopped.file, stopped.path, std::move(parts), stopped.capacity, nlohmann::json::object());
  return true;
}

bool Timeline::active() { return detail::timeline::on(); }

}  // namespace distribute
