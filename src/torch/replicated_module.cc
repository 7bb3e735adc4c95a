// ReplicatedModule: the clones, their variables, the autograd hooks that feed the gradient buckets,
// and the checks that turn misuse into errors.
#include "distribute/torch/replicated_module.h"

#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/require_cross_replica.h"
#include "distribute/check.h"
#include "distribute/checkpoint/checkpoint.h"
#include "distribute/replica/replica_context.h"
#include "distribute/strategy/context.h"
#include "distribute/torch/tensor_interop.h"
#include "strategy/cross_worker.h"

namespace distribute::detail {
namespace {

// One parameter or buffer, as the module's state_dict names it.
struct Entry {
  std::string name;
  bool buffer = false;
  Variable variable;
};

// A module's parameters, then its buffers, in state_dict order.
std::vector<std::pair<std::string, at::Tensor>> state_dict_of(const ::torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : module.named_parameters(true)) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers(true)) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

// ReplicatedModuleOptions::keep_freed_memory, once per process.
void keep_freed_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  });
}

// How many processes of this job run on this machine, as the launcher tells each of them
// (Open MPI's mpirun, MPICH's Hydra); 1 without one.
int processes_on_this_host() {
  for (const char* variable : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* value = std::getenv(variable); value != nullptr && std::atoi(value) > 0) return std::atoi(value);
  }
  return 1;
}

std::string sizes_of(const at::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]");
}

}  // namespace

struct ReplicatedModuleBase::State {
  // What one replica's backward pass keeps; touched by that replica's thread only.
  struct Clone {
    std::shared_ptr<::torch::nn::Module> module;
    // The step in progress: backward() sets `active`, the hooks fill `arrived` and, with buckets,
    // hand the gradients on in order from `cursor`.
    bool active = false;
    optimizers::GradientBuckets* buckets = nullptr;
    std::vector<at::Tensor> pending;  // by position in `order`
    std::vector<bool> arrived;
    std::size_t cursor = 0;
  };

  std::shared_ptr<StrategyIdentity> strategy;
  std::vector<Entry> entries;
  std::vector<Variable> variables;
  // The trainable parameters' entries, in the order their gradients go to the buckets: the
  // reverse of the module's, as backward passes tend to make them.
  std::vector<std::size_t> order;
  std::vector<std::size_t> float_buffers;  // averaged across replicas in every backward()
  std::vector<Clone> clones;
  int intra_op_threads = -1;

  // The calling replica's local index, or -1 outside a replica's fn of this module's strategy
  // (FailedPreconditionError in a replica of another strategy).
  int calling_replica(const char* method) const {
    ReplicaContext* ctx = get_replica_context();
    if (ctx == nullptr || !has_strategy()) return -1;
    DISTRIBUTE_CHECK(ctx->strategy().identity() == strategy, FailedPreconditionError, "ReplicatedModule.", method,
                     ": called in a replica of ", ctx->strategy().name(),
                     ", not of the strategy the module was replicated for");
    return ctx->local_replica_id();
  }

  void set_intra_op_threads() const {
    if (intra_op_threads > 0 && at::get_num_threads() != intra_op_threads) at::set_num_threads(intra_op_threads);
  }

  // Clone `c`'s parameters and buffers in state_dict order, read once per step (walking a module's
  // tree builds its names): FailedPreconditionError unless they are still those it was replicated
  // with, each viewing its variable's component.
  std::vector<std::pair<std::string, at::Tensor>> unchanged_tensors(int c, int replica) const {
    std::vector<std::pair<std::string, at::Tensor>> now = state_dict_of(*clones[static_cast<std::size_t>(c)].module);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : now) names.push_back(name);
    std::vector<std::string> expected;
    for (const Entry& entry : entries) expected.push_back(entry.name);
    DISTRIBUTE_CHECK(names == expected, FailedPreconditionError, "ReplicatedModule.backward: replica ", replica,
                     "'s clone changed after replication: its parameters and buffers are now [",
                     absl::StrJoin(names, ", "), "], replicated as [", absl::StrJoin(expected, ", "),
                     "]; build the whole module in the factory and leave its structure alone afterwards");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const at::Tensor& tensor = now[i].second;
      const Tensor& component = entries[i].variable.component(c);
      DISTRIBUTE_CHECK(tensor.defined() && tensor.data_ptr() == component.raw_data() &&
                           tensor.numel() == component.num_elements(),
                       FailedPreconditionError, "ReplicatedModule.backward: replica ", replica, "'s ",
                       entries[i].buffer ? "buffer '" : "parameter '", entries[i].name,
                       "' was replaced after replication and no longer shares its mirrored variable's memory; "
                       "change the values through the optimizer or the variable (variable(\"",
                       entries[i].name, "\").assign(...)), not by assigning a new tensor");
    }
    return now;
  }

  // Hands clone `c`'s gradients that arrived, in order, to its buckets.
  void hand_on(Clone& clone) const {
    while (clone.cursor < order.size() && clone.arrived[clone.cursor]) {
      at::Tensor gradient = std::move(clone.pending[clone.cursor]);
      if (!gradient.is_contiguous()) gradient = gradient.contiguous();
      clone.buckets->add(entries[order[clone.cursor]].variable, from_torch(gradient));
      ++clone.cursor;
    }
  }

  // The autograd hook of clone `c`'s parameter at `position` in `order`.
  void on_gradient(int c, std::size_t position, const at::Tensor& gradient) {
    const int caller = calling_replica("backward");
    if (caller >= 0 && caller != c) {
      ReplicaContext* ctx = get_replica_context();
      throw FailedPreconditionError(absl::StrCat(
          "ReplicatedModule: the backward pass of replica ", ctx->replica_id_in_sync_group(), " reached parameter '",
          entries[order[position]].name, "' of local replica ", c, "'s clone; each replica computes with its own "
          "clone, model.local() (or clone(", caller, "))"));
    }
    Clone& clone = clones[static_cast<std::size_t>(c)];
    if (!clone.active) return;  // a backward pass of the user's own: .grad() as LibTorch fills it
    clone.arrived[position] = true;
    if (clone.buckets == nullptr) return;
    clone.pending[position] = gradient;
    hand_on(clone);
  }

  // backward's pass on the calling replica's clone: resets .grad(), runs LibTorch's backward with
  // the hooks on, and checks that every trainable parameter got a gradient. Returns the clone's
  // tensors (unchanged_tensors).
  std::vector<std::pair<std::string, at::Tensor>> run_backward(const at::Tensor& loss,
                                                               optimizers::GradientBuckets* buckets,
                                                               ReplicaContext& ctx, int c) {
    std::vector<std::pair<std::string, at::Tensor>> tensors = unchanged_tensors(c, ctx.replica_id_in_sync_group());
    Clone& clone = clones[static_cast<std::size_t>(c)];
    for (std::size_t e : order) tensors[e].second.mutable_grad().reset();
    clone.active = true;
    clone.buckets = buckets;
    clone.pending.assign(order.size(), at::Tensor());
    clone.arrived.assign(order.size(), false);
    clone.cursor = 0;
    struct Deactivate {
      Clone& clone;
      ~Deactivate() {
        clone.active = false;
        clone.buckets = nullptr;
        clone.pending.clear();
      }
    } deactivate{clone};
    DISTRIBUTE_CHECK(loss.defined(), InvalidArgumentError, "ReplicatedModule.backward: replica ",
                     ctx.replica_id_in_sync_group(), "'s loss is an undefined tensor");
    loss.backward();
    std::vector<std::string> missing;
    for (std::size_t k = 0; k < order.size(); ++k) {
      if (!clone.arrived[k]) missing.push_back(absl::StrCat("'", entries[order[k]].name, "'"));
    }
    DISTRIBUTE_CHECK(missing.empty(), InvalidArgumentError, "ReplicatedModule.backward: on replica ",
                     ctx.replica_id_in_sync_group(), ", parameter ", absl::StrJoin(missing, ", "),
                     " got no gradient (the loss does not depend on it); every replica's loss must reach every "
                     "trainable parameter, or set requires_grad(false) on it in the factory");
    return tensors;
  }

  // Averages the floating-point buffers across replicas, in place (one all_reduce).
  void average_buffers(ReplicaContext& ctx, int c) const {
    if (float_buffers.empty()) return;
    std::vector<Tensor> buffers;
    for (std::size_t e : float_buffers) buffers.push_back(entries[e].variable.component(c));
    ctx.all_reduce_in_place(ReduceOp::kMean, buffers);
  }
};

ReplicatedModuleBase::ReplicatedModuleBase(const std::function<std::shared_ptr<::torch::nn::Module>()>& factory,
                                           const ReplicatedModuleOptions& options)
    : state_(std::make_shared<State>()) {
  require_cross_replica("ReplicatedModule", "replicate a module in cross-replica context (under strategy.scope())");
  Strategy& strategy = get_strategy();
  State& s = *state_;
  s.strategy = strategy.identity();
  const int replicas = strategy.extended().num_local_replicas();
  DISTRIBUTE_CHECK(options.intra_op_threads >= -1, InvalidArgumentError,
                   "ReplicatedModule: intra_op_threads is ", options.intra_op_threads,
                   "; use a number of threads >= 1, 0 for cores / local replicas, or -1 to leave LibTorch's");
  if (options.intra_op_threads == 0) {
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    s.intra_op_threads = std::max(1, cores / (replicas * processes_on_this_host()));
  } else {
    s.intra_op_threads = options.intra_op_threads;
  }
  s.set_intra_op_threads();
  if (options.keep_freed_memory) keep_freed_memory();

  std::vector<std::vector<std::pair<std::string, at::Tensor>>> clone_tensors;
  for (int c = 0; c < replicas; ++c) {
    std::shared_ptr<::torch::nn::Module> module = factory();
    DISTRIBUTE_CHECK(module != nullptr, InvalidArgumentError, "ReplicatedModule: the factory returned a null module "
                     "for local replica ", c, "; return a new module on every call");
    for (const State::Clone& other : s.clones) {
      DISTRIBUTE_CHECK(other.module != module, InvalidArgumentError, "ReplicatedModule: the factory returned the "
                       "same module twice (for local replica ", c, "); return a new module on every call, so that "
                       "each replica has its own clone");
    }
    clone_tensors.push_back(state_dict_of(*module));
    s.clones.push_back(State::Clone{std::move(module)});
  }
  const std::vector<std::pair<std::string, at::Tensor>>& first = clone_tensors[0];
  const std::size_t parameters = s.clones[0].module->named_parameters(true).size();
  for (int c = 1; c < replicas; ++c) {
    const std::vector<std::pair<std::string, at::Tensor>>& other = clone_tensors[static_cast<std::size_t>(c)];
    bool same = other.size() == first.size();
    for (std::size_t i = 0; same && i < first.size(); ++i) {
      same = other[i].first == first[i].first && other[i].second.sizes() == first[i].second.sizes() &&
             other[i].second.scalar_type() == first[i].second.scalar_type();
    }
    DISTRIBUTE_CHECK(same, InvalidArgumentError, "ReplicatedModule: the factory's module for local replica ", c,
                     " differs from local replica 0's in its parameters and buffers (names, shapes or dtypes); "
                     "the factory must build the same module every time");
  }

  for (std::size_t i = 0; i < first.size(); ++i) {
    const auto& [name, tensor] = first[i];
    const bool buffer = i >= parameters;
    // The chief's values everywhere: from_torch views clone 0's tensor; the variable copies it.
    Tensor initial = from_torch(tensor.is_contiguous() ? tensor : tensor.contiguous());
    initial = broadcast_from_chief(strategy.extended(), initial);
    VariableOptions variable_options{.name = name};
    if (!buffer) {
      variable_options.trainable = tensor.requires_grad();
    } else {
      variable_options.trainable = false;
      variable_options.aggregation =
          is_floating(initial.dtype()) ? VariableAggregation::kMean : VariableAggregation::kOnlyFirstReplica;
    }
    Variable variable(initial, variable_options);
    for (int c = 0; c < replicas; ++c) {
      clone_tensors[static_cast<std::size_t>(c)][i].second.set_data(to_torch(variable.component(c)));
    }
    if (!buffer && tensor.requires_grad()) s.order.push_back(i);
    if (buffer && is_floating(variable.dtype())) s.float_buffers.push_back(i);
    s.variables.push_back(variable);
    s.entries.push_back(Entry{name, buffer, std::move(variable)});
  }
  std::reverse(s.order.begin(), s.order.end());

  const std::weak_ptr<State> weak = state_;
  for (int c = 0; c < replicas; ++c) {
    for (std::size_t k = 0; k < s.order.size(); ++k) {
      at::Tensor parameter = clone_tensors[static_cast<std::size_t>(c)][s.order[k]].second;
      parameter.register_hook([weak, c, k](const at::Tensor& gradient) {
        if (const std::shared_ptr<State> state = weak.lock()) state->on_gradient(c, k, gradient);
      });
    }
  }
}

int ReplicatedModuleBase::num_clones() const { return static_cast<int>(state_->clones.size()); }

const std::vector<Variable>& ReplicatedModuleBase::variables() const { return state_->variables; }

std::vector<Variable> ReplicatedModuleBase::trainable_variables() const {
  std::vector<Variable> trainable;
  for (const Variable& variable : state_->variables) {
    if (variable.trainable()) trainable.push_back(variable);
  }
  return trainable;
}

std::vector<std::pair<std::string, Variable>> ReplicatedModuleBase::named_variables() const {
  std::vector<std::pair<std::string, Variable>> named;
  for (const Entry& entry : state_->entries) named.emplace_back(entry.name, entry.variable);
  return named;
}

Variable ReplicatedModuleBase::variable(std::string_view state_dict_name) const {
  std::vector<std::string> names;
  for (const Entry& entry : state_->entries) {
    if (entry.name == state_dict_name) return entry.variable;
    names.push_back(entry.name);
  }
  throw InvalidArgumentError(absl::StrCat("ReplicatedModule.variable: the module has no parameter or buffer '",
                                          std::string(state_dict_name), "'; its state_dict names are [",
                                          absl::StrJoin(names, ", "), "]"));
}

int ReplicatedModuleBase::local_index() const {
  const int c = state_->calling_replica("local");
  if (c < 0) return 0;
  state_->set_intra_op_threads();
  return c;
}

void ReplicatedModuleBase::check_index(int local_replica) const {
  DISTRIBUTE_CHECK(local_replica >= 0 && local_replica < num_clones(), OutOfRangeError,
                   "ReplicatedModule.clone: local replica ", local_replica, " is not in [0, ", num_clones(), ")");
}

void ReplicatedModuleBase::backward(const at::Tensor& loss, optimizers::GradientBuckets& buckets) {
  State& s = *state_;
  const int c = s.calling_replica("backward");
  DISTRIBUTE_CHECK(c >= 0, FailedPreconditionError,
                   "ReplicatedModule.backward: called outside a replica's fn; call it inside strategy.run");
  ReplicaContext& ctx = *get_replica_context();
  s.run_backward(loss, &buckets, ctx, c);
  s.average_buffers(ctx, c);
}

void ReplicatedModuleBase::backward(const at::Tensor& loss) {
  State& s = *state_;
  const int c = s.calling_replica("backward");
  DISTRIBUTE_CHECK(c >= 0, FailedPreconditionError,
                   "ReplicatedModule.backward: called outside a replica's fn; call it inside strategy.run");
  ReplicaContext& ctx = *get_replica_context();
  const std::vector<std::pair<std::string, at::Tensor>> tensors = s.run_backward(loss, nullptr, ctx, c);
  std::vector<Tensor> gradients;
  for (std::size_t e : s.order) {
    at::Tensor& grad = tensors[e].second.mutable_grad();
    if (!grad.is_contiguous()) grad = grad.contiguous();
    gradients.push_back(from_torch(grad));
  }
  if (!gradients.empty()) ctx.all_reduce_in_place(ReduceOp::kSum, gradients);
  s.average_buffers(ctx, c);
}

}  // namespace distribute::detail

namespace distribute {
namespace {

// The module's state_dict as checkpoint state: each entry reads the tensor where it lies and
// writes into it.
std::vector<std::pair<std::string, Saveable>> saveables_of(const ::torch::nn::Module& module) {
  std::vector<std::pair<std::string, Saveable>> state;
  for (const auto& [name, tensor] : detail::state_dict_of(module)) {
    DISTRIBUTE_CHECK(tensor.is_contiguous(), InvalidArgumentError, "the module's tensor '", name,
                     "' is not contiguous (sizes ", detail::sizes_of(tensor), "); make it contiguous first");
    const Tensor view = from_torch(tensor);
    state.emplace_back(name, Saveable(
                                 view.dtype(), view.shape(), [view] { return view; },
                                 [view](const Tensor& value) {
                                   std::memcpy(const_cast<void*>(view.raw_data()), value.raw_data(), value.nbytes());
                                 }));
  }
  return state;
}

}  // namespace

void save_state_dict(const ::torch::nn::Module& module, const std::filesystem::path& path) {
  Checkpoint({}, saveables_of(module)).save(path);
}

void load_state_dict(::torch::nn::Module& module, const std::filesystem::path& path) {
  Checkpoint({}, saveables_of(module)).restore(path);
}

}  // namespace distribute
