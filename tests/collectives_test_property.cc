// The property test of the collectives on CPU replicas: all_reduce, all_gather, Strategy::reduce
// and Strategy::gather on random inputs, against the plain reference implementation written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/collective_reference.h"
#include "testing/replica_harness.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

using testing::as_doubles;
using testing::backend_label;
using testing::concat_reference;
using testing::cpu_devices;
using testing::mean_of;
using testing::tensor_of;
using testing::to_doubles;

// Random per-replica inputs for one trial, as small integers (exact in every dtype).
struct Trial {
  int n = 1;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int axis = 0;  // as passed, possibly negative
  std::vector<Shape> shapes;
  std::vector<std::vector<std::int64_t>> values;

  std::string describe() const {
    std::ostringstream os;
    os << n << " replicas, " << dtype << ", " << op << ", axis " << axis << ", shapes";
    for (const Shape& s : shapes) os << ' ' << s;
    return os.str();
  }
  std::vector<Tensor> tensors() const {
    std::vector<Tensor> out;
    for (int r = 0; r < n; ++r) out.push_back(tensor_of(dtype, values[static_cast<std::size_t>(r)], shapes[static_cast<std::size_t>(r)]));
    return out;
  }
};

class TrialMaker {
 public:
  explicit TrialMaker(std::uint32_t seed) : rng_(seed) {}

  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // `uneven_axis`: the size along the axis differs per replica (min_axis_size.. 4), as gathers
  // and reductions with an axis allow; otherwise every replica has the same shape.
  Trial make(int max_replicas, bool uneven_axis, int min_axis_size) {
    static constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                        DType::kInt64,   DType::kFloat16, DType::kBFloat16};
    Trial t;
    t.n = uniform(1, max_replicas);
    t.dtype = kDTypes[uniform(0, 5)];
    t.op = uniform(0, 1) == 0 ? ReduceOp::kSum : ReduceOp::kMean;
    const int rank = uniform(1, 3);
    t.axis = uniform(-rank, rank - 1);
    const int a = t.axis < 0 ? t.axis + rank : t.axis;
    std::vector<std::int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(uniform(0, 4));
    if (!uneven_axis) dims[static_cast<std::size_t>(a)] = std::max<std::int64_t>(dims[static_cast<std::size_t>(a)], min_axis_size);
    for (int r = 0; r < t.n; ++r) {
      if (uneven_axis) dims[static_cast<std::size_t>(a)] = uniform(min_axis_size, 4);
      t.shapes.emplace_back(dims);
      std::vector<std::int64_t> v;
      for (std::int64_t i = 0; i < t.shapes.back().num_elements(); ++i) v.push_back(uniform(-3, 3));
      t.values.push_back(std::move(v));
    }
    return t;
  }

 private:
  std::mt19937 rng_;
};

// Element-wise SUM or MEAN across replicas (equal shapes).
std::vector<double> reduce_reference(const Trial& t) {
  std::vector<double> out;
  for (std::size_t i = 0; i < t.values[0].size(); ++i) {
    std::int64_t sum = 0;
    for (const auto& v : t.values) sum += v[i];
    out.push_back(t.op == ReduceOp::kSum ? static_cast<double>(sum) : mean_of(t.dtype, sum, t.n));
  }
  return out;
}

// SUM or MEAN across replicas and along t.axis; MEAN divides by the number of elements reduced.
std::pair<Shape, std::vector<double>> reduce_axis_reference(const Trial& t) {
  const int a = normalize_axis(t.axis, t.shapes[0].rank(), "reference");
  const Shape reduced = t.shapes[0].without_dim(a);
  std::vector<std::int64_t> sums(static_cast<std::size_t>(reduced.num_elements()), 0);
  std::int64_t count = 0;
  for (int r = 0; r < t.n; ++r) {
    const Shape& s = t.shapes[static_cast<std::size_t>(r)];
    const std::int64_t inner = s.inner_size(a);
    for (std::int64_t o = 0; o < s.outer_size(a); ++o) {
      for (std::int64_t d = 0; d < s[a]; ++d) {
        for (std::int64_t i = 0; i < inner; ++i) {
          sums[static_cast<std::size_t>(o * inner + i)] += t.values[static_cast<std::size_t>(r)][static_cast<std::size_t>((o * s[a] + d) * inner + i)];
        }
      }
    }
    count += s[a];
  }
  std::vector<double> out;
  for (std::int64_t sum : sums) {
    out.push_back(t.op == ReduceOp::kSum ? static_cast<double>(sum) : mean_of(t.dtype, sum, count));
  }
  return {reduced, out};
}

std::pair<Shape, std::vector<double>> gather_reference(const Trial& t) {
  const int a = normalize_axis(t.axis, t.shapes[0].rank(), "reference");
  std::int64_t total = 0;
  for (const Shape& s : t.shapes) total += s[a];
  return {t.shapes[0].with_dim(a, total), as_doubles(concat_reference(t.values, t.shapes, a))};
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kTrialsPerKind = 150;
#else
constexpr int kTrialsPerKind = 1000;
#endif

class PropertyTest : public ::testing::TestWithParam<CrossDeviceOps> {
 protected:
  PropertyTest() {
    MirroredStrategyOptions options;
    options.cross_device_ops = GetParam();
    for (int n = 1; n <= 4; ++n) {
      strategies_[static_cast<std::size_t>(n)] = std::make_unique<MirroredStrategy>(cpu_devices(n), options);
    }
  }
  MirroredStrategy& strategy(int n) { return *strategies_[static_cast<std::size_t>(n)]; }

  void check(const Trial& t, const Tensor& got, const Shape& shape, const std::vector<double>& expected,
             const std::string& what) {
    if (failures_ >= 5) return;
    if (got.dtype() != t.dtype || got.shape() != shape || to_doubles(got) != expected) {
      ++failures_;
      ADD_FAILURE() << what << " differs from the reference for " << t.describe() << ": got " << got
                    << ", expected shape " << shape << " values " << ::testing::PrintToString(expected);
    }
  }

  TrialMaker maker_{20240607};
  std::array<std::unique_ptr<MirroredStrategy>, 5> strategies_;
  int failures_ = 0;
};

TEST_P(PropertyTest, AllReduceMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    const Trial t = maker_.make(4, false, 0);
    PerReplica<Tensor> inputs(t.tensors());
    PerReplica<Tensor> result = strategy(t.n).run(
        [&](const Tensor& mine) { return get_replica_context()->all_reduce(t.op, mine); }, inputs);
    const std::vector<double> expected = reduce_reference(t);
    for (int r = 0; r < t.n; ++r) check(t, result[r], t.shapes[0], expected, "all_reduce of replica " + std::to_string(r));
  }
}

// A list of up to three tensors of different dtypes and shapes, reduced in one call.
TEST_P(PropertyTest, AllReduceOfMixedListsMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind / 2; ++trial) {
    const int n = maker_.uniform(1, 4);
    const ReduceOp op = maker_.uniform(0, 1) == 0 ? ReduceOp::kSum : ReduceOp::kMean;
    std::vector<Trial> leaves;
    for (int leaf = maker_.uniform(1, 3); leaf > 0; --leaf) {
      Trial t;
      do {
        t = maker_.make(4, false, 0);
      } while (t.n < n);
      t.n = n;
      t.op = op;
      t.shapes.resize(static_cast<std::size_t>(n));
      t.values.resize(static_cast<std::size_t>(n));
      leaves.push_back(std::move(t));
    }
    std::vector<std::vector<Tensor>> per_replica(static_cast<std::size_t>(n));
    for (const Trial& t : leaves) {
      std::vector<Tensor> tensors = t.tensors();
      for (int r = 0; r < n; ++r) per_replica[static_cast<std::size_t>(r)].push_back(tensors[static_cast<std::size_t>(r)]);
    }
    PerReplica<std::vector<Tensor>> inputs(per_replica);
    auto result = strategy(n).run(
        [&](const std::vector<Tensor>& mine) { return get_replica_context()->all_reduce(op, mine); }, inputs);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(result[r].size(), leaves.size());
      for (std::size_t leaf = 0; leaf < leaves.size(); ++leaf) {
        check(leaves[leaf], result[r][leaf], leaves[leaf].shapes[0], reduce_reference(leaves[leaf]),
              "leaf " + std::to_string(leaf) + " of a list all_reduce");
      }
    }
  }
}

TEST_P(PropertyTest, AllGatherMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    const Trial t = maker_.make(4, true, 0);
    PerReplica<Tensor> inputs(t.tensors());
    PerReplica<Tensor> result = strategy(t.n).run(
        [&](const Tensor& mine) { return get_replica_context()->all_gather(mine, t.axis); }, inputs);
    const auto [shape, expected] = gather_reference(t);
    for (int r = 0; r < t.n; ++r) check(t, result[r], shape, expected, "all_gather of replica " + std::to_string(r));
  }
}

TEST_P(PropertyTest, StrategyReduceMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    const Trial t = maker_.make(4, false, 0);
    PerReplica<Tensor> inputs(t.tensors());
    check(t, strategy(t.n).reduce(t.op, inputs, std::nullopt), t.shapes[0], reduce_reference(t), "Strategy::reduce");
  }
}

TEST_P(PropertyTest, StrategyReduceAlongAnAxisMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    // At least one element along the axis on each replica, so that MEAN has a count.
    const Trial t = maker_.make(4, true, 1);
    PerReplica<Tensor> inputs(t.tensors());
    const auto [shape, expected] = reduce_axis_reference(t);
    check(t, strategy(t.n).reduce(t.op, inputs, t.axis), shape, expected, "Strategy::reduce with an axis");
  }
}

TEST_P(PropertyTest, StrategyGatherMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    const Trial t = maker_.make(4, true, 0);
    PerReplica<Tensor> inputs(t.tensors());
    const auto [shape, expected] = gather_reference(t);
    check(t, strategy(t.n).gather(inputs, t.axis), shape, expected, "Strategy::gather");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PropertyTest,
                         ::testing::Values(CrossDeviceOps::kAuto, CrossDeviceOps::kReductionToOneDevice),
                         [](const auto& p) { return backend_label(p.param); });

}  // namespace
}  // namespace distribute
