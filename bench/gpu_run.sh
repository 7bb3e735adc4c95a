#!/usr/bin/env bash
# The GPU checks in one command, for a machine with a GPU: every test of the GPU-facing test
# programs (each test in its own process, as ctest runs them, since a logical-GPU split is fixed
# per process), the examples, the multi-worker tests on GPUs (two workers under mpirun, one NCCL
# communicator across them), and gpu_collectives_bench (the library against raw NCCL from 8 B to
# 1 GiB, then the one-device path over 2 and 4 logical GPUs), and gpu_overlap_bench (async
# collectives overlapping compute, in one process and over two workers with compression). Prints a
# test summary and the benchmark tables; exits non-zero when a test or an example fails.
#
#   bench/gpu_run.sh [BUILD_DIR [SECTION...]]
#       BUILD_DIR defaults to build/default, configured with CUDA and NCCL found (the README's
#       default build does that). SECTIONs: tests, examples, training, multiworker, bench,
#       overlap (all by default), and profile (gpu_collectives_bench --profile from 1 to 64 MiB: where the
#       library's time beside raw NCCL goes).
#
# Libraries: BUILD_DIR/lib goes first on LD_LIBRARY_PATH when it exists (for a build made on
# another machine), and where no libnccl or libcublas is installed, PyTorch's NVIDIA wheels serve.
# The training example's GPU tests and runs need Debian's dataset-fashion-mnist, else they skip.
set -uo pipefail
build=${1:-build/default}
sections=" ${*:2} "
[ "$sections" = "  " ] && sections=" tests examples training multiworker bench overlap "
want() { [[ $sections == *" $1 "* ]]; }
source "$(dirname "${BASH_SOURCE[0]}")/gpu_programs.sh"

if [ -d "$build/lib" ]; then
  export LD_LIBRARY_PATH="$(cd "$build/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for lib in nccl:libnccl.so.2 cublas:libcublas.so.13; do
  if ! ldconfig -p 2>/dev/null | grep -q "${lib#*:}"; then
    wheel=$(python3 -c "import os, nvidia.${lib%%:*} as m; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null)
    if [ -n "$wheel" ] && [ -e "$wheel/${lib#*:}" ]; then
      export LD_LIBRARY_PATH="$wheel${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
  fi
done

echo "=== machine"
have_gpu=1
python3 -c "import nvidia.nccl, os; print('NCCL wheel:', sorted(os.listdir(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))))" 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || {
  have_gpu=0
  echo "no GPU visible (nvidia-smi failed): the GPU tests skip, the GPU runs do not start"
}

passed=0
skipped=0
failures=()
# run_gtest PROGRAM [FILTER]: runs it, counts its passed and skipped tests, shows what failed or skipped.
run_gtest() {
  local program=$1 exe="$build/$1" log rc
  if [ ! -x "$exe" ]; then
    failures+=("$program: not built")
    return
  fi
  log=$(timeout 300 "$exe" ${2:+--gtest_filter="$2"} 2>&1)
  rc=$?
  log_of_last=$log
  passed=$((passed + $(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' <<<"$log" | tail -1)))
  skipped=$((skipped + $(grep -c '^\[  SKIPPED \] .* ms)$' <<<"$log")))
  grep '^\[  SKIPPED \] .* ms)$' <<<"$log" | sed "s|^\[  SKIPPED \]|  skipped: $program|"
  grep -m1 -A1 ': Skipped$' <<<"$log" | tail -1 | sed 's/^/    because: /'
  grep -E '^(NcclAllReduce|ReductionToOneDevice): pool' <<<"$log"
  if [ $rc -ne 0 ]; then
    failures+=("$program ${2:-} (exit $rc)")
    echo "FAILED $program ${2:-}"
    tail -60 <<<"$log"
  fi
}
if want tests; then
  echo "=== tests"
  for program in "${gpu_per_test_programs[@]}"; do
    [ -x "$build/$program" ] || { failures+=("$program: not built"); continue; }
    for name in $("$build/$program" --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }'); do
      run_gtest "$program" "$name"
    done
  done
  for program in "${gpu_whole_programs[@]}"; do run_gtest "$program"; done
  for name in TrainingOnGpu.OneGpuReachesTheHostsWeights TrainingOnGpu.TwoLogicalGpusReachTwoHostReplicasWeights; do
    run_gtest "$gpu_training_test_program" "$name"
    grep -h 'accuracy' <<<"$log_of_last"
  done
fi

want examples && echo "=== examples"
want examples && for example in "${gpu_example_programs[@]}"; do
  exe="$build/$example"
  if log=$(timeout 120 "$exe" 2>&1); then
    echo "ok $example"
  else
    failures+=("example $example")
    echo "FAILED example $example"
    echo "$log" | tail -40
  fi
  [ "$example" = examples/quickstart ] && grep -A2 '^strategy: MirroredStrategy(GPU' <<<"$log"
done

want training && echo "=== the training example on GPUs"
train="$build/$gpu_training_program"
if ! want training; then
  :
elif [ $have_gpu = 0 ]; then
  echo "skipped: no GPU"
elif [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  for run in "--replicas=1 --epochs=3" "--replicas=2 --epochs=1"; do
    # shellcheck disable=SC2086
    timeout 300 "$train" --device=gpu $run --checkpoint=/tmp/gpu_run_fashion_mnist.safetensors ||
      failures+=("train_fashion_mnist --device=gpu $run")
  done
else
  echo "skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi

# Under mpirun with fewer GPUs than workers: each worker presents itself to NCCL as its own host
# (NCCL refuses two ranks on one GPU of one host), and they talk through NCCL's socket transport.
one_host_each='[ "$0" -lt 2 ] && export NCCL_HOSTID=gpu_run_worker_$OMPI_COMM_WORLD_RANK NCCL_SOCKET_IFNAME=lo; exec "$@"'

if want multiworker; then
  # Every test of multi_worker_test with GPU replicas: 1 and 2 workers of one GPU each. Where the
  # machine has one GPU, the two workers share it (the test presents each to NCCL as its own host).
  echo "=== multi-worker tests on GPUs (mpirun)"
  if ! command -v mpirun >/dev/null; then
    failures+=("multi-worker: no mpirun (apt-get install openmpi-bin)")
  else
    for workers in 1 2; do
      log=$(timeout 300 mpirun --oversubscribe --bind-to none -np $workers "$build/$gpu_multi_worker_program" \
        --local_replicas=1 --device=gpu --gtest_color=no 2>&1)
      rc=$?
      ran=$(grep -c '^\[  PASSED  \]' <<<"$log")
      grep -E '^(skipped:|\[  PASSED  \]|\[  SKIPPED \] [0-9])' <<<"$log" | sort | uniq -c | sed "s/^/  $workers x 1: /"
      passed=$((passed + $(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' <<<"$log" | head -1) + 0))
      if [ $rc -eq 77 ] && grep -q '^skipped:' <<<"$log"; then
        skipped=$((skipped + 1))
      elif [ $rc -ne 0 ] || [ "$ran" -ne $workers ]; then
        failures+=("multi_worker_test $workers x 1 on GPUs (exit $rc)")
        echo "FAILED multi_worker_test $workers x 1 on GPUs"
        tail -80 <<<"$log"
      fi
    done
    # The training example on two workers of one GPU replica each, beside one process with two
    # replicas: the same global batches, so the same loss and accuracy. With fewer GPUs than
    # workers, each worker presents itself to NCCL as its own host (NCCL refuses two ranks on one
    # GPU of one host) and they talk through NCCL's socket transport.
    if [ $have_gpu = 1 ] && [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
      echo "=== the training example on 2 workers x 1 GPU (mpirun), then on 1 process x 2 replicas"
      gpus=$(nvidia-smi -L | wc -l)
      timeout 300 mpirun --oversubscribe --bind-to none -np 2 bash -c "$one_host_each" "$gpus" "$train" \
        --multi_worker --device=gpu --replicas=1 --epochs=1 --checkpoint=/tmp/gpu_run_fashion_mnist_mw.safetensors ||
        failures+=("train_fashion_mnist --multi_worker --device=gpu on 2 workers")
      timeout 300 "$train" --device=gpu --replicas=2 --epochs=1 --checkpoint=/tmp/gpu_run_fashion_mnist_2.safetensors ||
        failures+=("train_fashion_mnist --device=gpu --replicas=2")
    fi
  fi
fi

echo "=== tests: $passed passed, $skipped skipped, ${#failures[@]} failed"
for f in "${failures[@]}"; do echo "  failed: $f"; done

if want bench; then
  echo "=== gpu_collectives_bench: library against raw NCCL"
  bench="$build/$gpu_bench_program"
  timeout 300 "$bench" --max-bytes 1G || failures+=("gpu_collectives_bench")
  for logical in 2 4; do
    echo "=== gpu_collectives_bench --logical $logical"
    timeout 120 "$bench" --logical "$logical" --max-bytes 256M --factor 4 || failures+=("gpu_collectives_bench --logical $logical")
  done
fi

if want overlap; then
  echo "=== gpu_overlap_bench: async collectives overlapping compute"
  overlap="$build/$gpu_overlap_program"
  timeout 120 "$overlap" || failures+=("gpu_overlap_bench")
  if [ $have_gpu = 1 ] && command -v mpirun >/dev/null; then
    echo "=== gpu_overlap_bench --multi_worker: 2 workers (mpirun), with compression"
    timeout 300 mpirun --oversubscribe --bind-to none -np 2 bash -c "$one_host_each" "$(nvidia-smi -L | wc -l)" \
      "$overlap" --multi_worker --mib=16 --compute_iters=10000 || failures+=("gpu_overlap_bench --multi_worker")
  fi
fi

if want profile; then
  echo "=== gpu_collectives_bench --profile"
  timeout 120 "$build/$gpu_bench_program" --profile --min-bytes 1M --max-bytes 64M || failures+=("gpu_collectives_bench --profile")
fi

[ ${#failures[@]} -eq 0 ]
