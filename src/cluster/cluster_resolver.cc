// ClusterSpec and the resolvers that read a job's description from its launcher: TF_CONFIG's JSON
// (parsed by nlohmann-json) and Slurm's compressed lists.
#include "distribute/cluster/cluster_resolver.h"

#include <charconv>
#include <cstdlib>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "distribute/check.h"
#include "distribute/errors.h"
#include "nlohmann/json.hpp"

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

namespace {

// The value of environment variable `name`; nothing when it is unset.
std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// `text` as a whole decimal number; nothing when it is not one.
std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

constexpr const char* kTFConfig = "TFConfigClusterResolver: ";

// TF_CONFIG's "cluster": each job's list of task addresses.
ClusterSpec parse_tf_config_cluster(const nlohmann::json& cluster) {
  DISTRIBUTE_CHECK(cluster.is_object(), InvalidArgumentError, kTFConfig, "TF_CONFIG's \"cluster\" is ",
                   cluster.dump(), "; it maps each job to the list of its tasks' addresses, {\"worker\": "
                   "[\"host0:2222\", \"host1:2222\"]}");
  std::map<std::string, std::vector<std::string>> jobs;
  for (const auto& [job, tasks] : cluster.items()) {
    DISTRIBUTE_CHECK(tasks.is_array(), InvalidArgumentError, kTFConfig, "TF_CONFIG's job \"", job, "\" is ",
                     tasks.dump(), "; give it the list of its tasks' addresses (tasks numbered by their place in "
                     "it: a job with gaps, as a map of task ids, has no place among a strategy's workers)");
    std::vector<std::string>& addresses = jobs[job];
    for (const nlohmann::json& address : tasks) {
      DISTRIBUTE_CHECK(address.is_string(), InvalidArgumentError, kTFConfig, "task ", addresses.size(),
                       " of TF_CONFIG's job \"", job, "\" is ", address.dump(), "; a task's address is a string, "
                       "\"host:port\"");
      addresses.push_back(address.get<std::string>());
    }
  }
  return ClusterSpec(std::move(jobs));
}

// A string member of TF_CONFIG's object `object` (named `where` in messages); empty when absent.
std::string string_member(const nlohmann::json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) return {};
  DISTRIBUTE_CHECK(it->is_string(), InvalidArgumentError, kTFConfig, "TF_CONFIG's ", where, "\"", key, "\" is ",
                   it->dump(), "; it must be a string");
  return it->get<std::string>();
}

}  // namespace

TFConfigClusterResolver::TFConfigClusterResolver() : TFConfigClusterResolver(TFConfigClusterResolverOptions{}) {}

TFConfigClusterResolver::TFConfigClusterResolver(TFConfigClusterResolverOptions options) {
  const std::optional<std::string> text = options.tf_config ? options.tf_config : env("TF_CONFIG");
  if (text && !text->empty()) {
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::parse_error& e) {
      throw InvalidArgumentError(absl::StrCat(kTFConfig, "TF_CONFIG is no JSON (", e.what(), "): ", *text));
    }
    DISTRIBUTE_CHECK(config.is_object(), InvalidArgumentError, kTFConfig, "TF_CONFIG is ", config.dump(),
                     "; it is a JSON object with \"cluster\" and \"task\"");
    if (const auto cluster = config.find("cluster"); cluster != config.end()) {
      spec_ = parse_tf_config_cluster(*cluster);
    }
    if (const auto task = config.find("task"); task != config.end()) {
      DISTRIBUTE_CHECK(task->is_object(), InvalidArgumentError, kTFConfig, "TF_CONFIG's \"task\" is ", task->dump(),
                       "; it names this process's task, {\"type\": \"worker\", \"index\": 0}");
      task_type_ = string_member(*task, "type", "\"task\" ");
      if (const auto index = task->find("index"); index != task->end()) {
        // TF reads the index with int(), which takes a number's digits as a string too.
        std::optional<int> id;
        if (index->is_number_integer()) id = index->get<int>();
        if (index->is_string()) id = parse_int(index->get<std::string>());
        DISTRIBUTE_CHECK(id.has_value(), InvalidArgumentError, kTFConfig, "TF_CONFIG's task \"index\" is ",
                         index->dump(), "; it is the task's place in its job's list, an integer");
        task_id_ = *id;
      }
    }
    rpc_layer_ = string_member(config, "rpc_layer", "");
    environment_ = string_member(config, "environment", "");
  }
  if (options.task_type) task_type_ = *options.task_type;
  if (options.task_id) task_id_ = *options.task_id;
}

namespace detail {
namespace {

// A node number of a host list ("03"), checked.
int range_bound(const std::string& text, const std::string& list, const std::string& variable) {
  const std::optional<int> value = parse_int(text);
  DISTRIBUTE_CHECK(value.has_value() && *value >= 0, InvalidArgumentError, "SlurmClusterResolver: ", variable, "=",
                   list, " has \"", text, "\" where a node number belongs");
  return *value;
}

// The names one host list entry stands for: "n[1-2]-ib[01,3]" -> n1-ib01, n1-ib3, n2-ib01, n2-ib3.
std::vector<std::string> expand_host(const std::string& host, const std::string& list, const std::string& variable) {
  const std::size_t open = host.find('[');
  if (open == std::string::npos) {
    DISTRIBUTE_CHECK(host.find(']') == std::string::npos, InvalidArgumentError,
                     "SlurmClusterResolver: ", variable, "=", list, " is no host list");
    return {host};
  }
  const std::size_t close = host.find(']', open);
  DISTRIBUTE_CHECK(close != std::string::npos, InvalidArgumentError, "SlurmClusterResolver: ", variable, "=",
                   list, " opens a '[' it does not close");
  const std::string prefix = host.substr(0, open);
  const std::vector<std::string> rests = expand_host(host.substr(close + 1), list, variable);
  std::vector<std::string> out;
  for (const std::string& range : std::vector<std::string>(absl::StrSplit(host.substr(open + 1, close - open - 1), ','))) {
    const std::size_t dash = range.find('-');
    const std::string first = range.substr(0, dash);
    const int low = range_bound(first, list, variable);
    const int high = dash == std::string::npos ? low : range_bound(range.substr(dash + 1), list, variable);
    DISTRIBUTE_CHECK(low <= high, InvalidArgumentError, "SlurmClusterResolver: ", variable, "=", list,
                     " has the range ", range, ", which runs backwards");
    for (int n = low; n <= high; ++n) {
      std::string number = std::to_string(n);
      // "[01-10]": the numbers keep the first one's width.
      if (number.size() < first.size()) number.insert(0, first.size() - number.size(), '0');
      for (const std::string& rest : rests) out.push_back(absl::StrCat(prefix, number, rest));
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(std::string_view list_view, std::string_view variable_view) {
  const std::string list(list_view);
  const std::string variable(variable_view);
  // Split at the commas outside brackets.
  std::vector<std::string> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      const std::string host = list.substr(start, i - start);
      DISTRIBUTE_CHECK(!host.empty(), InvalidArgumentError, "SlurmClusterResolver: ", variable, "=", list,
                       " is no host list");
      const std::vector<std::string> names = expand_host(host, list, variable);
      out.insert(out.end(), names.begin(), names.end());
      start = i + 1;
    } else if (list[i] == '[') {
      ++depth;
    } else if (list[i] == ']') {
      --depth;
    }
  }
  return out;
}

std::vector<int> expand_slurm_tasks_per_node(std::string_view list_view, std::string_view variable_view) {
  const std::string list(list_view);
  const std::string variable(variable_view);
  std::vector<int> out;
  for (const std::string& entry : std::vector<std::string>(absl::StrSplit(list, ','))) {
    std::string count = entry;
    int repeat = 1;
    if (const std::size_t open = entry.find("(x"); open != std::string::npos) {
      DISTRIBUTE_CHECK(entry.back() == ')', InvalidArgumentError, "SlurmClusterResolver: ", variable, "=",
                       list, " has \"", entry, "\", which is no count or count(xN)");
      const std::optional<int> times = parse_int(entry.substr(open + 2, entry.size() - open - 3));
      DISTRIBUTE_CHECK(times.has_value() && *times > 0, InvalidArgumentError, "SlurmClusterResolver: ", variable,
                       "=", list, " has \"", entry, "\", which is no count or count(xN)");
      repeat = *times;
      count = entry.substr(0, open);
    }
    const std::optional<int> tasks = parse_int(count);
    DISTRIBUTE_CHECK(tasks.has_value() && *tasks >= 0, InvalidArgumentError, "SlurmClusterResolver: ", variable, "=",
                     list, " has \"", entry, "\", which is no count or count(xN)");
    out.insert(out.end(), static_cast<std::size_t>(repeat), *tasks);
  }
  return out;
}

}  // namespace detail

namespace {

constexpr const char* kSlurm = "SlurmClusterResolver: ";

// The first of `names` that is set, with its name.
std::pair<std::string, std::string> slurm_variable(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (std::optional<std::string> value = env(name)) return {name, *value};
  }
  throw FailedPreconditionError(absl::StrCat(kSlurm, absl::StrJoin(names, " and "), names.size() == 1 ? " is" : " are",
                                             " not set: this process runs outside a Slurm job step; launch it with "
                                             "srun"));
}

// A Slurm variable that is a count, checked.
int slurm_count(std::initializer_list<const char*> names) {
  const auto [name, value] = slurm_variable(names);
  const std::optional<int> count = parse_int(value);
  DISTRIBUTE_CHECK(count.has_value() && *count >= 0, InvalidArgumentError, kSlurm, name, "=", value,
                   " is no number");
  return *count;
}

}  // namespace

SlurmClusterResolver::SlurmClusterResolver() : SlurmClusterResolver(SlurmClusterResolverOptions{}) {}

SlurmClusterResolver::SlurmClusterResolver(SlurmClusterResolverOptions options) {
  const int rank = slurm_count({"SLURM_PROCID"});
  const int tasks = slurm_count({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  const auto [nodes_name, nodes_text] = slurm_variable({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
  const auto [per_node_name, per_node_text] = slurm_variable({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  const std::vector<std::string> nodes = detail::expand_slurm_hostlist(nodes_text, nodes_name);
  const std::vector<int> per_node = detail::expand_slurm_tasks_per_node(per_node_text, per_node_name);
  DISTRIBUTE_CHECK(nodes.size() == per_node.size(), InvalidArgumentError, kSlurm, nodes_name, "=", nodes_text,
                   " names ", nodes.size(), " nodes but ", per_node_name, "=", per_node_text, " gives tasks for ",
                   per_node.size());
  std::vector<std::string> addresses;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    for (int t = 0; t < per_node[n]; ++t) addresses.push_back(absl::StrCat(nodes[n], ":", options.port_base + t));
  }
  DISTRIBUTE_CHECK(static_cast<int>(addresses.size()) == tasks, InvalidArgumentError, kSlurm, per_node_name, "=",
                   per_node_text, " places ", addresses.size(), " tasks but the step has ", tasks);
  DISTRIBUTE_CHECK(rank >= 0 && rank < tasks, InvalidArgumentError, kSlurm, "SLURM_PROCID=", rank,
                   " is no task of the step's ", tasks);
  if (options.jobs.empty()) options.jobs = {{"worker", tasks}};
  const int listed = std::accumulate(options.jobs.begin(), options.jobs.end(), 0,
                                     [](int sum, const auto& job) { return sum + job.second; });
  std::vector<std::string> job_texts;
  for (const auto& [job, count] : options.jobs) job_texts.push_back(absl::StrCat(job, ": ", count));
  DISTRIBUTE_CHECK(listed == tasks, InvalidArgumentError, kSlurm, "options.jobs {", absl::StrJoin(job_texts, ", "),
                   "} has ", listed, " tasks but the Slurm step has ", tasks, "; give every task a job");
  std::map<std::string, std::vector<std::string>> jobs;
  std::size_t next = 0;
  for (const auto& [job, count] : options.jobs) {
    DISTRIBUTE_CHECK(count >= 0 && !jobs.contains(job), InvalidArgumentError, kSlurm, "options.jobs {",
                     absl::StrJoin(job_texts, ", "), "} lists job \"", job, "\" twice or with a negative count");
    std::vector<std::string>& job_addresses = jobs[job];
    for (int t = 0; t < count; ++t, ++next) {
      if (static_cast<int>(next) == rank) {
        task_type_ = job;
        task_id_ = t;
      }
      job_addresses.push_back(addresses[next]);
    }
  }
  spec_ = ClusterSpec(std::move(jobs));
}

}  // namespace distribute

namespace distribute {

namespace {

constexpr const char* kEnvironment = "EnvironmentClusterResolver: ";

// The launcher's variable `name`, a number; FailedPreconditionError where it is unset.
int launcher_count(const std::string& name, const char* what) {
  const std::optional<std::string> value = env(name.c_str());
  DISTRIBUTE_CHECK(value.has_value(), FailedPreconditionError, kEnvironment, name, " is not set: it is ", what,
                   ", which the launcher sets in each worker (torchrun does; for workers started by a shell loop, "
                   "set RANK and WORLD_SIZE yourself)");
  const std::optional<int> count = parse_int(*value);
  DISTRIBUTE_CHECK(count.has_value() && *count >= 0, InvalidArgumentError, kEnvironment, name, "=", *value,
                   " is no number; it is ", what);
  return *count;
}

}  // namespace

EnvironmentClusterResolver::EnvironmentClusterResolver()
    : EnvironmentClusterResolver(EnvironmentClusterResolverOptions{}) {}

EnvironmentClusterResolver::EnvironmentClusterResolver(EnvironmentClusterResolverOptions options) {
  const int workers = launcher_count(options.world_size_variable, "the number of workers");
  task_id_ = launcher_count(options.rank_variable, "this worker's rank");
  DISTRIBUTE_CHECK(workers >= 1, InvalidArgumentError, kEnvironment, options.world_size_variable, "=", workers,
                   "; a job has at least one worker");
  DISTRIBUTE_CHECK(task_id_ < workers, InvalidArgumentError, kEnvironment, options.rank_variable, "=", task_id_,
                   " is no worker of ", options.world_size_variable, "=", workers, " (ranks 0 to ", workers - 1, ")");
  spec_ = ClusterSpec({{"worker", std::vector<std::string>(static_cast<std::size_t>(workers))}});
  rendezvous_ = env(options.rendezvous_variable.c_str()).value_or("");
}

}  // namespace distribute
