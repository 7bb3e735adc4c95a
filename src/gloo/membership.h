// distribute::detail: the membership of an elastic job over Gloo (MultiWorkerMirroredStrategy with
// ElasticOptions). The job lives through generations: each is a list of workers, agreed through
// the rendezvous store, over which the strategy builds a transport of its own. A generation is
// formed when its workers come to it: at the start, after a member fails (the survivors), or
// when a worker waits to join (every member and the newcomers).
//
// The store's keys are written once each. Under "<job>/elastic/g<N>/": "slot-<k>", which the k-th
// worker to come to generation N claims (the first claim of a slot wins, so k numbers them), and
// "members", the generation's workers in order, written when the generation closes: once every
// worker of generation N-1 has come, else once none has come for ElasticOptions::settle_time (the
// others are taken for gone). A survivor that gave up waiting for some workers in an agreement
// names them in its claim: the others had come to that agreement, so were alive, and each gives
// up within the collective timeout of its own wait, which may have begun seconds later on a busy
// machine. So while every survivor names whom it missed, the generation also waits, up to
// survivor_wait from the first claim it saw, for the workers none of them missed. Every worker
// that came watches for that and closes the generation itself, the first list written standing,
// so that no single worker's death (the first to come, say) leaves the others waiting. A worker
// that came too late for a generation goes on to the next one, as a newcomer.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/wait.h"
#include "multi_worker/elastic_generation.h"

namespace distribute::detail {

struct ElasticMembershipOptions {
  std::string prefix;  // "<job>/elastic"
  // The resolver's view of the first generation: this worker's rank in it, and its size.
  int initial_rank = 0;
  int initial_workers = 1;
  int max_workers = 0;  // 0: no limit
  std::chrono::milliseconds settle_time{1000};
  // How long a generation waits for workers its survivors saw alive (the collective timeout).
  std::chrono::milliseconds survivor_wait{0};
  // How long a worker waits for a generation to close (and a newcomer for a place in one).
  std::chrono::milliseconds timeout{60000};
};

class ElasticMembership {
 public:
  ElasticMembership(std::shared_ptr<::gloo::rendezvous::Store> store, ElasticMembershipOptions options);

  // The first generation of this process: the job's first (with the other initial workers) when
  // the job has none yet, else the next one, as a newcomer. DeadlineExceededError when it is not
  // let in within the timeout.
  ElasticGeneration join();
  // The generation after `current`, which this worker was a member of. `missed`: the workers
  // (ids in `current`) this one gave up waiting for, when it did (Coordinator::missing_at_timeout);
  // empty when it left `current` for another reason.
  ElasticGeneration next(const ElasticGeneration& current, const std::vector<int>& missed = {});
  // Whether a worker waits to join the generation after `current`, and the job has room for it.
  bool newcomer_waiting(const ElasticGeneration& current);
  ::gloo::rendezvous::Store& store() { return *store_; }
  const std::string& prefix() const { return options_.prefix; }

 private:
  // Comes to generation `number` (as the `previous_id`-th worker of the one before, or -1) and
  // returns the first generation from there that lets it in.
  ElasticGeneration enter(int number, int previous_id, const std::vector<int>& missed);
  // Waits for generation `number`'s workers and writes its members, unless another worker does
  // first; returns once they are written. DeadlineExceededError at `deadline`, after closing it
  // with nobody.
  void close(int number, Deadline deadline);
  std::string key(int generation, const std::string& name) const;

  std::shared_ptr<::gloo::rendezvous::Store> store_;
  ElasticMembershipOptions options_;
  std::string token_;
  std::string host_;
};

}  // namespace distribute::detail
