// distribute::detail: one generation of an elastic job's workers (MultiWorkerMirroredStrategy with
// ElasticOptions), as the backend that agreed on it (gloo/membership.h) hands it to the strategy.
#pragma once

#include <string>
#include <vector>

namespace distribute::detail {

struct ElasticMember {
  std::string token;  // unique to the process: "host/pid/random"
  std::string host;
  int previous_id = -1;  // its worker id in the generation before, -1 for a newcomer
};

struct ElasticGeneration {
  int number = -1;
  std::vector<ElasticMember> members;  // in worker order
  int worker_id = -1;                  // this process's
  // The generation its survivors come from (their previous_id is theirs there): the one before,
  // unless that one was never formed. -1 for the first.
  int previous_number = -1;
  int num_workers() const { return static_cast<int>(members.size()); }
};

}  // namespace distribute::detail
