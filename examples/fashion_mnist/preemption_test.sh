#!/usr/bin/env bash
# The README's "Surviving preemption", as a test: 2 workers train under train_until_done.sh with
# --checkpoint_dir; a random worker gets SIGTERM at a random moment of the first epoch; the job
# saves, exits 42, is relaunched, resumes mid-epoch and ends with the same final checkpoint, byte
# for byte, and the same accuracy as a run that was never stopped.
#   preemption_test.sh PROGRAM MPIRUN WORK_DIR
set -u
program=$1 mpirun=$2 work=$3
data_dir=/usr/share/datasets/fashion-mnist
if [ ! -f "$data_dir/train-images-idx3-ubyte.gz" ]; then
  echo "skipped: Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)"
  exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAILED: $*"; exit 1; }
args=(--multi_worker --replicas=1 --epochs=3 --train_limit=16384 --checkpoint_every=50 --progress=lines)
job=("$mpirun" --oversubscribe --bind-to none -np 2 "$program" "${args[@]}")

timeout -k 5 300 "${job[@]}" --checkpoint_dir="$work/reference" >"$work/reference.log" 2>&1
rc=$?
cat "$work/reference.log"
[ "$rc" -eq 0 ] || fail "the uninterrupted run exited $rc"

timeout -k 5 300 "$here/train_until_done.sh" "${job[@]}" --checkpoint_dir="$work/preempted" >"$work/preempted.log" 2>&1 &
until_done=$!
# The first periodic checkpoint: the preemption handler is installed on both workers by then (a
# SIGTERM before it is installed ends a worker as SIGTERM does any process). Under a sanitizer on
# a loaded machine the workers can take minutes to get there.
wait_limit=$((SECONDS + 240))
until [ -f "$work/preempted/ckpt.index.json" ]; do
  [ "$SECONDS" -lt "$wait_limit" ] || { kill "$until_done"; wait "$until_done"; cat "$work/preempted.log";
                                        fail "no checkpoint within 240 s, so no SIGTERM was sent"; }
  sleep 0.01
done
sleep "0.$((RANDOM % 4))"
launcher=$(pgrep -P "$(pgrep -P "$until_done" | head -1)" | head -1)
victims=($(pgrep -P "$launcher"))
[ "${#victims[@]}" -eq 2 ] || { kill "$until_done"; fail "found ${#victims[@]} workers under mpirun ($launcher), not 2"; }
victim=${victims[$((RANDOM % 2))]}
echo "SIGTERM to worker process $victim"
kill -TERM "$victim"
wait "$until_done"
rc=$?
cat "$work/preempted.log"
[ "$rc" -eq 0 ] || fail "train_until_done.sh exited $rc"
grep -q "train_until_done: preempted (exit 42)" "$work/preempted.log" || fail "the job was not preempted"
grep -q "^resumed from .* at step" "$work/preempted.log" || fail "the relaunch did not resume"
final() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["latest_checkpoint"])' "$1/ckpt.index.json"; }
[ "$(final "$work/reference")" = "$(final "$work/preempted")" ] || fail "the runs ended at different steps"
cmp "$work/reference/$(final "$work/reference")" "$work/preempted/$(final "$work/preempted")" ||
  fail "the final checkpoints differ"
[ "$(grep '^test accuracy' "$work/reference.log" | cut -d';' -f1)" = "$(grep '^test accuracy' "$work/preempted.log" | cut -d';' -f1)" ] ||
  fail "the final accuracies differ"
echo "PASSED: preempted, relaunched, and bit-identical to the uninterrupted run"
