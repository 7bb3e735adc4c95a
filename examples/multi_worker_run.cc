// multi_worker_run: the three examples of tf.distribute's MultiWorkerMirroredStrategy.run page,
// run by two processes (workers) of one replica each, the replicas of TF's two-device examples:
//   mpirun -np 2 ./build/default/examples/multi_worker_run
// (as root add --allow-run-as-root; on a machine with fewer cores than processes, --oversubscribe).
// Each worker prints its local results (PerReplica is local: worker w holds replica w's value),
// worker 0 first, and exits with status 1 if a value differs from the documented one.
//
// Expected output:
//   strategy: MultiWorkerMirroredStrategy(worker 0 of 2 over MPI: CPU:0)
//
//   # run 1: a constant input, doubled
//   worker 0: [<Tensor: shape=(), dtype=float32, numpy=6.0>]
//   worker 1: [<Tensor: shape=(), dtype=float32, numpy=6.0>]
//
//   # run 2: distributed values input (num_replicas_in_sync), doubled
//   worker 0: [4]
//   worker 1: [4]
//
//   # run 3: all_reduce("sum") of the replica ids
//   worker 0: [<Tensor: shape=(), dtype=int32, numpy=1>]
//   worker 1: [<Tensor: shape=(), dtype=int32, numpy=1>]
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>

#include "distribute/distribute.h"
#include "expect.h"

namespace {

using namespace distribute;

using examples::expect;
using examples::failures;

// Prints `line` on every worker in worker order: each waits for the ones before it through an
// all_reduce, which every worker calls as often.
void print_in_order(Strategy& strategy, const std::string& line) {
  const int workers = strategy.extended().num_workers();
  for (int w = 0; w < workers; ++w) {
    if (w == strategy.extended().worker_id()) std::cout << line << std::flush;
    strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 0); });
  }
}

template <class T>
void print_local_results(Strategy& strategy, const char* title, const PerReplica<T>& value) {
  std::ostringstream out;
  if (strategy.extended().worker_id() == 0) out << "\n# " << title << '\n';
  out << "worker " << strategy.extended().worker_id() << ": ";
  print_value(out, strategy.experimental_local_results(value));
  out << '\n';
  print_in_order(strategy, out.str());
}

}  // namespace

int main() {
  MultiWorkerMirroredStrategy strategy;
  if (strategy.extended().worker_id() == 0) std::cout << "strategy: " << strategy.name() << '\n';

  // 1. A constant tensor input.
  auto doubled = strategy.run([](const Tensor& input) { return Tensor::scalar(input.item<float>() * 2.0f); },
                              Tensor::scalar(3.0f));
  print_local_results(strategy, "run 1: a constant input, doubled", doubled);
  for (const Tensor& t : doubled.values()) expect(t.item<float>() == 6.0f, "run with a constant input");

  // 2. A distributed values input.
  auto counts = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return ctx.num_replicas_in_sync(); });
  auto twice = strategy.run([](int input) { return input * 2; }, counts);
  print_local_results(strategy, "run 2: distributed values input (num_replicas_in_sync), doubled", twice);
  for (int v : twice.values()) expect(v == 2 * strategy.num_replicas_in_sync(), "run with distributed values");

  // 3. ReplicaContext.all_reduce of every worker's replica ids.
  auto ids = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return Tensor::scalar<std::int32_t>(ctx.replica_id_in_sync_group()); });
  auto summed = strategy.run([](const Tensor& input) { return get_replica_context()->all_reduce("sum", input); }, ids);
  print_local_results(strategy, "run 3: all_reduce(\"sum\") of the replica ids", summed);
  const int n = strategy.num_replicas_in_sync();
  for (const Tensor& t : summed.values()) expect(t.item<std::int32_t>() == n * (n - 1) / 2, "run with all_reduce");
  return failures == 0 ? 0 : 1;
}
