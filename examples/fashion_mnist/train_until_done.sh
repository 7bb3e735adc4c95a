#!/usr/bin/env bash
# Runs a training command until it ends for good: while it exits with 42 (distribute's
# kRestartExitCode: preempted, its checkpoint saved), it is relaunched, and resumes from that
# checkpoint. Any other exit code ends the script with that code. What a scheduler's requeue does,
# for a laptop or a plain shell:
#
#   examples/fashion_mnist/train_until_done.sh mpirun -np 2 build/default/examples/fashion_mnist/train_fashion_mnist \
#       --multi_worker --replicas=1 --checkpoint_dir=/tmp/fashion_mnist --checkpoint_every=100
#
# MAX_RELAUNCHES (default 100) bounds the relaunches.
set -u
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
relaunches=0
while true; do
  "$@"
  rc=$?
  [ "$rc" -eq 42 ] || exit "$rc"
  relaunches=$((relaunches + 1))
  if [ "$relaunches" -gt "${MAX_RELAUNCHES:-100}" ]; then
    echo "train_until_done: preempted $relaunches times; giving up" >&2
    exit "$rc"
  fi
  echo "train_until_done: preempted (exit 42), its checkpoint saved; relaunch $relaunches" >&2
done
