#!/usr/bin/env bash
# Changes the workers of real elastic jobs (tests/elastic_job.cc) while they train, each job with a
# rendezvous store of its own (a redis-server on a loopback port, or a directory):
#   elastic_test.sh CASE JOB WORK_DIR [TIMEOUT]
# CASE:
#   kill        4 workers; worker 2 sends itself SIGKILL at step 10: the 3 others carry on within
#               the timeout + 2 s, and end with the exact weights of an uninterrupted run
#   stop        4 workers; worker 1 stops (SIGSTOP) at step 10: the others find it silent at the
#               collective timeout and carry on, as above
#   join        2 workers (a file store); a third starts while they train and is let in within 5 s:
#               all three end with the exact weights
#   kill_join   4 workers, worker 3 killed at step 8, and a replacement started a second later:
#               the job ends with 4 workers and the exact weights
#   below_min   2 workers, min_workers 2; worker 1 killed: worker 0 saves the committed state and
#               ends with UnavailableError (exit 3)
#   redis       2 workers; the Redis server is killed while they train: both end with
#               UnavailableError at the same commit and the state is saved (exit 3)
#   full        2 workers, max_workers 2; a third waits for a place and gives up at its
#               rendezvous timeout, while the two finish
#   full_kill   the same, and then worker 1 is killed: worker 0 goes on alone, past the
#               generation the third gave up on
# Each check is by exit code, wall time and the job's own "final ok" (weights bit-identical to a
# reference run). TIMEOUT is the job's collective timeout in seconds (default 3).
set -u
case_name=$1 job=$2 work=$3 timeout_s=${4:-3}
rm -rf "$work" && mkdir -p "$work"
. "$(dirname "$0")/job_processes.sh"
. "$(dirname "$0")/elastic_job_checks.sh"
limit=$((90 + 10 * timeout_s))

fail() {
  echo "FAILED ($case_name): $*"
  for log in "$work"/rank-*.log; do echo "--- $log"; cat "$log"; done
  exit 1
}

use_redis() {
  start_redis "$work" || fail "no redis-server"
  rendezvous="redis://127.0.0.1:$redis_port"
}
use_directory() {
  mkdir -p "$work/store"
  rendezvous="file://$work/store"
}

# start RANK WORLD_SIZE ARGS...: one worker, its output in $work/rank-RANK.log.
start() {
  local rank=$1 world=$2
  shift 2
  RANK=$rank WORLD_SIZE=$world DISTRIBUTE_RENDEZVOUS=$rendezvous DISTRIBUTE_JOB_ID=elastic-$case_name \
    "$job" --timeout=$timeout_s "$@" > "$work/rank-$rank.log" 2>&1 &
  pids[$rank]=$!
}

# expect RANK CODE: waits for worker RANK (up to the limit) and checks its exit code.
expect() {
  local rank=$1 code=$2 waited=0
  while kill -0 "${pids[$rank]}" 2>/dev/null; do
    [ "$waited" -lt $((limit * 10)) ] || fail "worker $rank did not end within $limit s"
    sleep 0.1
    waited=$((waited + 1))
  done
  wait "${pids[$rank]}"
  local rc=$?
  [ "$rc" = "$code" ] || fail "worker $rank exited $rc, expected $code"
}

# started RANK...: waits until each worker is in the job's first generation.
started() {
  local rank waited
  for rank in "$@"; do
    waited=0
    until grep -q "^rank $rank: generation 0" "$work/rank-$rank.log" 2>/dev/null; do
      [ "$waited" -lt $((limit * 10)) ] || fail "worker $rank did not start within $limit s"
      sleep 0.1
      waited=$((waited + 1))
    done
  done
}

# final_ok RANK: the worker's weights are the reference's, bit for bit.
final_ok() { grep -q "rank $1: final ok" "$work/rank-$1.log" || fail "worker $1 did not end with the exact weights"; }

began=$SECONDS
case "$case_name" in
  kill)
    use_redis
    for r in 0 1 2 3; do start $r 4 --steps=40 --min_workers=2 --step_ms=20 --die_worker=2 --die_step=10; done
    expect 2 137
    for r in 0 1 3; do expect $r 0; final_ok $r; recovered_within "$work/rank-$r.log" $r $((timeout_s + 2)); done
    grep -q "generation 1, worker 2 of 3 (was 4); joined \[\], left \[worker 2 on" "$work/rank-3.log" ||
      fail "worker 3 did not report worker 2 gone"
    ;;
  stop)
    use_redis
    for r in 0 1 2 3; do start $r 4 --steps=40 --min_workers=2 --step_ms=20 --stop_worker=1 --stop_step=10; done
    for r in 0 2 3; do expect $r 0; final_ok $r; recovered_within "$work/rank-$r.log" $r $((timeout_s + 2)); done
    kill -0 "${pids[1]}" 2>/dev/null || fail "the stopped worker is gone"
    ;;
  join)
    use_directory
    for r in 0 1; do start $r 2 --steps=100 --min_workers=1 --step_ms=50; done
    started 0 1
    sleep 0.5
    start 2 3 --steps=100 --min_workers=1 --step_ms=50
    for r in 0 1 2; do expect $r 0; final_ok $r; done
    grep -q "rank 2: final ok after 100 steps, 3 workers" "$work/rank-2.log" || fail "the newcomer did not train"
    grep -q "rank 0: generation 1, worker 0 of 3 (was 2); joined \[worker 2 on" "$work/rank-0.log" ||
      fail "worker 0 did not report the newcomer"
    joined_within "$work/rank-2.log" 2 5
    ;;
  kill_join)
    use_redis
    for r in 0 1 2 3; do start $r 4 --steps=100 --min_workers=2 --step_ms=30 --die_worker=3 --die_step=8; done
    expect 3 137
    sleep 1
    start 4 5 --steps=100 --min_workers=2 --step_ms=30
    for r in 0 1 2 4; do expect $r 0; final_ok $r; done
    grep -q "rank 4: final ok after 100 steps, 4 workers" "$work/rank-4.log" || fail "the replacement did not train"
    ;;
  below_min)
    use_redis
    for r in 0 1; do start $r 2 --steps=40 --min_workers=2 --step_ms=20 --die_worker=1 --die_step=10 \
      --save_path="$work/saved.safetensors"; done
    expect 1 137
    expect 0 3
    grep -q "UnavailableError: run_elastic: 1 workers are left and options.elastic.min_workers is 2; the job ends at its commit 10 (step 10); the state of that step was saved to $work/saved.safetensors" \
      "$work/rank-0.log" || fail "worker 0 did not end as below the minimum"
    [ -s "$work/saved.safetensors" ] || fail "nothing was saved"
    ;;
  redis)
    use_redis
    for r in 0 1; do start $r 2 --steps=400 --min_workers=1 --step_ms=10 --save_path="$work/saved.safetensors"; done
    started 0 1
    sleep 0.5
    kill -9 "$redis_pid"
    for r in 0 1; do
      expect $r 3
      grep -q "UnavailableError: ElasticState::commit: the chief could not ask the rendezvous store whether workers wait to join: .*; the job ends at its commit [0-9]* (step [0-9]*); the state of that step was saved to" \
        "$work/rank-$r.log" || fail "worker $r did not end with the store's error"
    done
    commit0=$(sed -n 's/.*the job ends at its commit \([0-9]*\).*/\1/p' "$work/rank-0.log")
    commit1=$(sed -n 's/.*the job ends at its commit \([0-9]*\).*/\1/p' "$work/rank-1.log")
    [ "$commit0" = "$commit1" ] || fail "the workers ended at commits $commit0 and $commit1"
    [ -s "$work/saved.safetensors" ] || fail "nothing was saved"
    ;;
  full)
    use_redis
    for r in 0 1; do start $r 2 --steps=150 --min_workers=1 --max_workers=2 --step_ms=20; done
    started 0 1
    start 2 3 --steps=150 --min_workers=1 --max_workers=2 --step_ms=20 --rendezvous_timeout=2
    for r in 0 1; do expect $r 0; final_ok $r; done
    grep -q "final ok after 150 steps, 2 workers" "$work/rank-0.log" || fail "the job did not stay at 2 workers"
    expect 2 1
    grep -q "DeadlineExceededError\|waited 2000 ms" "$work/rank-2.log" || fail "the third worker did not give up"
    ;;
  full_kill)
    use_redis
    for r in 0 1; do start $r 2 --steps=350 --min_workers=1 --max_workers=2 --step_ms=20 --die_worker=1 --die_step=300; done
    started 0 1
    start 2 3 --steps=350 --min_workers=1 --max_workers=2 --step_ms=20 --rendezvous_timeout=2
    expect 2 1
    expect 1 137
    expect 0 0
    final_ok 0
    grep -q "rank 0: final ok after 350 steps, 1 workers" "$work/rank-0.log" || fail "worker 0 did not go on alone"
    grep -q "rank 0: generation 2, worker 0 of 1 (was 2); joined \[\], left \[worker 1 on" "$work/rank-0.log" ||
      fail "worker 0 did not report worker 1 gone in generation 2"
    ;;
  *)
    echo "elastic_test.sh: unknown case $case_name" >&2
    exit 2
    ;;
esac
echo "PASSED ($case_name) in $((SECONDS - began)) s"
