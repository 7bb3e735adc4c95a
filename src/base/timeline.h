// distribute::detail::timeline: the event sites' side of distribute::Timeline. The layers above
// record spans (a begin and an end event, on the track of one replica) and instant events; each
// thread writes into its own ring buffer, and Timeline::stop() writes them all out. While no
// timeline records, a site costs one relaxed load of `session_id` and computes nothing else.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/wait.h"

namespace distribute::detail::timeline {

// The recording session's number, 0 while none records (a thread whose buffer belongs to another
// number makes a new one).
extern std::atomic<std::uint64_t> session_id;
// Whether a timeline records. Relaxed: a site that misses the very start or end of a recording
// only records one event more or less, and stop() closes what it left open.
inline bool on() { return session_id.load(std::memory_order_relaxed) != 0; }

// What a collective's events carry. `kind` and `backend` must have static storage (kind_name()
// and Communicator::name() return literals).
struct Args {
  const char* kind = nullptr;
  std::int64_t sequence = -1;
  std::int64_t bytes = -1;
  std::string_view backend;
};

// On the recording thread; `name` has static storage. `track` is the replica's global id.
// `message` may hold any bytes: stop() writes those that are not UTF-8 as U+FFFD.
void begin(int track, const char* name, const Args& args);
void end(int track, const char* name);
void instant(int track, const char* name, std::string message);

// The tracks of the replicas' async lanes (src/replica/async_lane.h): kAsyncLaneTrack plus the
// replica's global id, "replica k async", where the collectives it issued without waiting run.
inline constexpr int kAsyncLaneTrack = 1 << 19;
// The track of a multi-worker collective's steps across the workers (the local phase, the
// workers' vote on the call, the data phase over the transport), which one thread per worker
// takes while its replicas wait: a thread of its own, "cross-worker", next to the replicas'.
inline constexpr int kCrossWorkerTrack = 1 << 20;
// The track of the distributed input's waits (get_next), "input", on the thread that iterates.
inline constexpr int kInputTrack = kCrossWorkerTrack + 1;
// The track of the program's cross-replica calls (a checkpoint's save, apply_gradients outside a
// run), "program".
inline constexpr int kProgramTrack = kCrossWorkerTrack + 2;

// This process's worker id, for the process name ("worker k on <host>") and the pid of its events.
void set_worker(int worker_id);
// The workers of this process's multi-worker job, as Timeline::stop() reaches them; src/cluster/
// implements it over a transport of its own, so that the strategies' traffic never meets it.
class Job {
 public:
  virtual ~Job() = default;
  virtual int worker_id() const = 0;
  virtual int num_workers() const = 0;
  // This worker's host name.
  virtual std::string host() const = 0;
  // Whether the workers can still be reached (false once MPI is finalised).
  virtual bool reachable() const = 0;
  // The bound on stop()'s waits for the other workers, all together.
  virtual std::chrono::duration<double> timeout() const = 0;
  // Sends `mine` to every worker and receives worker w's into all[w]. Returns the workers whose
  // had not come by `deadline` (then the job cannot be used again), else nothing.
  virtual std::vector<int> exchange(std::int64_t mine, std::span<std::int64_t> all, Deadline deadline) = 0;
  // Every worker's bytes in worker order, worker w's sizes[w] long; throws an Error when the
  // transfer stalls past `deadline`.
  virtual std::string all_gather(const std::string& mine, std::span<const std::size_t> sizes, Deadline deadline) = 0;
};
// Set once, by the first multi-worker strategy (src/multi_worker/); Timeline::stop() is then collective:
// worker 0 writes the job's file.
void set_job(std::unique_ptr<Job> job);
// Starts a timeline into $DISTRIBUTE_TIMELINE, if set, the first time it is called (the making of
// the program's first strategy), and stops it at exit. Throws what Timeline::start throws.
void start_from_environment_once();
// Stops a recording timeline, printing an error to stderr instead of throwing: the exit path, which
// MPI's finalisation also takes first, so that the workers still reach each other.
void stop_at_exit();

// A begin event now and its end when the span goes out of scope, also when an exception leaves
// it. make_args is called only while recording.
class Span {
 public:
  Span(int track, const char* name) : Span(track, name, [] { return Args{}; }) {}
  template <typename MakeArgs>
  Span(int track, const char* name, MakeArgs&& make_args) {
    if (on()) [[unlikely]] {
      begin(track, name, std::forward<MakeArgs>(make_args)());
      track_ = track;
      name_ = name;
    }
  }
  ~Span() {
    if (name_ != nullptr) [[unlikely]] end(track_, name_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_ = nullptr;  // null: not recorded, so no end either
  int track_ = 0;
};

}  // namespace distribute::detail::timeline
