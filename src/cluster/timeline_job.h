// distribute::cluster: the timeline's way to the other workers (base/timeline.h's Job), over a
// coordinator of its own, so that the strategies' traffic never meets Timeline::stop()'s. The
// multi-worker strategy makes it once per process, over a transport of the backend it chose.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "base/timeline.h"
#include "cluster/worker_transport.h"

namespace distribute::cluster {

// `timeout` bounds stop()'s waits for the other workers (0: a default of 60 s); `reachable` says
// whether the transport still works (false once its backend has shut down).
std::unique_ptr<detail::timeline::Job> make_timeline_job(std::unique_ptr<WorkerTransport> transport,
                                                         std::chrono::duration<double> timeout,
                                                         std::function<bool()> reachable);

}  // namespace distribute::cluster
