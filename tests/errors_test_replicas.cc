// The rows of docs/errors.md (errors_test.cc) on contexts (replica vs cross-replica, mixed
// strategies, threads) and on collectives (bad values on one replica, replicas that disagree).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "errors_test.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;
using testing::expect_row;
using testing::per_replica_zeros;
using testing::replica_id;
using testing::zeros;

// ---------------------------------------------------------------------------------------------
// Contexts: replica vs cross-replica, mixed strategies, threads.

TEST(Errors, E51_RunInsideRun) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E51", [&] { strategy.run([&] { strategy.run([] {}); }); });
}

TEST(Errors, E52_ReduceInsideReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>(
      "E52", [&] { strategy.run([&] { (void)strategy.reduce(ReduceOp::kSum, 1.0f, std::nullopt); }); });
}

TEST(Errors, E53_GatherInsideReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E53", [&] {
    strategy.run([&] { strategy.gather(per_replica_zeros({Shape{1}, Shape{1}}), 0); });
  });
}

TEST(Errors, E54_ExtendedOperationsInsideReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyExtended& extended = strategy.extended();
  const PerReplica<Tensor> values = per_replica_zeros({Shape{1}, Shape{1}});
  expect_row<FailedPreconditionError>(
      "E54", [&] { strategy.run([&] { extended.reduce_to(ReduceOp::kSum, values, Device::cpu()); }); },
      {"extended().reduce_to"});
  expect_row<FailedPreconditionError>(
      "E54", [&] { strategy.run([&] {
                     extended.batch_reduce_to(ReduceOp::kSum, {{values, Device::cpu()}});
                   }); },
      {"extended().batch_reduce_to"});
  expect_row<FailedPreconditionError>(
      "E54", [&] { strategy.run([&] { extended.gather_to(values, Device::cpu(), 0); }); }, {"extended().gather_to"});
  expect_row<FailedPreconditionError>(
      "E54",
      [&] {
        strategy.run(
            [&] { extended.update(Mirrored<Tensor>(Tensor::scalar(1.0f), 2), [](const Tensor& t) { return t; }); });
      },
      {"extended().update"});
  expect_row<FailedPreconditionError>(
      "E54", [&] { strategy.run([&] { extended.call_for_each_replica([](ReplicaContext&) {}); }); },
      {"extended().call_for_each_replica"});
}

TEST(Errors, E55_ScopeInsideReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E55", [&] { strategy.run([&] { auto scope = strategy.scope(); }); });
}

TEST(Errors, E56_ScopesOfTwoStrategiesMixed) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(3));
  auto scope = a.scope();
  expect_row<FailedPreconditionError>("E56", [&] { auto inner = b.scope(); });
  EXPECT_EQ(get_cross_replica_context(), &a);  // the failed scope left the context as it was
}

TEST(Errors, E57_OtherStrategyInsideScope) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(3));
  auto scope = a.scope();
  expect_row<FailedPreconditionError>("E57", [&] { b.run([] {}); }, {"run: "});
  expect_row<FailedPreconditionError>(
      "E57",
      [&] {
        (void)b.reduce(ReduceOp::kMean, PerReplica<float>({1.0f, 2.0f, 3.0f}), std::nullopt);
      },
      {"reduce: "});
  expect_row<FailedPreconditionError>("E57",
                                      [&] {
                                        b.gather(per_replica_zeros({Shape{1}, Shape{1}, Shape{1}}), 0);
                                      },
                                      {"Strategy::gather: "});
}

TEST(Errors, E58_OtherStrategyRunInsideReplica) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(3));
  expect_row<FailedPreconditionError>("E58", [&] { a.run([&] { b.run([] {}); }); });
}

TEST(Errors, E59_ReplicaContextFromAnotherThread) {
  MirroredStrategy strategy(cpu_devices(2));
  std::vector<ReplicaContext*> contexts(2);
  strategy.run([&] { contexts[static_cast<std::size_t>(replica_id())] = get_replica_context(); });
  // Kept after run and used on the caller's thread.
  expect_row<FailedPreconditionError>("E59", [&] { contexts[0]->all_reduce(ReduceOp::kSum, 1.0f); });
  // Handed to another replica, which uses it instead of its own.
  expect_row<FailedPreconditionError>("E59",
                                      [&] {
                                        strategy.run([&] {
                                          if (replica_id() == 1) contexts[0]->all_reduce(ReduceOp::kSum, 1.0f);
                                        });
                                      },
                                      {"(this thread is in the context of replica 1)"});
}

TEST(Errors, E60_CollectiveInCrossReplicaContext) {
  MirroredStrategy strategy(cpu_devices(2));
  // Inside merge_fn, with the context the replica captured.
  expect_row<FailedPreconditionError>(
      "E60",
      [&] {
        strategy.run([] {
          ReplicaContext* context = get_replica_context();
          // merge_fn runs once, with replica 0's closure.
          context->merge_call([context](Strategy&) { context->all_reduce(ReduceOp::kSum, 1.0f); });
        });
      },
      {"ReplicaContext::all_reduce"});
  // Inside a scope, with a context kept from an earlier run.
  ReplicaContext* first = nullptr;
  strategy.run([&] {
    if (replica_id() == 0) first = get_replica_context();
  });
  auto scope = strategy.scope();
  expect_row<FailedPreconditionError>("E60", [&] { first->merge_call([](Strategy&) {}); },
                                      {"ReplicaContext::merge_call"});
  expect_row<FailedPreconditionError>("E60", [&] { first->all_gather(zeros(Shape{1}), 0); },
                                      {"ReplicaContext::all_gather"});
}

// Runs on `strategy` with a merge_fn that runs again, without end: the depth limit stops it.
void run_nested_through_merge_fn(Strategy& strategy) {
  strategy.run([] { get_replica_context()->merge_call([](Strategy& s) { run_nested_through_merge_fn(s); }); });
}

TEST(Errors, E61_RunNestedTooDeep) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E61", [&] { run_nested_through_merge_fn(strategy); });
}

// ---------------------------------------------------------------------------------------------
// Collectives: bad values on one replica, and replicas that disagree (see also misuse_test.cc).

TEST(Errors, E62_AllReduceOfUndefinedTensor) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E62", [&] {
    strategy.run([] {
      get_replica_context()->all_reduce(ReduceOp::kSum, std::vector<Tensor>{zeros(Shape{1}), Tensor()});
    });
  });
}

TEST(Errors, E63_AllGatherOfScalar) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>(
      "E63", [&] { strategy.run([] { get_replica_context()->all_gather(Tensor::scalar(1.0f), 0); }); });
  expect_row<InvalidArgumentError>("E63", [&] { strategy.run([] { get_replica_context()->all_gather(1.0f, 0); }); });
}

TEST(Errors, E64_AllGatherAxisOutOfRange) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E64", [&] {
    strategy.run([] { get_replica_context()->all_gather(zeros(Shape{2, 2}), 2); });
  });
}

TEST(Errors, E65_AllReduceShapeMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E65", [&] {
    strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{replica_id() == 1 ? 10 : 12})); });
  });
}

TEST(Errors, E66_AllReduceDTypeMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E66", [&] {
    strategy.run([] {
      get_replica_context()->all_reduce(ReduceOp::kSum,
                                        zeros(Shape{4}, replica_id() == 1 ? DType::kFloat64 : DType::kFloat32));
    });
  });
}

TEST(Errors, E67_NestStructureMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E67", [&] {
    strategy.run([] {
      get_replica_context()->all_reduce(ReduceOp::kSum,
                                        std::vector<float>(static_cast<std::size_t>(replica_id() + 1), 1.0f));
    });
  });
}

TEST(Errors, E68_ReduceOpMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E68", [&] {
    strategy.run([] { get_replica_context()->all_reduce(replica_id() == 1 ? ReduceOp::kMean : ReduceOp::kSum, 1.0f); });
  });
}

TEST(Errors, E69_AllGatherShapeMismatchOutsideAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E69", [&] {
    strategy.run([] { get_replica_context()->all_gather(zeros(Shape{2, replica_id() == 1 ? 3 : 2}), 0); });
  });
}

TEST(Errors, E70_AllGatherAxisMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E70", [&] {
    strategy.run([] { get_replica_context()->all_gather(zeros(Shape{2, 2}), replica_id() == 1 ? 1 : 0); });
  });
}

TEST(Errors, E71_CommunicationOptionsMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E71", [&] {
    strategy.run([] {
      CommunicationOptions options;
      if (replica_id() == 1) options.implementation = CommunicationImplementation::kRing;
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, options);
    });
  });
}

TEST(Errors, E72_DifferentCollectives) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E72", [&] {
    strategy.run([] {
      if (replica_id() == 1) {
        get_replica_context()->all_gather(zeros(Shape{2}), 0);
      } else {
        get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{2}));
      }
    });
  });
}

TEST(Errors, E73_MergeCallWithDifferentMergeFns) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E73", [&] {
    strategy.run([] {
      if (replica_id() == 1) {
        get_replica_context()->merge_call([](Strategy&) {});
      } else {
        get_replica_context()->merge_call([](Strategy&) {});
      }
    });
  });
}

TEST(Errors, E74_ReplicaReturnsWhileOthersWait) {
  MirroredStrategy strategy(cpu_devices(3));
  expect_row<FailedPreconditionError>("E74", [&] {
    strategy.run([] {
      if (replica_id() == 1) return;
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
    });
  });
}

TEST(Errors, E75_ReplicaRaisesWhileOthersWait) {
  MirroredStrategy strategy(cpu_devices(2));
  std::exception_ptr seen_by_replica_1;
  expect_error<std::runtime_error>(
      [&] {
        strategy.run([&] {
          if (replica_id() == 0) throw std::runtime_error("boom");
          try {
            get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
          } catch (...) {
            seen_by_replica_1 = std::current_exception();
            throw;
          }
        });
      },
      {"boom"});
  ASSERT_TRUE(seen_by_replica_1);
  expect_row<AbortedError>("E75", [&] { std::rethrow_exception(seen_by_replica_1); });
}

TEST(Errors, E76_MergeFnRaises) {
  MirroredStrategy strategy(cpu_devices(2));
  std::vector<std::exception_ptr> seen(2);
  expect_error<std::runtime_error>(
      [&] {
        strategy.run([&] {
          try {
            get_replica_context()->merge_call([](Strategy&) { throw std::runtime_error("boom"); });
          } catch (...) {
            seen[static_cast<std::size_t>(replica_id())] = std::current_exception();
            throw;
          }
        });
      },
      {"boom"});
  for (const std::exception_ptr& error : seen) {
    ASSERT_TRUE(error);
    expect_row<AbortedError>("E76", [&] { std::rethrow_exception(error); });
  }
}

TEST(Errors, E77_CollectiveTimeout) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<DeadlineExceededError>("E77", [&] {
    strategy.run([] {
      if (replica_id() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      CommunicationOptions options;
      options.timeout = std::chrono::milliseconds(50);
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, options);
    });
  });
}

TEST(Errors, E78_StrategyWideTimeout) {
  MirroredStrategy strategy(cpu_devices(2),
                            MirroredStrategyOptions{.communication = {.timeout = std::chrono::milliseconds(50)}});
  bool merge_fn_ran = false;
  expect_row<DeadlineExceededError>("E78", [&] {
    strategy.run([&] {
      if (replica_id() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      get_replica_context()->merge_call([&](Strategy&) { merge_fn_ran = true; });
    });
  });
  EXPECT_FALSE(merge_fn_ran);
}

}  // namespace
}  // namespace distribute
