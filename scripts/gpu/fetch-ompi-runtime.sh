#!/usr/bin/env bash
# Build the relocatable Open MPI runtime .ompi that scripts/gpu/gpu-check.sh uses on the GPU
# machine (which has no Open MPI); `source scripts/gpu/gpu-mpi-env.sh` there points PATH,
# LD_LIBRARY_PATH, OPAL_PREFIX, PMIX_* at it so that `mpiexec -n 2 ...` works.
#
# Usage: scripts/gpu/fetch-ompi-runtime.sh [DEST]    (DEST defaults to <repo>/.ompi)
#
# Run it on Debian 12 (bookworm) amd64: it `apt-get download`s the Open MPI 4.1.4
# runtime packages and unpacks them with `dpkg -x` (nothing gets installed; root is
# only needed if `apt-get update` must run). Result (about 18 MiB, no symlinks):
#   DEST/root/{etc,lib,usr}/...    Open MPI, PMIx, hwloc, libevent, libfabric, UCX, verbs...
#   DEST/fallback/<lib>/<soname>   zlib, libudev, libuuid, libatomic: base-system libraries
#                                  that gpu-mpi-env.sh uses only where the machine lacks them
# Dropped: docs, man pages, compiler wrappers, the Fortran/Java/OpenSHMEM libraries and
# plugins, the ibverbs driver plugins (libefa/libmlx5 stay: libfabric and UCX link them).
# Symlinks become regular files (a copied tree may not keep links), and pmix's
# hard-coded /usr plugin path is commented out. Running it again rebuilds DEST from scratch.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="$(realpath -ms "${1:-$repo/.ompi}")"   # absolute, "." and ".." resolved
die() { echo "fetch-ompi-runtime.sh: $*" >&2; exit 1; }

pkgs=(openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7
      libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1
      libpsm-infinipath1 libpsm2-2 libnuma1 libnl-3-200 libnl-route-3-200 libmunge2)
fallback=(zlib1g:libz libudev1:libudev libuuid1:libuuid libatomic1:libatomic)   # package:library

# Only ever delete an earlier result: a DEST holding nothing but root/ and fallback/.
if [ -e "$dest" ] && { [ ! -d "$dest" ] ||
    [ -n "$(find "$dest" -mindepth 1 -maxdepth 1 ! -name root ! -name fallback)" ]; }; then
    die "$dest exists and is not an earlier .ompi tree (only root/ and fallback/); not deleting it"
fi
rm -rf "$dest"
mkdir -p "$dest/root"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
all=("${pkgs[@]}" "${fallback[@]%%:*}")
# (Sandbox::User=root: as root, apt would warn that user _apt cannot write into $tmp.)
get() { apt-get download -qq -o APT::Sandbox::User=root "${all[@]}"; }
if ! get; then
    echo "apt-get download failed; running apt-get update and retrying" >&2
    apt-get update -qq
    get
fi

for p in "${pkgs[@]}"; do dpkg -x "$p"_*.deb "$dest/root"; done
for f in "${fallback[@]}"; do
    pkg="${f%%:*}" lib="${f#*:}"
    dpkg -x "$pkg"_*.deb "x-$pkg"
    mkdir -p "$dest/fallback/$lib"
    cp -L "$(find "x-$pkg" -name "$lib.so.1" | head -n 1)" "$dest/fallback/$lib/"
done

cd "$dest/root"
lib=usr/lib/x86_64-linux-gnu
# Documentation, and the ibverbs driver plugins with their config and libraries
# (libefa/libmlx5 stay), the rsockets preload library, PMIx's compatibility links.
rm -rf usr/share/doc usr/share/man usr/share/lintian etc/libibverbs.d \
    "$lib/libibverbs" "$lib/rsocket" "$lib"/libmana.so* "$lib"/libmlx4.so* "$lib"/libpmix.so.2*
# Fortran, Java and OpenSHMEM libraries and plugins.
rm -f "$lib"/libmpi_java.so* "$lib"/libmpi_mpifh* "$lib"/libmpi_usempi* "$lib"/liboshmem.so* \
    "$lib"/openmpi/lib/openmpi3/mca_{atomic,memheap,scoll,spml,sshmem}_*.so
# Compiler wrappers and their data, OpenSHMEM tools, aliases.
rm -f usr/bin/opal_wrapper usr/bin/opalc* usr/bin/ortecc usr/bin/mpi{CC,c++,cc,cxx,f77,f90,fort}.openmpi \
    usr/bin/mpijavac* usr/bin/osh* usr/bin/shmem* usr/bin/ompi-clean usr/bin/ompi-server \
    usr/share/openmpi/*-wrapper-data.txt
# What update-alternatives would set up on installation: mpiexec/mpirun, libpsm_infinipath.so.1.
rm usr/bin/mpiexec.openmpi usr/bin/mpirun.openmpi
cp usr/bin/orterun usr/bin/mpiexec
cp usr/bin/orterun usr/bin/mpirun
mv usr/lib/libpsm1/libpsm_infinipath.so.1.* "$lib/libpsm_infinipath.so.1"
rmdir usr/lib/libpsm1

# Each remaining symlink (soname -> versioned file, one link per file) takes the place of its target.
find . -type l | while read -r l; do mv -f "$(readlink -f "$l")" "$l"; done
[ -z "$(find "$dest" -type l)" ] || die "symlinks left in $dest"

# PMIx's plugin path is hard-coded to /usr; gpu-mpi-env.sh sets it through the environment.
conf="$lib/pmix2/share/pmix-mca-params.conf"
sed -i 's|^mca_base_component_path = /usr/.*|# mca_base_component_path: set via PMIX_MCA_mca_base_component_path by scripts/gpu/gpu-mpi-env.sh|' "$conf"
grep -q '^# mca_base_component_path: set via' "$conf" || die "could not edit $conf"
if [ ! -x usr/bin/orterun ] || [ ! -f "$lib/libmpi.so.40" ]; then die "incomplete tree in $dest"; fi

# Keep the default location out of git.
exclude="$repo/.git/info/exclude"
if [ "$dest" = "$repo/.ompi" ] && [ -d "$repo/.git" ] && ! grep -qxF '/.ompi/' "$exclude" 2>/dev/null; then
    mkdir -p "$(dirname "$exclude")"
    echo '/.ompi/' >>"$exclude"
fi
du -sh "$dest"
