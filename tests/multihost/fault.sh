#!/usr/bin/env bash
# A fault across hosts (ctest's multihost_fault_*): runs multihost_fault as 2 hosts x 2 workers x
# 1 replica (workers 0, 1 on host0; 2, 3 on host1), breaks host1 while the job runs, and passes
# when the workers on host0 end within ENDS seconds of the fault and the job (mpirun) exits
# non-zero within ENDS + 10, with nothing of it left on host0, and its output matches EXPECT (an
# extended regular expression). Exits 77 (a skip) where the hosts cannot be made.
#
#   tests/multihost/fault.sh CASE PROGRAM [TIMEOUT [gloo]]
#
#   case          what happens to host1                                  ENDS
#   link_mid      its link goes down in the middle of a 64 MiB all_reduce  TIMEOUT + 5
#   link_between  its link goes down between two steps (2 s apart): the    2 + TIMEOUT + 5
#                 next collective's agreement meets it
#   kill_host     every process of it (its daemon and workers) is killed   5
#                 in the middle of a 64 MiB all_reduce
#   relaunch      link_mid, then the link back up: a relaunch on the same  TIMEOUT + 5
#                 hosts works, and once it ends nothing is left on them
#                 (processes, sockets, shared memory, session files)
#   stop_host     (gloo only) its workers are stopped (SIGSTOP) in the      TIMEOUT + 5
#                 middle of a 64 MiB all_reduce: alive, connected, silent;
#                 once host0's have ended the test kills them, which ends
#                 the job
#
# TIMEOUT is the job's collective timeout in seconds (default 3). With `gloo` the job is plain
# processes over Gloo (hosts_gloo) instead of mpirun's: each worker on host0 ends on its own, with
# the report of the step that failed, and the job's status is the first failing worker's.
set -euo pipefail
source "$(dirname "$0")/hosts_lib.sh"

case=$1 program=$2 timeout=${3:-3} backend=${4:-mpi}
case $case in
  link_mid | relaunch)
    # The link may go down while a worker of host0 still agrees on the next call with those of
    # host1 (worker 0 is streaming, the others a step behind): its agreement then times out first,
    # naming the workers of host1 that did not arrive, and the others end the job on its note.
    mode=stream marker=streaming ends=$((timeout + 5))
    expect="stalled past its timeout .*workers 2, 3 on host1 did not answer|timed out after $timeout s: workers? [0-9, ]+ on host1 \\(replicas? [0-9, ]+\\) did not arrive" ;;
  link_between)
    mode=pause marker="paused between steps" ends=$((2 + timeout + 5))
    expect="timed out after $timeout s: workers 2, 3 on host1 \\(replicas 2, 3\\) did not arrive" ;;
  kill_host) mode=stream marker=streaming ends=5 expect="Remote daemon: .* on node host1" ;;
  stop_host)
    [ "$backend" = gloo ] || { echo "fault.sh: stop_host is a case of the gloo backend only" >&2; exit 2; }
    mode=stream marker=streaming ends=$((timeout + 5)) ;;
  *) echo "fault.sh: unknown case '$case' (see the comment at the top of $0)" >&2; exit 2 ;;
esac
launch=hosts_mpirun
if [ "$backend" = gloo ]; then
  # No daemon to lose: host0's workers find host1's gone in the step that meets it, a data phase
  # (naming the peers that did not answer) or the agreement before one.
  launch=hosts_gloo
  gone="workers? [0-9, ]+ on host1[ ,].*(did not answer|did not arrive)|(timed out after $timeout s|failed): workers? [0-9, ]+ on host1"
  case $case in
    link_mid | relaunch | kill_host | stop_host) expect=$gone ;;
  esac
fi

hosts_up 2 2 10
# mpirun ends a job only once every daemon has confirmed, and waits for one it cannot reach until
# TCP gives up on the connection: about 15 minutes with Linux's default tcp_retries2 of 15. The
# head node, where mpirun runs, gives up after 3 retries (3 to 6 s) instead.
ip netns exec "$HOSTS_ID-head" sh -c 'echo 3 >/proc/sys/net/ipv4/tcp_retries2'
log=$DISTRIBUTE_HOSTS_DIR/job.log

now_ms() {
  echo $((${EPOCHREALTIME/./} / 1000))
}

# How many workers still run on host0: its processes running the program's file (their command
# names, /proc/PID/comm, are cut to 15 characters).
program_file=$(readlink -f "$program")
workers_on_host0() {
  local pid count=0
  for pid in $(ip netns pids "$HOSTS_ID-host0"); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" != "$program_file" ] || count=$((count + 1))
  done
  echo "$count"
}

# Milliseconds as seconds, to a tenth.
seconds() {
  echo "$(($1 / 1000)).$(($1 % 1000 / 100)) s"
}

fail() {
  echo "--- job output"
  cat "$log"
  echo "FAILED: $*" >&2
  exit 1
}

"$launch" "$program" "$mode" --timeout="$timeout" >"$log" 2>&1 &
job=$!
start=$(now_ms)
until grep -q "$marker" "$log"; do
  kill -0 "$job" 2>/dev/null || fail "the job ended before it was ${marker}"
  (($(now_ms) - start < 120000)) || fail "the job was not ${marker} after 120 s"
  sleep 0.05
done

case $case in
  kill_host) hosts_kill 1 ;;
  stop_host) hosts_signal 1 STOP ;;
  *) hosts_link 1 down ;;
esac
fault=$(now_ms)
limit=$((ends + 10))
workers_ended=
while kill -0 "$job" 2>/dev/null && (($(now_ms) - fault < limit * 1000)); do
  if [ -z "$workers_ended" ] && (($(workers_on_host0) == 0)); then
    workers_ended=$(($(now_ms) - fault))
    # Stopped workers never end on their own.
    [ "$case" != stop_host ] || hosts_kill 1
  fi
  sleep 0.1
done
job_ended=$(($(now_ms) - fault))
kill -0 "$job" 2>/dev/null && fail "the job still runs $limit s after host1's fault: it hangs"
[ -n "$workers_ended" ] || workers_ended=$job_ended
rc=0
wait "$job" || rc=$?
echo "host0's workers ended $(seconds "$workers_ended") after host1's fault (limit $ends s); the job exited" \
  "with $rc after $(seconds "$job_ended") (limit $limit s)"
((workers_ended <= ends * 1000)) || fail "host0's workers took longer than $ends s to end"
((rc != 0)) || fail "the job exited 0; host1's fault should have ended it"
grep -Eq "$expect" "$log" || fail "the job's output does not match '$expect'"
[ -z "$(ip netns pids "$HOSTS_ID-host0")" ] || fail "processes are left on host0: $(ip netns pids "$HOSTS_ID-host0")"

if [ "$case" = relaunch ]; then
  hosts_link 1 up
  # A timeout that a busy machine never reaches: what counts here is that the job works.
  "$launch" "$program" ok --timeout=60 >"$log" 2>&1 || fail "the relaunch failed"
  [ "$(grep -c ": ok" "$log")" -eq 4 ] || fail "the relaunch did not say ok from every worker"
  # host1's daemon of the first job learns that mpirun is gone once its link is back up.
  start=$(now_ms)
  while [ -n "$(hosts_leftovers)" ]; do
    (($(now_ms) - start < 30000)) || fail "left on the hosts 30 s after the relaunch: $(hosts_leftovers)"
    sleep 0.5
  done
  echo "the relaunch worked; nothing was left on the hosts $(($(now_ms) - start)) ms after it"
fi
echo "--- job output"
cat "$log"
