// distribute::Timeline: a trace of what the replicas did and when, for finding where a training
// step spends its time (waiting for the other replicas or moving data). Off by default; turned on
// by Timeline::start(path) or by the environment variable DISTRIBUTE_TIMELINE=<path>, which is read
// once, when the program's first strategy is made, and then stops at exit. Timeline::stop() writes
// the trace as Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open: one process
// per worker, one thread per replica, with each run, each collective (split into its wait and its
// data phase), each merge_call, apply_gradients and each replica's error; beside them the input's
// get_next waits, the program's checkpoint saves, and a multi-worker step's vote, local phase and
// MPI data phase. In a multi-worker job stop() is collective: worker 0 gathers every worker's
// events, their clocks aligned, into one file.
// docs/timeline.md shows an example.
//
// Each thread keeps its events in a ring buffer of TimelineOptions::events_per_thread events: when
// it is full the oldest events go, and the file says how many ("dropped_events"). While the
// timeline is off an event site costs one relaxed atomic load. stop() writes the file event by
// event, so it takes little memory beyond the events; text the trace holds that is not valid
// UTF-8 (an exception's message) is written with each invalid byte replaced by U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace distribute {

struct TimelineOptions {
  // Events each thread keeps; at least 1. A run, a collective and its two phases take 2 events
  // each (begin and end).
  std::size_t events_per_thread = std::size_t{1} << 16;
};

class Timeline {
 public:
  // Starts recording into the file at `path`, which is created (or truncated) now so that a path
  // that cannot be written fails here: InvalidArgumentError naming the path and the reason.
  // FailedPreconditionError while a timeline is recording already (naming its path), and
  // InvalidArgumentError for events_per_thread 0. Any thread, at any time.
  static void start(const std::string& path, TimelineOptions options = {});
  // Stops recording and writes every thread's events to the file given to start(). Events of a
  // run still going on are closed at the moment of stop(). Without a timeline recording it does
  // nothing and returns false (so a cleanup path may call it unconditionally); true otherwise.
  // InternalError when writing the file fails (the timeline is stopped all the same). In a
  // multi-worker job every worker must call it: worker 0 writes the job's events into its file
  // (docs/timeline.md); a worker that does not answer within the strategy's timeout is left out.
  static bool stop();
  // Whether a timeline is recording.
  static bool active();
};

}  // namespace distribute
