#!/usr/bin/env bash
# bench/gpu_pack.sh packs the GPU checks for a machine without this project's packages. This runs
# the pack where those packages are hidden (a mount namespace covers Open MPI's, PMIx's, Abseil's,
# hwloc's and libevent's files and the data), as on a bare GPU machine: run.sh's examples must
# pass, and a two-worker MPI job must run from the packed launcher. The GPU paths skip here.
#   gpu_pack_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
unshare -m --propagation private true 2>/dev/null || { echo "skipped: needs mount namespaces (run as root)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$src/bench/gpu_pack.sh" "$build" "$work/pack.tar" || { echo "FAIL: gpu_pack.sh"; exit 1; }
tar -xf "$work/pack.tar" -C "$work" || { echo "FAIL: the archive does not unpack"; exit 1; }

hidden() {
  unshare -m --propagation private bash -c '
    libs=/usr/lib/x86_64-linux-gnu
    for d in $libs/openmpi $libs/pmix2 /usr/share/openmpi /etc/openmpi /usr/share/datasets/fashion-mnist; do
      [ -d "$d" ] && mount -t tmpfs none "$d"
    done
    for f in $libs/libabsl_* $libs/libmpi* $libs/libopen-* $libs/libpmix* $libs/libhwloc* $libs/libevent* \
             /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info /usr/bin/mpirun.openmpi; do
      [ -e "$f" ] && mount --bind /dev/null "$f"
    done
    exec "$@"' hidden "$@"
}

pack=$work/distribute-gpu
log=$(hidden "$pack/run.sh" examples 2>&1)
echo "$log"
for example in quickstart nested_structures merge_call_update train_checkpoint; do
  grep -q "^ok examples/$example$" <<<"$log" || { echo "FAIL: examples/$example did not run from the pack"; exit 1; }
done

# run.sh's environment, then a real job on CPU replicas: the launcher, its plugins and PMIx all
# come from the pack.
job=$(hidden env LD_LIBRARY_PATH="$pack/build/lib" OPAL_PREFIX="$pack/openmpi" PMIX_PREFIX="$pack/pmix" \
  PATH="$pack/openmpi/bin:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$pack/build/tests/multi_worker_test" --local_replicas=1 \
  --gtest_filter='*HalfPrecisionAllReduces*' --gtest_color=no 2>&1)
echo "$job"
[ "$(grep -c '^\[  PASSED  \] 1 test' <<<"$job")" -eq 2 ] || { echo "FAIL: the packed mpirun did not run both workers"; exit 1; }
echo "PASS"
