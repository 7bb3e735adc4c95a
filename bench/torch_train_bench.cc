// torch_train_bench: examples/torch_fashion_mnist's CNN on one global batch, trained by plain
// LibTorch in one thread without the library, by a ReplicatedModule on 1 replica and on
// --replicas replicas (one intra-op thread each; the library's SGD fed by the autograd hooks'
// gradient buckets), and by the same replicas with no gradient crossing them (each applies its
// own, as DDP's no_sync does). Each round trains --steps steps of every configuration in turn,
// the order reversed every other round; the table gives the median over the rounds of samples/s
// and its ratio to plain LibTorch and to 1 replica, and the share of the step that communication
// adds: 1 - (time without it / time with it).
//
// Synthetic images (a fixed random batch, labels from a fixed rule): the input pipeline is not
// what is measured. Every configuration runs with the malloc settings the first ReplicatedModule
// makes (ReplicatedModuleOptions::keep_freed_memory), plain LibTorch too: without them each step
// faults its activations in anew, 3 to 4 times slower, and the comparison would be of allocators. With --multi_worker (built with distribute::mpi) one replica per worker under
// mpirun; worker 0 prints.
//
//   ./build/default/bench/torch_train_bench --replicas=2 --steps=40 --rounds=5
//   mpirun -np 2 ./build/default/bench/torch_train_bench --multi_worker --steps=40
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "cnn.h"
#include "distribute/distribute.h"
#include "distribute/torch/torch.h"
#if DISTRIBUTE_BENCH_WITH_MPI
#include "distribute/mpi/multi_worker_mirrored_strategy.h"
#endif

ABSL_FLAG(int, replicas, 2, "the replicas of the multi-replica configurations (one process)");
ABSL_FLAG(int64_t, batch_size, 256, "the global batch");
ABSL_FLAG(int, steps, 40, "timed steps per configuration and round");
ABSL_FLAG(int, warmup, 5, "untimed steps per configuration, before the first round");
ABSL_FLAG(int, rounds, 5, "rounds; the table shows the medians");
ABSL_FLAG(double, learning_rate, 0.01, "SGD's");
ABSL_FLAG(double, bucket_mb, 25, "the gradient buckets' size in MiB");
ABSL_FLAG(bool, multi_worker, false, "one replica per worker under mpirun (MultiWorkerMirroredStrategy)");

namespace {

using distribute::ReplicatedModule;
using torch_fashion_mnist::Cnn;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Batch {
  at::Tensor images;  // [batch, 1, 28, 28]
  at::Tensor labels;  // [batch], int64
};

Batch synthetic_batch(std::int64_t size) {
  torch::manual_seed(3);
  Batch batch{torch::rand({size, 1, 28, 28}), {}};
  batch.labels = (batch.images.mean({1, 2, 3}) * 1000).to(torch::kLong).remainder(10);
  return batch;
}

// The loss of rows [begin, begin + rows) as their share of the global batch's mean.
at::Tensor share_of_loss(Cnn& net, const Batch& batch, std::int64_t begin, std::int64_t rows) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(net.forward(batch.images.narrow(0, begin, rows)), batch.labels.narrow(0, begin, rows),
                          F::CrossEntropyFuncOptions().reduction(torch::kSum)) /
         batch.images.size(0);
}

// One configuration: runs `steps` steps and returns their seconds.
using Trainer = std::function<double(int steps)>;

template <class Fn>
double timed(int steps, Fn&& step) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Plain LibTorch in this thread: forward, backward, torch::optim::SGD.
Trainer plain_libtorch(const Batch& batch) {
  auto net = std::make_shared<Cnn>();
  auto sgd = std::make_shared<torch::optim::SGD>(net->parameters(), absl::GetFlag(FLAGS_learning_rate));
  return [net, sgd, &batch](int steps) {
    return timed(steps, [&] {
      sgd->zero_grad();
      share_of_loss(*net, batch, 0, batch.images.size(0)).backward();
      sgd->step();
    });
  };
}

// Plain LibTorch in `threads` threads of this process, each its own model on its slice of the batch
// (as many models as replicas, nothing shared, no step waiting for another): how LibTorch's own
// kernels scale over the cores in one process, apart from the library.
Trainer plain_libtorch_threads(const Batch& batch, int threads) {
  const std::int64_t rows = batch.images.size(0) / threads;
  std::vector<std::shared_ptr<Cnn>> nets;
  std::vector<std::shared_ptr<torch::optim::SGD>> sgds;
  for (int t = 0; t < threads; ++t) {
    nets.push_back(std::make_shared<Cnn>());
    sgds.push_back(std::make_shared<torch::optim::SGD>(nets.back()->parameters(), absl::GetFlag(FLAGS_learning_rate)));
  }
  return [nets, sgds, rows, &batch](int steps) {
    return timed(1, [&] {
      std::vector<std::thread> workers;
      for (std::size_t t = 0; t < nets.size(); ++t) {
        workers.emplace_back([&, t] {
          at::set_num_threads(1);
          for (int i = 0; i < steps; ++i) {
            sgds[t]->zero_grad();
            share_of_loss(*nets[t], batch, static_cast<std::int64_t>(t) * rows, rows).backward();
            sgds[t]->step();
          }
        });
      }
      for (std::thread& worker : workers) worker.join();
    });
  };
}

// A ReplicatedModule on `strategy`'s replicas, each on its slice of the batch; with `communicate`
// false each replica applies its own gradients (no collective), the computation alone.
Trainer replicated(distribute::Strategy& strategy, const Batch& batch, bool communicate) {
  std::shared_ptr<ReplicatedModule<Cnn>> model;
  std::shared_ptr<distribute::optimizers::SGD> sgd;
  {
    distribute::StrategyScope scope = strategy.scope();
    model = std::make_shared<ReplicatedModule<Cnn>>([] { return std::make_shared<Cnn>(); },
                                                    distribute::ReplicatedModuleOptions{.intra_op_threads = 1});
    sgd = std::make_shared<distribute::optimizers::SGD>(absl::GetFlag(FLAGS_learning_rate));
  }
  const std::int64_t rows = batch.images.size(0) / strategy.num_replicas_in_sync();
  const auto bucket_bytes = static_cast<std::int64_t>(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20));
  return [&strategy, &batch, model, sgd, rows, bucket_bytes, communicate](int steps) {
    return timed(steps, [&] {
      strategy.run([&] {
        const int r = distribute::get_replica_context()->replica_id_in_sync_group();
        const at::Tensor loss = share_of_loss(*model->local(), batch, r * rows, rows);
        if (communicate) {
          auto buckets = sgd->gradient_buckets({.bucket_bytes = bucket_bytes});
          model->backward(loss, buckets);
          sgd->apply_gradients(buckets);
          return;
        }
        loss.backward();
        std::vector<std::pair<distribute::Tensor, distribute::Variable>> own;
        for (const auto& [name, variable] : model->named_variables()) {
          if (!variable.trainable()) continue;
          at::Tensor& grad = model->local()->named_parameters(true)[name].mutable_grad();
          own.emplace_back(distribute::from_torch(grad), variable);
        }
        sgd->apply_gradients(own, {.skip_gradients_aggregation = true});
        for (auto& p : model->local()->parameters()) p.mutable_grad().reset();
      });
    });
  };
}

struct Row {
  std::string name;
  Trainer train;
  std::vector<double> samples_per_s;
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("the LibTorch example's CNN: plain LibTorch, 1 replica and N replicas, samples/s");
  absl::ParseCommandLine(argc, argv);
  const std::int64_t global_batch = absl::GetFlag(FLAGS_batch_size);
  const int replicas = absl::GetFlag(FLAGS_replicas);
  const Batch batch = synthetic_batch(global_batch);
  at::set_num_threads(1);

  std::unique_ptr<distribute::Strategy> many;
  std::unique_ptr<distribute::Strategy> one;
  bool print = true;
  if (absl::GetFlag(FLAGS_multi_worker)) {
#if DISTRIBUTE_BENCH_WITH_MPI
    many = std::make_unique<distribute::MultiWorkerMirroredStrategy>();
    print = many->extended().worker_id() == 0;
#else
    std::fprintf(stderr, "torch_train_bench: --multi_worker needs a build with distribute::mpi\n");
    return 2;
#endif
  } else {
    std::vector<std::string> devices;
    for (int r = 0; r < replicas; ++r) devices.push_back("CPU:" + std::to_string(r));
    many = std::make_unique<distribute::MirroredStrategy>(devices);
    one = std::make_unique<distribute::MirroredStrategy>(std::vector<std::string>{"CPU:0"});
  }
  const int n = many->num_replicas_in_sync();
  if (global_batch % n != 0) {
    std::fprintf(stderr, "torch_train_bench: --batch_size=%lld is not a multiple of the %d replicas\n",
                 static_cast<long long>(global_batch), n);
    return 2;
  }
  std::vector<Row> rows;
  if (one) {
    rows.push_back({"plain LibTorch, 1 thread", plain_libtorch(batch), {}});
    rows.push_back({"ReplicatedModule, 1 replica", replicated(*one, batch, true), {}});
  }
  const std::string label = std::to_string(n) + (absl::GetFlag(FLAGS_multi_worker) ? " workers" : " replicas");
  const std::size_t synchronised = rows.size();
  rows.push_back({"ReplicatedModule, " + label, replicated(*many, batch, true), {}});
  rows.push_back({"  the same, no communication", replicated(*many, batch, false), {}});
  if (one) rows.push_back({"plain LibTorch, " + std::to_string(n) + " threads", plain_libtorch_threads(batch, n), {}});

  for (Row& row : rows) row.train(absl::GetFlag(FLAGS_warmup));
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int steps = absl::GetFlag(FLAGS_steps);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < rows.size(); ++k) {
      Row& row = rows[round % 2 == 0 ? k : rows.size() - 1 - k];
      row.samples_per_s.push_back(static_cast<double>(steps * global_batch) / row.train(steps));
    }
  }
  if (!print) return 0;
  std::printf("# torch_train_bench: %s, global batch %lld, SGD, %d rounds of %d steps, one LibTorch thread per "
              "replica; medians\n",
              Cnn::kDescription, static_cast<long long>(global_batch), rounds, steps);
  std::printf("%-34s %12s %10s %12s\n", "configuration", "samples/s", "vs plain", "vs 1 replica");
  const double plain = one ? median(rows[0].samples_per_s) : 0;
  const double single = one ? median(rows[1].samples_per_s) : 0;
  for (const Row& row : rows) {
    const double rate = median(row.samples_per_s);
    std::printf("%-34s %12.0f", row.name.c_str(), rate);
    if (one) std::printf(" %9.3fx %11.3fx", rate / plain, rate / single);
    std::printf("\n");
  }
  const double with = median(rows[synchronised].samples_per_s);
  const double without = median(rows[synchronised + 1].samples_per_s);
  std::printf("communication's share of the %s step: %.1f %%\n", label.c_str(), 100 * (1 - with / without));
  return 0;
}
