// quickstart: the examples of TensorFlow's tf.distribute documentation (ReplicaContext,
// Strategy.run / reduce / gather / experimental_distribute_values_from_function, DistributedValues
// read from a data::Dataset through experimental_distribute_dataset) written with distribute, on
// two logical CPU replicas (four for the gather example that asks for four). Prints the results
// the way TF prints them and exits with status 1 if a value differs from the documented one.
//
// Expected output:
//   strategy: MirroredStrategy(CPU:0, CPU:1)
//
//   # ReplicaContext.replica_id_in_sync_group
//   PerReplica:{
//     0: <Tensor: shape=(), dtype=int32, numpy=0>,
//     1: <Tensor: shape=(), dtype=int32, numpy=1>
//   }
//
//   # ReplicaContext.all_gather of [1, 2, 3], axis 0
//   PerReplica:{
//     0: <Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>,
//     1: <Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>
//   }
//   [<Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>, <Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>]
//
//   # ReplicaContext.all_gather of the nest [[1, 2, 3], [[1, 2], [3, 4]]], axis 0
//   PerReplica:{
//     0: [<Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>, <Tensor: shape=(4, 2), dtype=int32, numpy=
//   [[1, 2],
//    [3, 4],
//    [1, 2],
//    [3, 4]]>],
//     1: [<Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>, <Tensor: shape=(4, 2), dtype=int32, numpy=
//   [[1, 2],
//    [3, 4],
//    [1, 2],
//    [3, 4]]>]
//   }
//
//   # ReplicaContext.all_gather of {'a': ..., 'b': ...} with uneven sizes along axis 0
//   PerReplica:{
//     0: {'a': <Tensor: shape=(2,), dtype=int32, numpy=[0, 1]>, 'b': <Tensor: shape=(3, 2), dtype=int32, numpy=
//   [[0, 1],
//    [2, 3],
//    [4, 5]]>},
//     1: {'a': <Tensor: shape=(2,), dtype=int32, numpy=[0, 1]>, 'b': <Tensor: shape=(3, 2), dtype=int32, numpy=
//   [[0, 1],
//    [2, 3],
//    [4, 5]]>}
//   }
//
//   # ReplicaContext.all_reduce SUM of 1.0
//   [<Tensor: shape=(), dtype=float32, numpy=2.0>, <Tensor: shape=(), dtype=float32, numpy=2.0>]
//
//   # ReplicaContext.all_reduce SUM of [1.0, 2.0] (one batched collective)
//   [[<Tensor: shape=(), dtype=float32, numpy=2.0>, <Tensor: shape=(), dtype=float32, numpy=4.0>], [<Tensor: shape=(), dtype=float32, numpy=2.0>, <Tensor: shape=(), dtype=float32, numpy=4.0>]]
//
//   # Strategy.run 1: a constant input, doubled
//   PerReplica:{
//     0: <Tensor: shape=(), dtype=float32, numpy=6.0>,
//     1: <Tensor: shape=(), dtype=float32, numpy=6.0>
//   }
//
//   # Strategy.run 2: distributed values input, doubled
//   PerReplica:{
//     0: 4,
//     1: 4
//   }
//
//   # Strategy.run 3: all_reduce("sum") of the replica ids
//   PerReplica:{
//     0: <Tensor: shape=(), dtype=int32, numpy=1>,
//     1: <Tensor: shape=(), dtype=int32, numpy=1>
//   }
//
//   # Strategy.experimental_distribute_values_from_function: 1.0, array[replica id], num_replicas_in_sync
//   [<Tensor: shape=(), dtype=float32, numpy=1.0>, <Tensor: shape=(), dtype=float32, numpy=1.0>]
//   [3, 2]
//   [2, 2]
//
//   # Strategy.reduce SUM of the replica ids, axis None
//   <Tensor: shape=(), dtype=int32, numpy=1>
//   replica values on /job:localhost/replica:0/task:0/device:CPU:0 and /job:localhost/replica:0/task:0/device:CPU:1; total on /job:localhost/replica:0/task:0/device:CPU:0
//
//   # Strategy.reduce of a global batch [0..7] split [0, 1, 2, 3] / [4, 5, 6, 7]
//   axis None: <Tensor: shape=(4,), dtype=float32, numpy=[4.0, 6.0, 8.0, 10.0]>
//   axis 0: <Tensor: shape=(), dtype=float32, numpy=28.0>
//
//   # Strategy.reduce MEAN, axis 0, of a last partial batch [0, 1, 2, 3] / [4, 5]
//   <Tensor: shape=(), dtype=float32, numpy=2.5>
//
//   # Strategy.gather of [[1], [2]] on each replica, axis 0
//   <Tensor: shape=(4, 1), dtype=int32, numpy=
//   [[1],
//    [2],
//    [1],
//    [2]]>
//
//   # MirroredStrategy(CPU:0, CPU:1, CPU:2, CPU:3).gather of range(6) shaped (1, 2, 3), axis 0
//   <Tensor: shape=(4, 2, 3), dtype=int32, numpy=
//   [[[0, 1, 2],
//     [3, 4, 5]],
//    [[0, 1, 2],
//     [3, 4, 5]],
//    [[0, 1, 2],
//     [3, 4, 5]],
//    [[0, 1, 2],
//     [3, 4, 5]]]>
//
//   # MirroredStrategy(CPU:0, CPU:1, CPU:2, CPU:3).gather of range(6) shaped (1, 2, 3), axis 1
//   <Tensor: shape=(1, 8, 3), dtype=int32, numpy=
//   [[[0, 1, 2],
//     [3, 4, 5],
//     [0, 1, 2],
//     [3, 4, 5],
//     [0, 1, 2],
//     [3, 4, 5],
//     [0, 1, 2],
//     [3, 4, 5]]]>
//
//   # MirroredStrategy(CPU:0, CPU:1, CPU:2, CPU:3).gather of range(6) shaped (1, 2, 3), axis 2
//   <Tensor: shape=(1, 2, 12), dtype=int32, numpy=
//   [[[0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2],
//     [3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4, 5]]]>
//
//   # DistributedValues: next(iter(experimental_distribute_dataset(from_tensor_slices([5, 6, 7, 8]).batch(2))))
//   PerReplica:{
//     0: <Tensor: shape=(1,), dtype=float32, numpy=[5.0]>,
//     1: <Tensor: shape=(1,), dtype=float32, numpy=[6.0]>
//   }
//
//   # DistributedValues as input into run: input + 1.0
//   PerReplica:{
//     0: <Tensor: shape=(1,), dtype=float32, numpy=[6.0]>,
//     1: <Tensor: shape=(1,), dtype=float32, numpy=[7.0]>
//   }
//
//   # DistributedValues as input into reduce: SUM, axis 0
//   <Tensor: shape=(), dtype=float32, numpy=11.0>
//
//   # DistributedValues inspected with experimental_local_results
//   [<Tensor: shape=(1,), dtype=float32, numpy=[5.0]>, <Tensor: shape=(1,), dtype=float32, numpy=[6.0]>]
//
//   # Every step of the distributed dataset: for (auto batch : dist_dataset) strategy.run(step, batch)
//   [<Tensor: shape=(), dtype=float32, numpy=5.0>, <Tensor: shape=(), dtype=float32, numpy=6.0>]
//   [<Tensor: shape=(), dtype=float32, numpy=7.0>, <Tensor: shape=(), dtype=float32, numpy=8.0>]
//
//   # MirroredStrategy() on every GPU: all_reduce MEAN of per-replica gradients
//   no GPU visible (<why>); skipped
// or, on a machine with one GPU:
//   strategy: MirroredStrategy(GPU:0) through NcclAllReduce
//   [<Tensor: shape=(3,), dtype=float32, numpy=[0.0, 1.0, 2.0]>]

#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "expect.h"

namespace {

using namespace distribute;

using examples::expect;
using examples::failures;

template <class T>
bool equals(const Tensor& t, const Shape& shape, const std::vector<T>& values) {
  return t.dtype() == dtype_v<T> && t.shape() == shape && t.to_vector<T>() == values;
}

void title(const char* text) { std::cout << "\n# " << text << '\n'; }

template <class T>
void print_line(const T& value) {
  print_value(std::cout, value);
  std::cout << '\n';
}

void replica_context_examples(Strategy& strategy) {
  title("ReplicaContext.replica_id_in_sync_group");
  auto ids = strategy.run([] { return Tensor::scalar<std::int32_t>(get_replica_context()->replica_id_in_sync_group()); });
  print_line(ids);
  expect(equals<std::int32_t>(ids[0], {}, {0}) && equals<std::int32_t>(ids[1], {}, {1}), "replica ids");

  title("ReplicaContext.all_gather of [1, 2, 3], axis 0");
  auto gathered = strategy.run([] { return get_replica_context()->all_gather(Tensor::from_vector<std::int32_t>({1, 2, 3}), 0); });
  print_line(gathered);
  print_line(strategy.experimental_local_results(gathered));
  for (const Tensor& t : gathered.values()) expect(equals<std::int32_t>(t, {6}, {1, 2, 3, 1, 2, 3}), "all_gather");

  title("ReplicaContext.all_gather of the nest [[1, 2, 3], [[1, 2], [3, 4]]], axis 0");
  auto nest = strategy.run([] {
    std::vector<Tensor> value{Tensor::from_vector<std::int32_t>({1, 2, 3}),
                              Tensor::from_vector<std::int32_t>({1, 2, 3, 4}, Shape{2, 2})};
    return get_replica_context()->all_gather(value, 0);
  });
  print_line(nest);
  for (const std::vector<Tensor>& local : nest.values()) {
    expect(equals<std::int32_t>(local[0], {6}, {1, 2, 3, 1, 2, 3}) &&
               equals<std::int32_t>(local[1], {4, 2}, {1, 2, 3, 4, 1, 2, 3, 4}),
           "all_gather of a nest");
  }

  title("ReplicaContext.all_gather of {'a': ..., 'b': ...} with uneven sizes along axis 0");
  auto uneven = strategy.run([] {
    std::map<std::string, Tensor> value;
    if (get_replica_context()->replica_id_in_sync_group() == 0) {
      value["a"] = Tensor::from_vector<std::int32_t>({0});
      value["b"] = Tensor::from_vector<std::int32_t>({0, 1}, Shape{1, 2});
    } else {
      value["a"] = Tensor::from_vector<std::int32_t>({1});
      value["b"] = Tensor::from_vector<std::int32_t>({2, 3, 4, 5}, Shape{2, 2});
    }
    return get_replica_context()->all_gather(value, 0);
  });
  print_line(uneven);
  // The page writes 'a': [1, 2]; the replicas hold [0] and [1], so TF itself returns [0, 1].
  for (const auto& local : uneven.values()) {
    expect(equals<std::int32_t>(local.at("a"), {2}, {0, 1}) &&
               equals<std::int32_t>(local.at("b"), {3, 2}, {0, 1, 2, 3, 4, 5}),
           "all_gather of uneven values");
  }

  title("ReplicaContext.all_reduce SUM of 1.0");
  auto one = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(1.0f)); });
  print_line(strategy.experimental_local_results(one));
  for (const Tensor& t : one.values()) expect(equals<float>(t, {}, {2.0f}), "all_reduce of 1.0");

  title("ReplicaContext.all_reduce SUM of [1.0, 2.0] (one batched collective)");
  auto list = strategy.run([] {
    return get_replica_context()->all_reduce(ReduceOp::kSum, std::vector<Tensor>{Tensor::scalar(1.0f), Tensor::scalar(2.0f)});
  });
  print_line(strategy.experimental_local_results(list));
  for (const std::vector<Tensor>& local : list.values()) {
    expect(equals<float>(local[0], {}, {2.0f}) && equals<float>(local[1], {}, {4.0f}), "all_reduce of a list");
  }
}

void run_examples(Strategy& strategy) {
  title("Strategy.run 1: a constant input, doubled");
  auto doubled = strategy.run([](const Tensor& input) { return Tensor::scalar(input.item<float>() * 2.0f); },
                              Tensor::scalar(3.0f));
  print_line(doubled);
  for (const Tensor& t : doubled.values()) expect(equals<float>(t, {}, {6.0f}), "run with a constant input");

  title("Strategy.run 2: distributed values input, doubled");
  auto counts = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return ctx.num_replicas_in_sync(); });
  auto twice = strategy.run([](int input) { return input * 2; }, counts);
  print_line(twice);
  for (int v : twice.values()) expect(v == 4, "run with distributed values");

  title("Strategy.run 3: all_reduce(\"sum\") of the replica ids");
  auto ids = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return Tensor::scalar<std::int32_t>(ctx.replica_id_in_sync_group()); });
  auto summed = strategy.run([](const Tensor& input) { return get_replica_context()->all_reduce("sum", input); }, ids);
  print_line(summed);
  for (const Tensor& t : summed.values()) expect(equals<std::int32_t>(t, {}, {1}), "run with all_reduce");
}

void values_from_function_examples(Strategy& strategy) {
  title("Strategy.experimental_distribute_values_from_function: 1.0, array[replica id], num_replicas_in_sync");
  auto constant = strategy.experimental_distribute_values_from_function([](const ValueContext&) { return Tensor::scalar(1.0f); });
  print_line(strategy.experimental_local_results(constant));
  for (const Tensor& t : constant.values()) expect(equals<float>(t, {}, {1.0f}), "constant values");

  const std::vector<double> array_value{3.0, 2.0, 1.0};
  auto picked = strategy.experimental_distribute_values_from_function(
      [&](const ValueContext& ctx) { return array_value[static_cast<std::size_t>(ctx.replica_id_in_sync_group())]; });
  print_line(strategy.experimental_local_results(picked));
  expect(picked.values() == std::vector<double>{3.0, 2.0}, "values picked by replica id");

  auto counts = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return ctx.num_replicas_in_sync(); });
  print_line(strategy.experimental_local_results(counts));
  expect(counts.values() == std::vector<int>{2, 2}, "num_replicas_in_sync values");
}

void reduce_examples(Strategy& strategy) {
  title("Strategy.reduce SUM of the replica ids, axis None");
  // Made on the replica's device, as TF places a replica's ops; the reduced result is on the host.
  auto ids = strategy.run([] {
    const ReplicaContext& ctx = *get_replica_context();
    return Tensor::scalar<std::int32_t>(ctx.replica_id_in_sync_group(), ctx.device());
  });
  Tensor total = strategy.reduce("SUM", ids, std::nullopt);
  print_line(total);
  std::cout << "replica values on " << ids[0].device() << " and " << ids[1].device() << "; total on "
            << total.device() << '\n';
  expect(equals<std::int32_t>(total, {}, {1}), "reduce of replica ids");
  expect(total.device() == Device::cpu(0) && ids[1].device() == Device::cpu(1), "result devices");

  title("Strategy.reduce of a global batch [0..7] split [0, 1, 2, 3] / [4, 5, 6, 7]");
  auto batch = strategy.experimental_distribute_values_from_function([](const ValueContext& ctx) {
    const float base = 4.0f * static_cast<float>(ctx.replica_id_in_sync_group());
    return Tensor::from_vector<float>({base, base + 1, base + 2, base + 3});
  });
  Tensor across_replicas = strategy.reduce("sum", batch, std::nullopt);
  Tensor everything = strategy.reduce("sum", batch, 0);
  std::cout << "axis None: " << across_replicas << '\n' << "axis 0: " << everything << '\n';
  expect(equals<float>(across_replicas, {4}, {4.0f, 6.0f, 8.0f, 10.0f}), "reduce with axis None");
  expect(equals<float>(everything, {}, {28.0f}), "reduce with axis 0");

  title("Strategy.reduce MEAN, axis 0, of a last partial batch [0, 1, 2, 3] / [4, 5]");
  PerReplica<Tensor> partial({Tensor::from_vector<float>({0, 1, 2, 3}), Tensor::from_vector<float>({4, 5})});
  Tensor mean = strategy.reduce(ReduceOp::kMean, partial, 0);
  print_line(mean);
  expect(equals<float>(mean, {}, {2.5f}), "MEAN over a partial batch");
}

void gather_examples(Strategy& strategy) {
  title("Strategy.gather of [[1], [2]] on each replica, axis 0");
  auto values = strategy.experimental_distribute_values_from_function(
      [](const ValueContext&) { return Tensor::from_vector<std::int32_t>({1, 2}, Shape{2, 1}); });
  Tensor gathered = strategy.gather(values, 0);
  print_line(gathered);
  expect(equals<std::int32_t>(gathered, {4, 1}, {1, 2, 1, 2}), "gather of [[1], [2]]");

  MirroredStrategy four({"CPU:0", "CPU:1", "CPU:2", "CPU:3"});
  auto single = four.experimental_distribute_values_from_function(
      [](const ValueContext&) { return Tensor::from_vector<std::int32_t>({0, 1, 2, 3, 4, 5}, Shape{1, 2, 3}); });
  const std::vector<std::int32_t> repeated{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  const std::vector<std::int32_t> interleaved{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4, 5};
  const Shape shapes[] = {{4, 2, 3}, {1, 8, 3}, {1, 2, 12}};
  for (int axis = 0; axis < 3; ++axis) {
    std::cout << "\n# " << four.name() << ".gather of range(6) shaped (1, 2, 3), axis " << axis << '\n';
    Tensor result = four.gather(single, axis);
    print_line(result);
    expect(equals<std::int32_t>(result, shapes[axis], axis == 2 ? interleaved : repeated), "4-replica gather");
  }
}

void distributed_values_examples(Strategy& strategy) {
  title("DistributedValues: next(iter(experimental_distribute_dataset(from_tensor_slices([5, 6, 7, 8]).batch(2))))");
  const auto dataset = data::Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5, 6, 7, 8})).batch(2);
  const DistributedDataset<Tensor> dist_dataset = strategy.experimental_distribute_dataset(dataset);
  const PerReplica<Tensor> batch = dist_dataset.make_iterator().get_next();
  print_line(batch);
  expect(equals<float>(batch[0], {1}, {5.0f}) && equals<float>(batch[1], {1}, {6.0f}), "the first batch");

  title("DistributedValues as input into run: input + 1.0");
  auto updated = strategy.run([](const Tensor& input) {
    Tensor out = input.clone();
    out.flat<float>() += 1.0f;
    return out;
  }, batch);
  print_line(updated);
  expect(equals<float>(updated[0], {1}, {6.0f}) && equals<float>(updated[1], {1}, {7.0f}), "input + 1");

  title("DistributedValues as input into reduce: SUM, axis 0");
  Tensor reduced = strategy.reduce(ReduceOp::kSum, batch, 0);
  print_line(reduced);
  expect(equals<float>(reduced, {}, {11.0f}), "reduce of the batch");

  title("DistributedValues inspected with experimental_local_results");
  print_line(strategy.experimental_local_results(batch));

  title("Every step of the distributed dataset: for (auto batch : dist_dataset) strategy.run(step, batch)");
  std::vector<float> sums;
  for (auto step_batch : dist_dataset) {
    auto local_sums = strategy.run([](const Tensor& input) { return Tensor::scalar(input.flat<float>().sum()); },
                                   step_batch);
    print_line(local_sums.values());
    for (const Tensor& t : local_sums.values()) sums.push_back(t.item<float>());
  }
  expect(sums == std::vector<float>{5.0f, 6.0f, 7.0f, 8.0f}, "the steps of the distributed dataset");
}

}  // namespace

// MirroredStrategy() takes every GPU. A step on them: each replica makes its gradient on its own
// GPU and all-reduces it there (NCCL between physical GPUs); the mean comes back to the host.
void gpu_examples() {
  title("MirroredStrategy() on every GPU: all_reduce MEAN of per-replica gradients");
  if (num_physical_gpus() == 0) {
    std::cout << "no GPU visible (" << gpu_unavailable_reason() << "); skipped\n";
    return;
  }
  MirroredStrategy gpus;
  std::cout << "strategy: " << gpus.name() << " through " << gpus.cross_device_ops() << '\n';
  auto grads = gpus.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const auto r = static_cast<float>(ctx.replica_id_in_sync_group());
    return ctx.all_reduce(ReduceOp::kMean, Tensor::from_vector<float>({r, r + 1, r + 2}));
  });
  print_line(gpus.experimental_local_results(grads));
  const float mean_id = static_cast<float>(gpus.num_replicas_in_sync() - 1) / 2.0f;
  for (const Tensor& g : gpus.experimental_local_results(grads)) {
    expect(g.device().is_gpu() && equals<float>(g.to(Device::cpu()), {3}, {mean_id, mean_id + 1, mean_id + 2}),
           "GPU all_reduce MEAN");
  }
}

int main() {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  std::cout << "strategy: " << strategy.name() << '\n';
  replica_context_examples(strategy);
  run_examples(strategy);
  values_from_function_examples(strategy);
  reduce_examples(strategy);
  gather_examples(strategy);
  distributed_values_examples(strategy);
  gpu_examples();
  if (failures != 0) {
    std::cerr << failures << " value(s) differ from the documented ones\n";
    return 1;
  }
  return 0;
}
