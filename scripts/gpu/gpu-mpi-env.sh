# shellcheck shell=bash
# Source this (bash) from the repository root on a machine without Open MPI:
#     source scripts/gpu/gpu-mpi-env.sh
#     mpiexec -n 2 ./target/release/dcgan-train ...
# It points PATH / LD_LIBRARY_PATH / OPAL_PREFIX / PMIX_PREFIX at the
# relocatable Open MPI 4.1.4 runtime (Debian 12 packages unpacked with
# `dpkg -x`) in .ompi/root, and sets MCA defaults for a single-node run
# as root with no network interfaces besides loopback and no InfiniBand.

_ompi_here=
# shellcheck disable=SC2128
[ -n "${BASH_SOURCE:-}" ] && _ompi_here="$(cd "$(dirname "$BASH_SOURCE")/../.." 2>/dev/null && pwd)"
[ -n "$_ompi_here" ] && [ -d "$_ompi_here/.ompi/root" ] || _ompi_here="$PWD"
OMPI_ROOT="$_ompi_here/.ompi/root"
if [ ! -x "$OMPI_ROOT/usr/bin/orterun" ]; then
    echo "gpu-mpi-env.sh: $OMPI_ROOT/usr/bin/orterun not found" >&2
    unset _ompi_here OMPI_ROOT
    return 1 2>/dev/null || exit 1
fi
export OMPI_ROOT
_ompi_lib="$OMPI_ROOT/usr/lib/x86_64-linux-gnu"

# Relocation. Debian's Open MPI has prefix /usr, libdir/pkglibdir/datadir
# derived from it; sysconfdir (/etc/openmpi) and the external PMIx prefix
# are absolute and need their own overrides.
export OPAL_PREFIX="$OMPI_ROOT/usr"
export OPAL_SYSCONFDIR="$OMPI_ROOT/etc/openmpi"
export PMIX_PREFIX="$_ompi_lib/pmix2"
# PMIX_PREFIX alone is not enough: without PMIX_PKGLIBDIR PMIx still loads
# plugins from /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix.
export PMIX_EXEC_PREFIX="$PMIX_PREFIX"
export PMIX_LIBDIR="$PMIX_PREFIX/lib"
export PMIX_PKGLIBDIR="$PMIX_PREFIX/lib/pmix"
export PMIX_DATAROOTDIR="$PMIX_PREFIX/share"
export PMIX_DATADIR="$PMIX_PREFIX/share"
export PMIX_PKGDATADIR="$PMIX_PREFIX/share/pmix"
export PMIX_SYSCONFDIR="$PMIX_PREFIX/share"
export PMIX_MCA_mca_base_component_path="$PMIX_PKGLIBDIR"

export PATH="$OMPI_ROOT/usr/bin${PATH:+:$PATH}"
_ompi_ld="$_ompi_lib:$OMPI_ROOT/lib/x86_64-linux-gnu:$_ompi_lib/pmix2/lib"
# Base-system libraries are shipped too, but only used where missing here.
for _ompi_fb in libz:libz.so.1 libudev:libudev.so.1 libuuid:libuuid.so.1 libatomic:libatomic.so.1; do
    _ompi_so="${_ompi_fb#*:}"
    if ! { /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null; } | grep -q "^[[:space:]]*$_ompi_so (libc6,x86-64)"; then
        _ompi_ld="$_ompi_ld:$_ompi_here/.ompi/fallback/${_ompi_fb%%:*}"
    fi
done
export LD_LIBRARY_PATH="$_ompi_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Running as root inside the container.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Single node: launch locally without ssh/rsh, oversubscribe, no binding.
export OMPI_MCA_plm=isolated
export OMPI_MCA_plm_rsh_agent=false
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_rmaps_base_mapping_policy=slot
export HWLOC_HIDE_ERRORS=1
export HWLOC_PLUGINS_PATH="$OMPI_ROOT/usr/lib/x86_64-linux-gnu/hwloc"   # none shipped; ignore system hwloc plugins

# Transports: shared memory (vader) + self only, ob1 PML; no UCX/OFI/PSM/verbs.
export OMPI_MCA_pml=ob1
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mtl='^ofi,psm,psm2'
export OMPI_MCA_osc='^ucx,pt2pt'
export OMPI_MCA_btl_vader_single_copy_mechanism=none   # containers often forbid CMA/ptrace
export OMPI_MCA_btl_base_warn_component_unused=0
if [ ! -w /dev/shm ]; then
    export OMPI_MCA_btl_vader_backing_directory=/tmp
    export OMPI_MCA_shmem_mmap_backing_file_base_dir=/tmp
fi

# Runtime wire-up (mpiexec <-> ranks) over loopback only.
export OMPI_MCA_oob=tcp
export OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_btl_tcp_if_include=lo
export PMIX_MCA_psec=native        # no munge daemon
export PMIX_MCA_gds=hash

unset _ompi_here _ompi_lib _ompi_ld _ompi_fb _ompi_so
