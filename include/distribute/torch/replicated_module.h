// ReplicatedModule: a LibTorch torch::nn::Module under a strategy, one clone per replica (what
// tf.distribute does to a Keras model built in strategy.scope(), and PyTorch's
// DistributedDataParallel does to a module, without its process per replica). The clones'
// parameters and buffers are the components of mirrored variables named by the module's own
// state_dict names ("conv1.weight"), so the library's optimizers update them in place, a
// Checkpoint saves them under those names, and every clone computes with the same values.
//
//   MirroredStrategy strategy;                   // a replica per core
//   StrategyScope scope = strategy.scope();
//   ReplicatedModule<Net> model([] { return std::make_shared<Net>(); });
//   optimizers::SGD optimizer(0.05);
//   strategy.run([&](const Tensor& batch) {
//     at::Tensor loss = loss_of(model.local(), batch) / global_batch_size;
//     auto buckets = optimizer.gradient_buckets();
//     model.backward(loss, buckets);             // each gradient is summed while backward goes on
//     optimizer.apply_gradients(buckets);        // every clone takes the same step
//   }, batches);
//
// Construction (cross-replica context, under the strategy's scope): the factory is called once per
// replica device of this worker; the values of global replica 0's clone (the chief's, across
// workers) become every clone's, and each clone's tensors are then views of its variables'
// components. Trainable parameters become trainable ON_WRITE variables; parameters with
// requires_grad false, non-trainable ones; floating-point buffers (BatchNorm's running statistics)
// ON_WRITE variables with aggregation MEAN, averaged across the replicas in every backward();
// integer buffers (num_batches_tracked), ONLY_FIRST_REPLICA variables each replica advances alike.
//
// Backward. backward(loss, buckets) runs LibTorch's backward pass on the calling replica's clone;
// autograd hooks hand each parameter's gradient, as it is made, to the optimizer's GradientBuckets,
// in the reverse of the module's parameter order (a gradient made early waits for those before
// it), so every replica adds the same variables in the same order and the buckets' all_reduces
// overlap the rest of the backward pass. backward(loss) instead sums the gradients across replicas
// into each parameter's .grad() after the pass (one all_reduce), for a torch::optim optimizer of
// the replica's own clone: the same step on the same sums keeps the clones equal. Both replace
// .grad() rather than add to it, and divide nothing: the loss is the replica's share of the global
// batch's (sum over its examples / global batch size), as nn::compute_average_loss makes it.
//
// Threads. Each replica thread runs LibTorch's intra-op work for its own clone; so that the
// replicas (and the other workers mpirun started on this machine) do not oversubscribe the cores,
// LibTorch's intra-op threads are set to max(1, hardware threads / (local replicas x workers on
// this machine)) at construction and on each replica's thread when it first calls local()
// (ReplicatedModuleOptions::intra_op_threads chooses another number, or -1 to leave LibTorch's
// setting alone).
//
// Misuse ends in a typed error naming the replica and the parameter, never a hang: a replica whose
// backward pass reaches another replica's clone (FailedPreconditionError); a clone whose
// parameters or buffers were replaced, added or removed after replication
// (FailedPreconditionError); a trainable parameter that got no gradient on a replica
// (InvalidArgumentError, on that replica; the others then fail in their collectives, and run
// rethrows the first error).
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distribute/optimizers/optimizer.h"
#include "distribute/variables/variable.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace distribute {

struct ReplicatedModuleOptions {
  // LibTorch's intra-op threads on each replica thread: 0 for max(1, hardware threads / (local
  // replicas x this job's processes on this machine, as mpirun tells each in
  // OMPI_COMM_WORLD_LOCAL_SIZE, or MPICH in MPI_LOCALNRANKS)), -1 to leave LibTorch's setting as
  // it is, or a number >= 1.
  int intra_op_threads = 0;
  // LibTorch allocates each step's activations with malloc; glibc hands blocks over its mmap
  // threshold back to the system when they are freed (and trims the heap's top), so every step
  // faults them in again, page by page: 3 to 4 times the step time of a small CNN. When true
  // (and neither MALLOC_MMAP_THRESHOLD_ nor MALLOC_TRIM_THRESHOLD_ is set in the environment) the
  // first ReplicatedModule sets glibc's mmap threshold to 32 MiB and its trim threshold to 1 GiB
  // (mallopt, process-wide): freed memory up to that stays in the process for the next step.
  bool keep_freed_memory = true;
};

namespace detail {

// What ReplicatedModule<M> does, for any module type (replicated_module.cc).
class ReplicatedModuleBase {
 public:
  ReplicatedModuleBase(const std::function<std::shared_ptr<::torch::nn::Module>()>& factory,
                       const ReplicatedModuleOptions& options);

  int num_clones() const;
  // The variables, in state_dict order: parameters, then buffers.
  const std::vector<Variable>& variables() const;
  std::vector<Variable> trainable_variables() const;
  // (state_dict name, variable) pairs, for a Checkpoint.
  std::vector<std::pair<std::string, Variable>> named_variables() const;
  // InvalidArgumentError naming the known names when there is no such name.
  Variable variable(std::string_view state_dict_name) const;

  void backward(const at::Tensor& loss, optimizers::GradientBuckets& buckets);
  void backward(const at::Tensor& loss);

 protected:
  // The local replica index of the calling replica (0 outside a replica's fn); sets the replica
  // thread's intra-op threads.
  int local_index() const;
  // OutOfRangeError unless 0 <= local_replica < num_clones().
  void check_index(int local_replica) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The clones as their own type: a module deriving from torch::nn::Cloneable has Module as a
// virtual base, from which no static cast leads back.
template <class M>
struct TypedClones {
  std::vector<std::shared_ptr<M>> typed_clones;
};

}  // namespace detail

// M: a torch::nn::Module subclass (for TORCH_MODULE(Net), NetImpl).
template <class M>
class ReplicatedModule : private detail::TypedClones<M>, public detail::ReplicatedModuleBase {
 public:
  // Calls `factory` once per local replica; see above. FailedPreconditionError inside a replica's
  // fn; InvalidArgumentError for a factory that returns null, clones whose state_dict names,
  // dtypes or shapes differ, or a tensor from_torch refuses (a dtype, a layout).
  explicit ReplicatedModule(const std::function<std::shared_ptr<M>()>& factory,
                            const ReplicatedModuleOptions& options = {})
      : ReplicatedModuleBase(
            [this, &factory]() -> std::shared_ptr<::torch::nn::Module> {
              std::shared_ptr<M> clone = factory();
              this->typed_clones.push_back(clone);
              return clone;
            },
            options) {}

  // In a replica's fn, that replica's clone; outside, clone 0 (to evaluate or export: the clones
  // are equal between steps).
  const std::shared_ptr<M>& local() const { return this->typed_clones[static_cast<std::size_t>(local_index())]; }
  M* operator->() const { return local().get(); }
  // Local replica `local_replica`'s clone.
  const std::shared_ptr<M>& clone(int local_replica) const {
    check_index(local_replica);
    return this->typed_clones[static_cast<std::size_t>(local_replica)];
  }
};

// A plain LibTorch module's state_dict to and from a checkpoint file (safetensors, as Checkpoint
// writes), by state_dict name: what a ReplicatedModule saved loads into the same module outside
// any strategy, and the other way round. Cross-replica context; the errors are Checkpoint's
// (a name missing from the file or unknown to the module, a dtype or shape that differs).
void save_state_dict(const ::torch::nn::Module& module, const std::filesystem::path& path);
void load_state_dict(::torch::nn::Module& module, const std::filesystem::path& path);

}  // namespace distribute
