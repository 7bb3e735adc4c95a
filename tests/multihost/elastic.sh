#!/usr/bin/env bash
# An elastic job across hosts (ctest's multihost_elastic_*): tests/elastic_job as 2 hosts x 2
# workers x 1 replica over Gloo (hosts_gloo: workers 0, 1 on host0; 2, 3 on host1; the store on
# the head), min_workers 2, while something happens to it. Passes when the workers that should go
# on end with weights bit-identical to an uninterrupted run ("final ok"), within the bounds below,
# and nothing is left on the hosts. Exits 77 (a skip) where the hosts cannot be made.
#
#   tests/multihost/elastic.sh CASE JOB [TIMEOUT]
#
#   case    what happens                                       expected
#   kill    worker 3 sends itself SIGKILL at step 20           workers 0-2 go on within TIMEOUT + 2 s
#   stop    worker 3 stops itself (SIGSTOP) at step 20         workers 0-2 go on within TIMEOUT + 2 s;
#                                                              the stopped one is then killed
#   link    host1's link goes down while the job trains        workers 0, 1 go on within TIMEOUT + 2 s;
#                                                              host1's are then killed
#   add     a fifth worker starts on host1 during training     it joins within 5 s; all 5 end alike
#   redis   the head's redis-server is killed while it trains  every worker ends with UnavailableError at
#                                                              one commit, the state saved
# TIMEOUT is the job's collective timeout in seconds (default 3).
set -euo pipefail
source "$(dirname "$0")/hosts_lib.sh"
source "$(dirname "$0")/../elastic_job_checks.sh"

case=$1 job=$2 timeout=${3:-3}
hosts_up 2 2 10
log=$DISTRIBUTE_HOSTS_DIR/job.log
saved=$DISTRIBUTE_HOSTS_TMP/head/saved.safetensors

fail() {
  echo "--- job output"
  cat "$log" "$log.extra" 2>/dev/null || true
  echo "FAILED ($case): $*" >&2
  exit 1
}

# wait_for PATTERN SECONDS: returns once PATTERN (extended) matches the log, fails after SECONDS.
wait_for() {
  local pattern=$1 seconds=$2 waited=0
  until grep -Eq "$pattern" "$log"; do
    ((waited < seconds * 10)) || fail "no '$pattern' in the log after $seconds s"
    sleep 0.1
    waited=$((waited + 1))
  done
}

args=(--timeout="$timeout" --min_workers=2 --save_path="$saved")
status=0
case $case in
  kill)
    hosts_gloo "$job" "${args[@]}" --steps=60 --step_ms=20 --die_worker=3 --die_step=20 >"$log" 2>&1 || status=$?
    ((status == 137)) || fail "the job exited $status, where worker 3's SIGKILL (137) comes first"
    for r in 0 1 2; do
      grep -q "^rank $r: final ok after 60 steps, 3 workers" "$log" || fail "worker $r did not end with the weights"
      recovered_within "$log" $r $((timeout + 2))
    done
    ;;
  stop)
    hosts_gloo "$job" "${args[@]}" --steps=100 --step_ms=20 --stop_worker=3 --stop_step=20 >"$log" 2>&1 &
    launch=$!
    for r in 0 1 2; do
      wait_for "^rank $r: final ok after 100 steps, 3 workers" $((timeout + 120))
      recovered_within "$log" $r $((timeout + 2))
    done
    for pid in $(ip netns pids "$HOSTS_ID-host1"); do
      [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != T ] || kill -9 "$pid"
    done
    wait "$launch" || true
    ;;
  link)
    hosts_gloo "$job" "${args[@]}" --steps=200 --step_ms=20 >"$log" 2>&1 &
    launch=$!
    wait_for "^rank 0: generation 0" 60
    sleep 1
    hosts_link 1 down
    for r in 0 1; do
      wait_for "^rank $r: final ok after 200 steps, 2 workers" $((timeout + 120))
      recovered_within "$log" $r $((timeout + 2))
    done
    hosts_kill 1
    wait "$launch" || true
    ;;
  add)
    hosts_gloo "$job" "${args[@]}" --steps=150 --step_ms=20 >"$log" 2>&1 &
    launch=$!
    wait_for "^rank 0: generation 0" 60
    sleep 0.5
    "$hosts_lib_dir/rsh_agent.sh" host1 env RANK=4 WORLD_SIZE=5 DISTRIBUTE_RENDEZVOUS=redis://192.0.2.1:6379 \
      GLOO_SOCKET_IFNAME=eth0 "$job" "${args[@]}" --steps=150 --step_ms=20 >"$log.extra" 2>&1 || fail "the fifth worker failed"
    wait "$launch" || fail "the job failed"
    cat "$log.extra" >>"$log"
    for r in 0 1 2 3 4; do
      grep -q "^rank $r: final ok after 150 steps, 5 workers" "$log" || fail "worker $r did not end with 5 workers"
    done
    joined_within "$log" 4 5
    ;;
  redis)
    hosts_gloo "$job" "${args[@]}" --steps=100000 --step_ms=5 >"$log" 2>&1 &
    launch=$!
    wait_for "^rank 0: generation 0" 60
    sleep 1
    pkill -9 -f "redis-server 192.0.2.1:6379" || fail "no redis-server to kill"
    wait "$launch" || status=$?
    echo "the job exited $status"
    ((status == 3)) || fail "the job exited $status, not 3 (UnavailableError)"
    commits=$(sed -n 's/.*the job ends at its commit \([0-9]*\) .*/\1/p' "$log" | sort -u)
    [ "$(grep -c "UnavailableError: ElasticState::commit: the chief could not ask the rendezvous store" "$log")" = 4 ] ||
      fail "not every worker ended with the store's error"
    [ "$(echo "$commits" | wc -l)" = 1 ] || fail "the workers ended at different commits: $commits"
    [ -s "$saved" ] || fail "nothing was saved"
    ;;
  *) echo "elastic.sh: unknown case '$case' (see the comment at the top of $0)" >&2; exit 2 ;;
esac
echo "PASSED ($case)"
