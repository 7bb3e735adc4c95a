# The programs bench/gpu_run.sh runs, by their paths in a build directory; bench/gpu_pack.sh packs
# the same list. Sourced by both.

# Test programs that split GPUs into logical ones: one process per test (the split is per process).
gpu_per_test_programs=(tests/gpu_test tests/gpu_rules_test tests/errors_test)
# Test programs run whole.
gpu_whole_programs=(tests/variable_test tests/distributed_input_test tests/device_test tests/tensor_test
                    tests/collectives_test tests/misuse_test)
# Examples run with no arguments.
gpu_example_programs=(examples/quickstart examples/nested_structures examples/merge_call_update
                      examples/train_checkpoint)
# The rest: the training example and its tests, the multi-worker tests (under mpirun), the benchmark.
gpu_training_program=examples/fashion_mnist/train_fashion_mnist
gpu_training_test_program=examples/fashion_mnist/fashion_mnist_test
gpu_multi_worker_program=tests/multi_worker_test
gpu_bench_program=bench/gpu_collectives_bench
gpu_overlap_program=bench/gpu_overlap_bench

gpu_all_programs=("${gpu_per_test_programs[@]}" "${gpu_whole_programs[@]}" "${gpu_example_programs[@]}"
                  "$gpu_training_program" "$gpu_training_test_program" "$gpu_multi_worker_program"
                  "$gpu_bench_program" "$gpu_overlap_program")
