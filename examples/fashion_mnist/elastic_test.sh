#!/usr/bin/env bash
# The training example as an elastic job (--elastic), as docs/multi_worker.md shows it: 3 workers
# started as plain processes meet at a redis-server of the test's own; one is killed (SIGKILL) in
# the middle of training, the other two carry on from the last step without a restart, and their
# final test accuracy is within 0.5 points of the same job's when nobody is killed.
#   elastic_test.sh PROGRAM WORK_DIR [TRAIN_LIMIT]
# TRAIN_LIMIT: the training images (6000 by default: 3 epochs of about 2 s on 2 cores).
set -u
program=$1 work=$2 train_limit=${3:-6000}
data_dir=/usr/share/datasets/fashion-mnist
if [ ! -e "$data_dir/train-images-idx3-ubyte.gz" ]; then
  echo "skipped: Fashion-MNIST is not installed in $data_dir (apt-get install dataset-fashion-mnist)"
  exit 0
fi
rm -rf "$work" && mkdir -p "$work"
. "$(dirname "$0")/../../tests/job_processes.sh"
fail() {
  echo "FAILED: $*"
  for log in "$work"/*.log; do echo "--- $log"; cat "$log"; done
  exit 1
}

# job NAME KILL: 3 workers of an elastic job; with KILL=1, worker 2 is killed once worker 0 has
# finished its first epoch. Prints the job's final accuracy.
job() {
  local name=$1 kill=$2
  start_redis "$work" || fail "no redis-server"
  pids=()
  for r in 0 1 2; do
    RANK=$r WORLD_SIZE=3 DISTRIBUTE_RENDEZVOUS=redis://127.0.0.1:$redis_port DISTRIBUTE_JOB_ID=$name \
      stdbuf -oL "$program" --data_dir="$data_dir" --elastic=2:3 --replicas=1 --epochs=3 --train_limit="$train_limit" \
      --progress=lines --checkpoint="$work/$name.safetensors" > "$work/$name-$r.log" 2>&1 &
    pids[$r]=$!
  done
  if [ "$kill" = 1 ]; then
    for _ in $(seq 3000); do
      grep -q "^epoch 1/3" "$work/$name-0.log" && break
      kill -0 "${pids[0]}" 2>/dev/null || break
      sleep 0.1
    done
    sleep 0.3
    kill -9 "${pids[2]}"
  fi
  for r in 0 1; do wait "${pids[$r]}" || fail "$name: worker $r exited $?"; done
  wait "${pids[2]}"
  kill -9 "$redis_pid"
  wait "$redis_pid" 2>/dev/null
  redis_pid=""
}

job whole 0
whole=$(sed -n 's/^test accuracy \([0-9.]*\) after 3 epochs.*/\1/p' "$work/whole-0.log")
[ -n "$whole" ] || fail "the uninterrupted job printed no accuracy"
started=$SECONDS
job killed 1
grep -q "^workers changed: generation 1, 2 workers (were 3); joined \[\], left \[worker 2 on " "$work/killed-0.log" ||
  fail "worker 0 did not report worker 2 gone"
killed=$(sed -n 's/^test accuracy \([0-9.]*\) after 3 epochs.*/\1/p' "$work/killed-0.log")
[ -n "$killed" ] || fail "the job that lost a worker printed no accuracy"
echo "test accuracy: $whole uninterrupted, $killed after losing a worker ($((SECONDS - started)) s, $train_limit images)"
awk -v a="$whole" -v b="$killed" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }' ||
  fail "the accuracies differ by more than 0.5 points"
echo "PASSED"
