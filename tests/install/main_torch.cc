// The torch consumer of the install test, built when the install has the torch component
// (find_package(distribute CONFIG REQUIRED COMPONENTS torch)): two replicas sum LibTorch tensors
// in place through from_torch.
#include <cstdio>

#include <distribute/distribute.h>
#include <distribute/torch/torch.h>
#include <ATen/ATen.h>

int main() {
  distribute::MirroredStrategy strategy({"CPU:0", "CPU:1"});
  std::vector<at::Tensor> values{at::ones({2}), at::ones({2})};
  strategy.run([&] {
    distribute::ReplicaContext* ctx = distribute::get_replica_context();
    const auto replica = static_cast<std::size_t>(ctx->replica_id_in_sync_group());
    distribute::Tensor shared = distribute::from_torch(values[replica]);
    ctx->all_reduce_in_place(distribute::ReduceOp::kSum, shared);
  });
  for (const at::Tensor& v : values) {
    if (!at::equal(v, at::full({2}, 2.0f))) {
      std::fprintf(stderr, "consumer_torch: all_reduce gave %g, expected 2\n", v[0].item<double>());
      return 1;
    }
  }
  std::printf("consumer_torch: all_reduce SUM of LibTorch tensors over 2 replicas = 2\n");
  return 0;
}
