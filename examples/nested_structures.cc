// nested_structures: all_reduce of a whole nest in one batched collective. Each of two CPU replicas
// holds a std::map of metrics, a std::tuple and a user struct registered with
// distribute::nest::StructFields; one all_reduce call sums every leaf (Tensors and plain scalars)
// across the replicas and returns a value of the same C++ type.
//
// Expected output:
//   structure: tuple[dict{correct: Tensor, loss: Tensor}, tuple[Tensor, float64], struct{kernel: Tensor, bias: Tensor, examples: int64}]
//   leaves: 7
//   replica 0:
//     metrics {'correct': <Tensor: shape=(), dtype=int64, numpy=30>, 'loss': <Tensor: shape=(), dtype=float32, numpy=1.5>}
//     counters (<Tensor: shape=(2,), dtype=int32, numpy=[1, 2]>, 0.75)
//     Gradients{kernel=<Tensor: shape=(2, 2), dtype=float32, numpy=
//   [[3.0, 6.0],
//    [9.0, 12.0]]>, bias=<Tensor: shape=(1,), dtype=float32, numpy=[-3.0]>, examples=64}
//   replica 1:
//     metrics {'correct': <Tensor: shape=(), dtype=int64, numpy=30>, 'loss': <Tensor: shape=(), dtype=float32, numpy=1.5>}
//     counters (<Tensor: shape=(2,), dtype=int32, numpy=[1, 2]>, 0.75)
//     Gradients{kernel=<Tensor: shape=(2, 2), dtype=float32, numpy=
//   [[3.0, 6.0],
//    [9.0, 12.0]]>, bias=<Tensor: shape=(1,), dtype=float32, numpy=[-3.0]>, examples=64}

#include <array>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "distribute/distribute.h"

namespace example {

struct Gradients {
  distribute::Tensor kernel;
  distribute::Tensor bias;
  std::int64_t examples = 0;
};

std::ostream& operator<<(std::ostream& os, const Gradients& g) {
  return os << "Gradients{kernel=" << g.kernel << ", bias=" << g.bias << ", examples=" << g.examples << '}';
}

}  // namespace example

// Makes Gradients a nest: its members are visited in this order, under these names.
template <>
struct distribute::nest::StructFields<example::Gradients> {
  static constexpr auto members =
      std::make_tuple(&example::Gradients::kernel, &example::Gradients::bias, &example::Gradients::examples);
  static constexpr std::array<const char*, 3> names = {"kernel", "bias", "examples"};
};

namespace {

using namespace distribute;
using example::Gradients;

using Metrics = std::map<std::string, Tensor>;
using Step = std::tuple<Metrics, std::tuple<Tensor, double>, Gradients>;

// Replica r's contribution: values that make each sum easy to check by eye.
Step local_values(int r) {
  const float f = static_cast<float>(r + 1);
  Metrics metrics{{"loss", Tensor::scalar(0.5f * f)}, {"correct", Tensor::scalar<std::int64_t>(10 * (r + 1))}};
  std::tuple<Tensor, double> counters{Tensor::from_vector<std::int32_t>({r, 1}), 0.25 * (r + 1)};
  Gradients grads{Tensor::from_vector<float>({f, 2 * f, 3 * f, 4 * f}, Shape{2, 2}), Tensor::from_vector<float>({-f}),
                  32};
  return {metrics, counters, grads};
}

template <class T>
bool equals(const Tensor& t, const Shape& shape, const std::vector<T>& values) {
  return t.dtype() == dtype_v<T> && t.shape() == shape && t.to_vector<T>() == values;
}

}  // namespace

int main() {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  std::cout << "structure: " << nest::describe_structure(local_values(0)) << '\n'
            << "leaves: " << nest::num_leaves(local_values(0)) << '\n';

  auto reduced = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    return ctx.all_reduce(ReduceOp::kSum, local_values(ctx.replica_id_in_sync_group()));
  });

  bool ok = true;
  for (int r = 0; r < reduced.num_replicas(); ++r) {
    const auto& [metrics, counters, grads] = reduced[r];
    std::cout << "replica " << r << ":\n  metrics ";
    print_value(std::cout, metrics);
    std::cout << "\n  counters ";
    print_value(std::cout, counters);
    std::cout << "\n  " << grads << '\n';
    ok = ok && equals<float>(metrics.at("loss"), {}, {1.5f}) && equals<std::int64_t>(metrics.at("correct"), {}, {30});
    ok = ok && equals<std::int32_t>(std::get<0>(counters), {2}, {1, 2}) && std::get<1>(counters) == 0.75;
    ok = ok && equals<float>(grads.kernel, {2, 2}, {3, 6, 9, 12}) && equals<float>(grads.bias, {1}, {-3}) &&
         grads.examples == 64;
  }
  if (!ok) {
    std::cerr << "a reduced value differs from the expected one\n";
    return 1;
  }
  return 0;
}
