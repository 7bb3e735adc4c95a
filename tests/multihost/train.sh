#!/usr/bin/env bash
# The training example on two hosts against one (ctest's multihost_train): trains with
# `PROGRAM --multi_worker ARGS` as 2 workers on one host (plain mpirun) and as 1 worker on each of
# 2 hosts (hosts.sh), and passes when both print the same losses and test accuracies and save the
# same checkpoint, byte for byte. Exits 77 (a skip) without the dataset or where the hosts cannot
# be made.
#
#   tests/multihost/train.sh PROGRAM WORK_DIR [ARGS...]
#
# WORK_DIR holds the checkpoints: a directory both hosts see, as a cluster's shared file system
# (each host's TMPDIR is its own).
set -euo pipefail
here=$(dirname "$0")
program=$1 work=$2
shift 2
data=/usr/share/datasets/fashion-mnist
[ -e "$data/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no Fashion-MNIST in $data (Debian: dataset-fashion-mnist)" >&2; exit 77; }
mkdir -p "$work"
rm -f "$work"/one_host.* "$work"/two_hosts.*

# The epochs' losses and accuracies, without the speeds, and the last line.
results() {
  grep -aoE "epoch [0-9]+/[0-9]+: loss [0-9.]+, test accuracy [0-9.]+|test accuracy [0-9.]+ after [0-9]+ epochs" "$1"
}

mpirun -np 2 --oversubscribe --bind-to none "$program" --multi_worker "$@" --checkpoint="$work/one_host.safetensors" \
  >"$work/one_host.log" 2>&1 || { cat "$work/one_host.log"; echo "FAILED: the one-host run failed" >&2; exit 1; }
rc=0
"$here/hosts.sh" --hosts 2 --slots 1 --timeout 240 -- "$program" --multi_worker "$@" --checkpoint="$work/two_hosts.safetensors" \
  >"$work/two_hosts.log" 2>&1 || rc=$?
cat "$work/two_hosts.log"
((rc != 77)) || exit 77
((rc == 0)) || { echo "FAILED: the two-host run exited $rc" >&2; exit 1; }

echo "--- one host:"
results "$work/one_host.log"
echo "--- two hosts:"
results "$work/two_hosts.log"
[ -n "$(results "$work/one_host.log")" ] || { echo "FAILED: the one-host run printed no results" >&2; exit 1; }
diff <(results "$work/one_host.log") <(results "$work/two_hosts.log") >/dev/null ||
  { echo "FAILED: the two hosts trained to other losses or accuracies than one host" >&2; exit 1; }
cmp "$work/one_host.safetensors" "$work/two_hosts.safetensors" ||
  { echo "FAILED: the two hosts' checkpoint differs from one host's" >&2; exit 1; }
echo "the same losses, accuracies and weights on two hosts as on one"
