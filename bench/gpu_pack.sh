#!/usr/bin/env bash
# Packs what bench/gpu_run.sh needs into one archive, for a GPU machine that has the NVIDIA driver
# but neither this project's build tools nor its Debian packages (a cluster's compute node, a
# rented GPU box): the programs gpu_run.sh runs (stripped), the shared libraries they load beyond
# the C and C++ runtimes and NCCL/cuBLAS (Abseil, Open MPI, hwloc, libevent, zlib, the CUDA
# runtime they were built with), Open MPI's launcher with its plugins and help files, and
# Fashion-MNIST when it is installed. NCCL and cuBLAS are large and come from the GPU machine (its
# CUDA libraries, or PyTorch's NVIDIA wheels, which gpu_run.sh finds).
#
#   bench/gpu_pack.sh [BUILD_DIR [ARCHIVE]]      defaults: build/default, .gpu/distribute-gpu.tar.xz
#
# On the GPU machine (as root, for the data's standard path):
#   tar -xJf distribute-gpu.tar.xz -C /tmp && /tmp/distribute-gpu/run.sh [SECTION...]
# run.sh puts the data where the examples read it (unless it is there), points Open MPI at its
# packed copy and runs gpu_run.sh over the packed build directory; SECTIONs as for gpu_run.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-build/default}
archive=${2:-.gpu/distribute-gpu.tar.xz}
source "$here/gpu_programs.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/distribute-gpu
mkdir -p "$root/build/lib" "$root/bench"

for program in "${gpu_all_programs[@]}"; do
  [ -x "$build/$program" ] || { echo "gpu_pack: $build/$program is not built" >&2; exit 1; }
  mkdir -p "$root/build/$(dirname "$program")"
  strip -o "$root/build/$program" "$build/$program"
done
cp "$here/gpu_run.sh" "$here/gpu_programs.sh" "$root/bench/"

# Copies into build/lib the shared libraries that the given programs or plugins load, but for the
# C and C++ runtimes (every Linux with CUDA has them, and the machine's own are at least as new as
# the ones NCCL's and cuBLAS's builds need) and NCCL and cuBLAS.
pack_libraries_of() {
  local skip='^(linux-vdso|ld-linux|lib(c|m|dl|pthread|rt|stdc\+\+|gcc_s|atomic)\.so|libnccl\.so|libcublas)'
  local name path
  for object in "$@"; do
    ldd "$object" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
  done | sort -u | while read -r name path; do
    [[ $name =~ $skip ]] || [ -e "$root/build/lib/$name" ] || cp -L "$path" "$root/build/lib/$name"
  done
}
programs=()
for program in "${gpu_all_programs[@]}"; do programs+=("$build/$program"); done
pack_libraries_of "${programs[@]}"

# Open MPI, relocated: OPAL_PREFIX replaces its /usr prefix, so its launcher, plugins and help
# files go where they sit under /usr. PMIx, which its plugins load, has plugins and help files of
# its own (PMIX_PREFIX).
if command -v ompi_info >/dev/null; then
  ompi=$root/openmpi
  pkglibdir=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
  pkgdatadir=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
  prefix=$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')
  mkdir -p "$ompi/bin" "$ompi/${pkglibdir#"$prefix"/}" "$ompi/${pkgdatadir#"$prefix"/}"
  for tool in orterun orted; do cp -L "$(command -v $tool)" "$ompi/bin/"; done
  ln -s orterun "$ompi/bin/mpirun"
  cp -rL "$pkglibdir/." "$ompi/${pkglibdir#"$prefix"/}/"
  cp -rL "$pkgdatadir/." "$ompi/${pkgdatadir#"$prefix"/}/"
  pack_libraries_of "$ompi/bin/orterun" "$pkglibdir"/*.so
  pmix=$(ldd "$pkglibdir"/*.so 2>/dev/null | awk '$1 ~ /^libpmix\.so/ { path = $3 } END { print path }')
  if [ -n "$pmix" ]; then
    pmix_prefix=$(dirname "$(dirname "$(readlink -f "$pmix")")")
    mkdir -p "$root/pmix/lib"
    [ -d "$pmix_prefix/lib/pmix" ] && cp -rL "$pmix_prefix/lib/pmix" "$root/pmix/lib/"
    [ -d "$pmix_prefix/share" ] && cp -rL "$pmix_prefix/share" "$root/pmix/"
    shopt -s nullglob
    pack_libraries_of "$root"/pmix/lib/pmix/*.so
    shopt -u nullglob
  fi
fi

data=/usr/share/datasets/fashion-mnist
if [ -e "$data/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$root/data"
  cp "$data"/*.gz "$root/data/"
else
  echo "gpu_pack: $data is not installed: the training sections will skip (apt-get install dataset-fashion-mnist)" >&2
fi

cat >"$root/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs bench/gpu_run.sh over this packed build (see bench/gpu_pack.sh).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
data=/usr/share/datasets/fashion-mnist
if [ -d "$here/data" ] && [ ! -e "$data/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$data" && cp "$here/data"/*.gz "$data/" || echo "run.sh: could not place the data in $data" >&2
fi
# The packed launcher, whatever the machine has: it matches the packed MPI library.
if [ -d "$here/openmpi" ]; then
  export OPAL_PREFIX=$here/openmpi PATH=$here/openmpi/bin:$PATH
  [ -d "$here/pmix" ] && export PMIX_PREFIX=$here/pmix
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$here/bench/gpu_run.sh" "$here/build" "$@"
RUN
chmod +x "$root/run.sh"

mkdir -p "$(dirname "$archive")"
tar -C "$work" -caf "$archive" distribute-gpu  # compressed as its suffix says (.tar.xz, .tar)
echo "gpu_pack: $archive ($(du -h "$archive" | cut -f1)), $(find "$root/build/lib" -type f | wc -l) libraries"
