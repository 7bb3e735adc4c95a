// distribute::Timeline and the event sites' recording: per-thread ring buffers, and the Chrome
// trace-event JSON written at stop(), event by event, so that writing a trace takes little memory
// beyond the events themselves.
#include "distribute/timeline.h"


#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "base/host_name.h"
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

  // The events oldest first, and how many the ring dropped; rotated in place, not copied.
  std::vector<Event> take(std::uint64_t& dropped) {
    MutexLock lock(mu_);
    dropped = written_ - events_.size();
    if (events_.size() == capacity_) {
      std::rotate(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(written_ % capacity_), events_.end());
    }
    return std::exchange(events_, {});
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

// One thread's events with every end whose begin the ring dropped left out, and every begin
// still open closed at `stop_ns` (or at the thread's last event, should it have recorded one after
// stop_ns was read), so that begins and ends pair up on every track and the events stay in time
// order. In place: a trace's events are most of the memory stop() takes.
void balance(std::vector<Event>& events, std::int64_t stop_ns) {
  std::map<int, std::vector<const char*>> open;  // per track, the names begun and not ended
  std::size_t kept = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    Event& event = events[i];
    if (event.phase == 'B') {
      open[event.track].push_back(event.name);
    } else if (event.phase == 'E') {
      std::vector<const char*>& stack = open[event.track];
      if (stack.empty()) continue;
      stack.pop_back();
    }
    if (kept != i) events[kept] = std::move(event);
    ++kept;
  }
  events.resize(kept);
  const std::int64_t close_ns = events.empty() ? stop_ns : std::max(stop_ns, events.back().ns);
  for (auto& [track, stack] : open) {
    while (!stack.empty()) {
      events.push_back(Event{.ns = close_ns, .name = stack.back(), .phase = 'E', .track = track});
      stack.pop_back();
    }
  }
}

// One worker's events as stop() took them: each thread's in time order.
struct WorkerEvents {
  std::vector<std::vector<Event>> threads;
  std::uint64_t dropped = 0;  // by the rings
};

// The time of the worker's first event, on the clock that `offset_ns` leads to; the largest
// time when it has none.
std::int64_t first_ns(const WorkerEvents& events, std::int64_t offset_ns) {
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  for (const std::vector<Event>& thread : events.threads) {
    if (!thread.empty()) first = std::min(first, thread.front().ns + offset_ns);
  }
  return first;
}

// JSON text of `value`, with every byte that is not UTF-8 (an exception's message, a host name)
// replaced by U+FFFD, so that no string can keep a trace from being written.
std::string to_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Where a trace's text goes as it is made: into a string (a worker's part, sent to worker 0), or
// into a file, written out in chunks as the text grows, so that the file's text is never in memory
// whole.
class TraceText {
 public:
  // Into a string, take() returns it.
  TraceText() = default;
  // Into `file`, which it owns: close() writes the rest and closes it; the destructor closes it
  // unwritten, if close() was not reached (a worker that leaves the writing to worker 0, or an
  // exception).
  TraceText(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  ~TraceText() {
    if (file_ != nullptr) std::fclose(file_);
  }
  TraceText(const TraceText&) = delete;
  TraceText& operator=(const TraceText&) = delete;

  void append(std::string_view text) {
    text_ += text;
    if (file_ != nullptr && text_.size() >= kChunk) write_out();
  }
  std::string take() { return std::move(text_); }
  // Writes the rest and closes the file; InternalError naming the path when the system refused a
  // write or the close.
  void close() {
    write_out();
    if (error_ == 0 && std::fflush(file_) != 0) error_ = errno;
    if (std::fclose(std::exchange(file_, nullptr)) != 0 && error_ == 0) error_ = errno;
    DISTRIBUTE_CHECK(error_ == 0, InternalError, "Timeline::stop: writing the timeline to \"", path_,
                     "\" failed: ", std::strerror(error_));
  }

 private:
  static constexpr std::size_t kChunk = std::size_t{1} << 16;

  // After a failed write the rest is dropped: close() reports the first failure.
  void write_out() {
    if (error_ == 0 && !text_.empty() && std::fwrite(text_.data(), 1, text_.size(), file_) != text_.size()) {
      error_ = errno;
    }
    text_.clear();
  }

  std::FILE* file_ = nullptr;
  std::string path_;
  std::string text_;
  int error_ = 0;  // errno of the first failed write
};

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
    default:
      if (track >= kAsyncLaneTrack) return absl::StrCat("replica ", track - kAsyncLaneTrack, " async");
      return absl::StrCat("replica ", track);
  }
}

// Appends one worker's trace events, comma-separated: its metadata first, then its events in time
// order (a thread's before a later thread's at the same time), "ts" in µs from `start_ns` of worker
// 0's clock, which `offset_ns` leads this worker's to.
void write_worker_events(TraceText& out, const WorkerEvents& events, int pid, const std::string& host,
                         std::int64_t offset_ns, std::int64_t start_ns) {
  out.append(to_text({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"ts", 0},
                      {"args", {{"name", absl::StrCat("worker ", pid, " on ", host)}}}}));
  std::set<int> tracks;
  for (const std::vector<Event>& thread : events.threads) {
    for (const Event& event : thread) tracks.insert(event.track);
  }
  for (int track : tracks) {
    out.append(",");
    out.append(to_text({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", track}, {"ts", 0},
                        {"args", {{"name", track_name(track)}}}}));
  }
  // The threads merged by time: the next event of each thread that has one, the earliest on top.
  using Next = std::pair<std::int64_t, std::size_t>;  // its time and its thread
  std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
  std::vector<std::size_t> position(events.threads.size(), 0);
  for (std::size_t t = 0; t < events.threads.size(); ++t) {
    if (!events.threads[t].empty()) next.emplace(events.threads[t].front().ns, t);
  }
  while (!next.empty()) {
    const std::size_t t = next.top().second;
    next.pop();
    const std::vector<Event>& thread = events.threads[t];
    const Event& event = thread[position[t]];
    nlohmann::json json = {{"name", event.name},
                           {"ph", std::string(1, event.phase)},
                           {"ts", static_cast<double>(event.ns + offset_ns - start_ns) / 1000.0},
                           {"pid", pid},
                           {"tid", event.track}};
    if (event.phase == 'i') {
      json["s"] = "t";  // scoped to its thread
      json["args"] = {{"message", event.message}};
    } else if (event.phase == 'B' && event.args.kind != nullptr) {
      json["args"] = {{"kind", event.args.kind},
                      {"sequence", event.args.sequence},
                      {"bytes", event.args.bytes},
                      {"backend", std::string(event.args.backend)}};
    } else if (event.phase == 'B' && event.args.bytes >= 0) {
      json["args"] = {{"bytes", event.args.bytes}};  // a step's payload (the cross-worker "data")
    }
    out.append(",");
    out.append(to_text(json));
    if (++position[t] < thread.size()) next.emplace(thread[position[t]].ns, t);
  }
}

// Writes a trace into `out`'s file and closes it: the trace events that write_events appends
// (comma-separated), then `other` as otherData. InternalError naming the path when the system
// refuses.
template <typename WriteEvents>
void write_trace(TraceText& out, WriteEvents&& write_events, const nlohmann::json& other) {
  out.append("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  std::forward<WriteEvents>(write_events)(out);
  out.append("],\"otherData\":");
  out.append(to_text(other));
  out.append("}");
  out.close();
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

// Brings every worker's part to worker 0: there, `all` holds them in worker order, worker w's
// sizes[w] bytes long. Returns the workers that did not answer; throws what the transport's data
// step throws.
std::vector<int> gather(Job& workers, const std::string& mine, Deadline deadline, std::string& all,
                        std::vector<std::size_t>& sizes) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(workers.num_workers()));
  std::vector<int> missing = workers.exchange(static_cast<std::int64_t>(mine.size()), counts, deadline);
  if (!missing.empty()) return missing;
  sizes.assign(counts.begin(), counts.end());
  all = workers.all_gather(mine, sizes, deadline);
  return {};
}

// What otherData says of one worker, and how its part of the gathered text starts (a line of its
// own).
nlohmann::json part_header(int worker_id, std::uint64_t dropped, const ClockSample& clock) {
  return {{"worker", worker_id},
          {"dropped", dropped},
          {"clock_offset_ns", clock.offset_ns},
          {"clock_error_ns", clock.error_ns}};
}

// Timeline::stop() on a worker of a multi-worker job: measures the clocks, agrees on the job's
// first event (the trace's time 0), and worker 0 writes every worker's events into its file; the
// others close theirs unwritten, unless worker 0 did not answer (then each writes its own). A
// worker that does not answer within the job's timeout is left out, and named in
// otherData.missing_workers.
void stop_job(TraceText& file, std::size_t capacity, const WorkerEvents& events, Job& workers) {
  const Deadline deadline = deadline_after(workers.timeout());
  const int me = workers.worker_id();
  const std::string host = workers.host();
  ClockSample clock;
  std::vector<int> missing = measure_clock(workers, deadline, clock);
  std::int64_t start_ns = first_ns(events, clock.offset_ns);
  if (missing.empty()) {
    std::vector<std::int64_t> firsts(static_cast<std::size_t>(workers.num_workers()));
    missing = workers.exchange(start_ns, firsts, deadline);
    if (missing.empty()) start_ns = *std::min_element(firsts.begin(), firsts.end());
  }
  std::string all;  // every worker's part, at worker 0
  std::vector<std::size_t> sizes;
  std::string failure;
  if (missing.empty()) {
    TraceText mine;
    mine.append(to_text(part_header(me, events.dropped, clock)));
    mine.append("\n");
    write_worker_events(mine, events, me, host, clock.offset_ns, start_ns);
    try {
      missing = gather(workers, mine.take(), deadline, all, sizes);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  const bool gathered = missing.empty() && failure.empty();
  if (me != 0 && std::find(missing.begin(), missing.end(), 0) == missing.end()) return;  // file closes unwritten
  // Each written part's header, and where its events' text lies in `all`.
  std::vector<nlohmann::json> headers;
  std::vector<std::string_view> texts;
  if (gathered) {
    std::size_t from = 0;
    for (std::size_t size : sizes) {
      const std::string_view part(all.data() + from, size);
      const std::size_t line_end = part.find('\n');
      headers.push_back(nlohmann::json::parse(part.substr(0, line_end)));
      texts.push_back(part.substr(line_end + 1));
      from += size;
    }
  } else {
    headers.push_back(part_header(me, events.dropped, clock));
  }
  std::uint64_t dropped = 0;
  nlohmann::json other = {
      {"events_per_thread", capacity},
      {"workers", workers.num_workers()},
      {"clock_sync", absl::StrCat("each worker's clock is aligned to worker 0's by the shortest of ", kClockRounds,
                                  " round trips to it at stop(); the error is at most clock_error_us")}};
  for (const nlohmann::json& header : headers) {
    const std::string id = std::to_string(header.at("worker").get<int>());
    dropped += header.at("dropped").get<std::uint64_t>();
    other["clock_offset_us"][id] = static_cast<double>(header.at("clock_offset_ns").get<std::int64_t>()) / 1000.0;
    other["clock_error_us"][id] = static_cast<double>(header.at("clock_error_ns").get<std::int64_t>()) / 1000.0;
  }
  other["dropped_events"] = dropped;
  if (!missing.empty()) other["missing_workers"] = missing;
  if (!failure.empty()) other["gather_error"] = failure;
  write_trace(
      file,
      [&](TraceText& out) {
        if (!gathered) {
          // Alone: its time 0 is its own first event.
          write_worker_events(out, events, me, host, clock.offset_ns, first_ns(events, clock.offset_ns));
          return;
        }
        for (std::size_t w = 0; w < texts.size(); ++w) {
          if (w > 0) out.append(",");
          out.append(texts[w]);
        }
      },
      other);
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
  WorkerEvents events;
  for (const std::shared_ptr<Buffer>& buffer : stopped.buffers) {
    std::uint64_t dropped = 0;
    events.threads.push_back(buffer->take(dropped));
    events.dropped += dropped;
    balance(events.threads.back(), stop_ns);
  }
  stopped.buffers.clear();
  TraceText file(stopped.file, stopped.path);
  if (the_job != nullptr && the_job->num_workers() > 1 && the_job->reachable()) {
    stop_job(file, stopped.capacity, events, *the_job);
    return true;
  }
  const nlohmann::json other = {{"dropped_events", events.dropped}, {"events_per_thread", stopped.capacity}};
  write_trace(
      file,
      [&](TraceText& out) {
        write_worker_events(out, events, worker.load(std::memory_order_relaxed), detail::host_name(), 0, first_ns(events, 0));
      },
      other);
  return true;
}

bool Timeline::active() { return detail::timeline::on(); }

}  // namespace distribute
