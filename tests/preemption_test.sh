#!/usr/bin/env bash
# Kills real training jobs (tests/preemption_job.cc) and relaunches them, as a cluster does:
#   preemption_test.sh CASE JOB MPIRUN WORK_DIR
# CASE:
#   term1, term0   2 workers x 2 replicas; SIGTERM to worker 1 (or 0) at a random step: the job
#                  saves that step and exits 42, and the relaunch ends bit-identical to a run that
#                  never stopped
#   term_both      SIGTERM to both workers at once: one save
#   kill1          SIGKILL to worker 1 (no warning): the job ends non-zero; the relaunch resumes
#                  from the latest periodic checkpoint and ends bit-identical
#   kill_chief_in_save  SIGKILL to the chief while it writes a large checkpoint: the index and the
#                  files it lists are intact, and the relaunch resumes from the last complete one
#   single         one process (MirroredStrategy, 2 replicas): SIGTERM, 42, relaunch, identical
#   rescale        saved by 2 workers x 2 replicas, resumed by 1 worker x 3 replicas
set -u
case_name=$1 job=$2 mpirun=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
steps=40
step=$((5 + RANDOM % 30))
limit=120

fail() { echo "FAILED ($case_name): $*"; exit 1; }

# launch NAME WORKERS REPLICAS ARGS...: runs the job (under mpirun when WORKERS > 0), its output in
# $work/NAME.log; sets rc and seconds.
launch() {
  local name=$1 workers=$2 replicas=$3
  shift 3
  local start=$SECONDS
  if [ "$workers" -gt 0 ]; then
    timeout -k 5 "$limit" "$mpirun" --oversubscribe --bind-to none -np "$workers" "$job" \
      --local_replicas="$replicas" --steps="$steps" "$@" >"$work/$name.log" 2>&1
  else
    timeout -k 5 "$limit" "$job" --local_replicas="$replicas" --steps="$steps" "$@" >"$work/$name.log" 2>&1
  fi
  rc=$?
  seconds=$((SECONDS - start))
  echo "--- $name: exit $rc after $seconds s"
  cat "$work/$name.log"
  [ "$rc" -ne 124 ] && [ "$seconds" -lt "$limit" ] || fail "$name did not end within $limit s"
}

expect_rc() { [ "$rc" -eq "$1" ] || fail "$2 exited $rc, not $1"; }
resumed_at() { grep -o 'worker 0 resumed at step [0-9]*' "$work/$1.log" | grep -o '[0-9]*$'; }
same_weights() { cmp -s "$work/$1" "$work/$2" || fail "the weights of $1 and $2 differ"; }

# preempt_and_resume NAME WORKERS REPLICAS TERM_WORKERS
preempt_and_resume() {
  local workers=$2 replicas=$3 term=$4
  launch reference "$workers" "$replicas" --dir="$work/reference" --out="$work/reference.bin"
  expect_rc 0 "the uninterrupted run"
  echo "SIGTERM to worker(s) $term before step $step"
  launch preempted "$workers" "$replicas" --dir="$work/ckpt" --out="$work/unused.bin" --term_workers="$term" \
    --term_step="$step"
  expect_rc 42 "the preempted run"
  local files
  files=$(ls "$work/ckpt"/ckpt-*.safetensors | wc -l)
  [ "$files" -eq 1 ] || fail "the preempted run left $files checkpoints, not one"
  [ -f "$work/ckpt/ckpt-$((step + 1)).safetensors" ] || fail "no checkpoint of step $((step + 1))"
  launch relaunched "$workers" "$replicas" --dir="$work/ckpt" --out="$work/relaunched.bin"
  expect_rc 0 "the relaunched run"
  [ "$(resumed_at relaunched)" = $((step + 1)) ] || fail "the relaunch did not resume at step $((step + 1))"
  same_weights reference.bin relaunched.bin
  [ "$(grep '^seen' "$work/reference.log")" = "$(grep '^seen' "$work/relaunched.log")" ] ||
    fail "the sync-on-read count differs"
}

case "$case_name" in
  term1) preempt_and_resume x 2 2 1 ;;
  term0) preempt_and_resume x 2 2 0 ;;
  term_both) preempt_and_resume x 2 2 0,1 ;;
  single) preempt_and_resume x 0 2 0 ;;
  kill1)
    launch reference 2 2 --dir="$work/reference" --out="$work/reference.bin"
    expect_rc 0 "the uninterrupted run"
    echo "SIGKILL to worker 1 before step $step"
    launch killed 2 2 --dir="$work/ckpt" --out="$work/unused.bin" --checkpoint_every=4 --kill_worker=1 \
      --kill_step="$step"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 42 ] || fail "the killed job exited $rc"
    launch relaunched 2 2 --dir="$work/ckpt" --out="$work/relaunched.bin" --checkpoint_every=4
    expect_rc 0 "the relaunched run"
    resumed=$(resumed_at relaunched)
    [ "$resumed" -gt 0 ] && [ "$resumed" -le "$step" ] || fail "resumed at $resumed, not at a checkpoint before $step"
    same_weights reference.bin relaunched.bin
    ;;
  kill_chief_in_save)
    # 16M parameters with Adam's two slots: a 192 MiB file, whose write the chief is killed in.
    big=(--size=16777216 --checkpoint_every=2 --dir="$work/ckpt" --out="$work/unused.bin")
    "$mpirun" --oversubscribe --bind-to none -np 2 "$job" --local_replicas=1 --steps=1000 "${big[@]}" \
      >"$work/killed.log" 2>&1 &
    launcher=$!
    # The second save's temporary file: the first checkpoint and its index are complete. A
    # sanitizer build on a loaded machine can take minutes to get there.
    wait_limit=$((SECONDS + 200))
    until ls "$work/ckpt" 2>/dev/null | grep -q '^ckpt-3\.safetensors\.tmp\.' || [ "$SECONDS" -ge "$wait_limit" ]; do
      sleep 0.01
    done
    chief=$(ls "$work/ckpt" | grep -o '^ckpt-3\.safetensors\.tmp\.[0-9]*' | head -1 | sed 's/.*tmp\.//')
    [ -n "$chief" ] || { kill -9 "$launcher"; fail "the chief never wrote a second checkpoint"; }
    kill -9 "$chief"
    wait "$launcher"
    echo "--- killed the chief (pid $chief) while it wrote ckpt-3: mpirun exited $?"
    cat "$work/killed.log"
    python3 - "$work/ckpt" <<'PY' || fail "the index is not intact"
import json, os, sys
d = sys.argv[1]
index = json.load(open(os.path.join(d, "ckpt.index.json")))
assert index["all_checkpoints"] == ["ckpt-1.safetensors"], index
assert index["latest_checkpoint"] == "ckpt-1.safetensors", index
print("index intact:", index)
PY
    launch relaunched 2 1 --size=16777216 --steps=2 --dir="$work/ckpt" --out="$work/relaunched.bin"
    expect_rc 0 "the relaunched run"
    [ "$(resumed_at relaunched)" = 1 ] || fail "the relaunch did not resume from ckpt-1"
    ! grep -q "falling back" "$work/relaunched.log" || fail "the relaunch passed over a listed checkpoint"
    ;;
  rescale)
    launch preempted 2 2 --dir="$work/ckpt" --out="$work/unused.bin" --term_workers=1 --term_step="$step"
    expect_rc 42 "the preempted run"
    launch relaunched 1 3 --dir="$work/ckpt" --out="$work/relaunched.bin"
    expect_rc 0 "the relaunched run"
    [ "$(resumed_at relaunched)" = $((step + 1)) ] || fail "the relaunch did not resume at step $((step + 1))"
    expected=$(((step + 1) * 4 + (steps - step - 1) * 3))
    grep -qx "seen $expected" "$work/relaunched.log" || fail "the sync-on-read count is not $expected"
    ;;
  *) fail "unknown case" ;;
esac
echo "PASSED ($case_name)"
