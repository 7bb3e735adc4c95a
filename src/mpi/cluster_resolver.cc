// ClusterSpec and ClusterResolver: the job's description, independent of how it was launched.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/errors.h"
#include "distribute/mpi/multi_worker_mirrored_strategy.h"

namespace distribute {

ClusterSpec::ClusterSpec(std::map<std::string, std::vector<std::string>> jobs) : jobs_(jobs.begin(), jobs.end()) {}

std::vector<std::string> ClusterSpec::jobs() const {
  std::vector<std::string> out;
  for (const auto& [job, tasks] : jobs_) out.push_back(job);
  return out;
}

int ClusterSpec::num_tasks(std::string_view job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : static_cast<int>(it->second.size());
}

const std::vector<std::string>& ClusterSpec::job_tasks(std::string_view job) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    throw InvalidArgumentError(absl::StrCat("ClusterSpec: no job \"", std::string(job), "\"; the jobs are {",
                                            absl::StrJoin(jobs(), ", "), "}"));
  }
  return it->second;
}

ClusterResolver::~ClusterResolver() = default;

}  // namespace distribute
