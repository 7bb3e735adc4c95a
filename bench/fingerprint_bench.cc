// What the always-on collective fingerprints cost: each replica's digest of its call's signature
// (detail::signature_digest) and the comparison the last replica to arrive runs for every
// all_reduce (detail::compare_calls over the replicas' calls), timed on their own for a single
// tensor and for a 100-leaf gradient list, beside the whole all_reduce of the same values
// measured in the same run. The checks cannot be turned off; this is how their share is known.
//
//   ./build/default/bench/fingerprint_bench --replicas 2,4 --iters 15
#include <chrono>
#include <cstdio>
#include <vector>

#include "distribute/distribute.h"
#include "replica/call_signature.h"
#include "replica_bench.h"

namespace distribute::bench {
namespace {

// Median ns of the digests of `n` replicas' calls, each an all_reduce of `value`, and their
// comparison.
template <class V>
double compare_ns(int n, const V& value, const Options& options) {
  std::vector<std::unique_ptr<detail::CollectiveArgs>> args;
  std::vector<detail::CollectiveCall*> calls;
  for (int r = 0; r < n; ++r) {
    args.push_back(std::make_unique<detail::CollectiveArgs>(value, collective::CollectiveKind::kAllReduce, Device::cpu(r)));
    calls.push_back(&args.back()->call());
  }
  constexpr int kCompares = 20000;
  std::vector<double> samples;
  for (int repeat = 0; repeat < std::max(options.iters, 5); ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < kCompares; ++k) {
      for (detail::CollectiveCall* call : calls) call->signature = detail::signature_digest(*call);
      if (detail::compare_calls(calls) != nullptr) std::abort();  // equal calls: never a mismatch
    }
    samples.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
                      kCompares);
  }
  return median(samples);
}

template <class V>
void measure(int n, const char* label, const V& value, const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  auto inputs = strategy.experimental_distribute_values_from_function([&](const ValueContext&) { return value; });
  std::vector<V> results(static_cast<std::size_t>(n));
  const double all_reduce_s = time_all_reduce(strategy, inputs, results, 1000, options).median_s;
  const double compare = compare_ns(n, value, options);
  std::printf("%8d %-22s %14.1f %16.3f %10.1f%%\n", n, label, compare, all_reduce_s * 1e6,
              100.0 * compare * 1e-9 / all_reduce_s);
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute;
  using namespace distribute::bench;
  Options options = parse_options(argc, argv, "the fingerprint comparison against a whole all_reduce", {2, 4});
  std::printf("# fingerprint cost: median ns of the comparison per all_reduce, and the all_reduce's median (us)\n");
  std::printf("%8s %-22s %14s %16s %11s\n", "replicas", "value", "compare (ns)", "all_reduce (us)", "share");
  for (int n : options.replicas) {
    measure(n, "float32[1]", Tensor::from_vector<float>({1.0f}), options);
    std::vector<Tensor> list;
    for (int k = 0; k < 100; ++k) list.push_back(Tensor::zeros(DType::kFloat32, Shape{64}));
    measure(n, "100 x float32[64]", list, options);
  }
}
