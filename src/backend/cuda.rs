//! The CUDA backend: one GPU driven through cudarc (the driver API, loaded at run time, so the
//! same binary runs where there is no CUDA) and our own kernels, compiled by NVRTC at start
//! for the device's architecture and cached on disk. No cuDNN, no cuBLAS.
//!
//! - `probe()` says whether a GPU is usable, or what is missing (driver library, driver,
//!   device, NVRTC), without touching anything that could panic.
//! - `Cuda::new(ordinal)` makes the context, the compute and copy streams and loads every
//!   kernel; each op's launcher lives next to its CPU side in `src/ops/<family>/cuda.rs`.
//! - The gradient path: `stage_to_host` / `stage_to_device` copy on the copy stream (after
//!   everything issued on the compute stream so far) into pinned host memory allocated with
//!   flags 0 (`alloc_pinned`), each returning the event to wait on; `compute_wait` makes the
//!   compute stream wait for one (before a layer's Adam).
//! - `Cuda::emulated()` runs the same launchers and kernels on the CPU (`emu`), for tests.

mod backend_impl;
mod driver;
pub mod emu;
mod graph;
mod graph_exec;
pub mod kernel_cache;
pub mod kernel_table;
pub mod nvrtc;
pub mod probe;
pub mod staging;

pub use cudarc::driver::{CudaEvent, PinnedHostSlice};
pub use probe::{DeviceProbe, NoGpu, device_count, probe, probe_device};

use super::{DeviceBuf, Precision, View, ViewMut};
use crate::ops::batchnorm::BnGeom;
use crate::ops::conv::ConvGeom;
use crate::ops::{activation, adam, batchnorm, conv, elementwise, layernorm, loss, penalty, wire};
use anyhow::{Result, anyhow, bail};
use cudarc::driver::HostSlice;
use kernel_table::{DevPtr, Dims, FastDiv, KernelFile};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The kernel families, one CUDA source file (one module) each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Elementwise,
    Activation,
    Loss,
    Adam,
    BatchNorm,
    Conv,
    Penalty,
    Wire,
    LayerNorm,
}

impl Family {
    pub const ALL: [Family; 9] = [
        Family::Elementwise,
        Family::Activation,
        Family::Loss,
        Family::Adam,
        Family::BatchNorm,
        Family::Conv,
        Family::Penalty,
        Family::Wire,
        Family::LayerNorm,
    ];

    /// The family's source file and kernel signatures (declared in its `ops/<family>/cuda.rs`).
    pub fn kernels(self) -> &'static KernelFile {
        match self {
            Family::Elementwise => &elementwise::cuda::KERNELS,
            Family::Activation => &activation::cuda::KERNELS,
            Family::Loss => &loss::cuda::KERNELS,
            Family::Adam => &adam::cuda::KERNELS,
            Family::BatchNorm => &batchnorm::cuda::KERNELS,
            Family::Conv => &conv::cuda::KERNELS,
            Family::Penalty => &penalty::cuda::KERNELS,
            Family::Wire => &wire::cuda::KERNELS,
            Family::LayerNorm => &layernorm::cuda::KERNELS,
        }
    }
}

/// The generated `params.cuh`: the C declaration of every struct passed to kernels.
pub fn params_header() -> String {
    let mut s = String::from(
        "// params.cuh: generated from the #[repr(C)] structs in src/ (device_struct!).\n\
         #pragma once\n",
    );
    s += &FastDiv::c_decl();
    s += &conv::cuda::ConvParams::c_decl();
    s
}

/// Bytes allocated through one backend, now and at most.
#[derive(Debug, Default)]
struct MemStats {
    current: AtomicUsize,
    peak: AtomicUsize,
    /// Kernels are held back for a graph (`graph`): freeing a buffer now could free it under
    /// them.
    deferred: AtomicBool,
}

impl MemStats {
    fn add(&self, bytes: usize) {
        let now = self.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
    fn sub(&self, bytes: usize) {
        self.current.fetch_sub(bytes, Ordering::Relaxed);
    }
}

enum Storage {
    Device(#[allow(dead_code)] driver::DeviceAlloc),
    Host(#[allow(dead_code)] emu::HostAlloc),
}

/// A buffer of f32 on the device (or in the emulator's host memory).
pub struct CudaBuf {
    addr: u64,
    len: usize,
    mem: Arc<MemStats>,
    _storage: Storage,
}

impl DeviceBuf for CudaBuf {
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for CudaBuf {
    fn drop(&mut self) {
        if self.mem.deferred.load(Ordering::Relaxed) && !std::thread::panicking() {
            panic!("a CUDA buffer was freed inside a graphed step, while kernels that may use it are held back");
        }
        self.mem.sub(4 * self.len.max(1));
    }
}

impl CudaBuf {
    /// The device address of element 0.
    pub fn addr(&self) -> DevPtr {
        DevPtr(self.addr)
    }
}

/// The device address of a view's first element.
pub fn dptr(v: View<'_, Cuda>) -> DevPtr {
    v.buf.addr().offset(v.off)
}

/// The device address of a writable view's first element.
pub fn dptr_mut(v: &ViewMut<'_, Cuda>) -> DevPtr {
    v.buf.addr().offset(v.off)
}

enum Engine {
    Driver(driver::Driver),
    Emulator(emu::Emulator),
}

/// The CUDA backend on one device.
pub struct Cuda {
    /// `--cuda-graphs`: the step's recorder (None: every kernel launched at once). First, so
    /// that its graphs are destroyed before the engine unloads the kernels they launch.
    graphs: Option<Mutex<graph::Graphs>>,
    engine: Engine,
    sm_count: usize,
    /// How the convolutions multiply.
    precision: Precision,
    mem: Arc<MemStats>,
    /// Scratch for split-K partial tiles and batch-norm partial sums, grown on demand
    /// (`reserve_workspace` grows it up front so that the step loop never allocates).
    workspace: Mutex<Option<CudaBuf>>,
}

impl Cuda {
    /// Context, streams and every kernel (compiled by NVRTC, or from the cache in
    /// `$DCGAN_KERNEL_CACHE`, default ~/.cache/dcgan-train/kernels) on device `ordinal`.
    pub fn new(ordinal: usize) -> Result<Cuda> {
        let d = driver::Driver::new(ordinal)?;
        Ok(Cuda {
            sm_count: d.sm_count,
            engine: Engine::Driver(d),
            precision: Precision::Fp32,
            mem: Arc::default(),
            workspace: Mutex::new(None),
            graphs: None,
        })
    }

    /// The kernels run on the CPU by the emulator (tests and debugging; needs a C++ compiler).
    /// `sm_count` is the multiprocessor count the launchers plan for (it decides split-K).
    pub fn emulated(sm_count: usize) -> Result<Cuda> {
        Ok(Cuda {
            engine: Engine::Emulator(emu::Emulator::new()?),
            sm_count: sm_count.max(1),
            precision: Precision::Fp32,
            mem: Arc::default(),
            workspace: Mutex::new(None),
            graphs: None,
        })
    }

    /// This backend with its convolutions in `precision`. TF32's tensor-core instructions need
    /// compute capability 8.0 or newer; the emulator runs every precision.
    pub fn with_precision(mut self, precision: Precision) -> Result<Cuda> {
        self.set_precision(precision)?;
        Ok(self)
    }

    /// From now on, convolutions in `precision` (see `with_precision`).
    pub fn set_precision(&mut self, precision: Precision) -> Result<()> {
        if let Engine::Driver(d) = &self.engine
            && precision != Precision::Fp32
            && d.probe.cc.0 < 8
        {
            bail!(
                "--precision {}: TF32 tensor cores need a GPU of compute capability 8.0 or newer, and this one is {}.{}: use --precision fp32",
                precision.name(),
                d.probe.cc.0,
                d.probe.cc.1
            );
        }
        self.precision = precision;
        Ok(())
    }

    /// How the convolutions multiply.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Whether this backend runs on the emulator (tests use their small shapes there).
    pub fn is_emulated(&self) -> bool {
        matches!(self.engine, Engine::Emulator(_))
    }

    /// Multiprocessors on the device: the launchers size grids and split-K by it.
    pub fn sm_count(&self) -> usize {
        self.sm_count
    }

    /// The most bytes this backend has had allocated at once (buffers and workspace).
    /// Device memory free now (None on the emulator, whose buffers are host memory).
    pub fn free_device_bytes(&self) -> Option<u64> {
        match &self.engine {
            Engine::Driver(d) => d.free_bytes(),
            Engine::Emulator(_) => None,
        }
    }

    pub fn peak_bytes(&self) -> usize {
        self.mem.peak.load(Ordering::Relaxed)
    }

    /// Bytes allocated through this backend now.
    pub fn allocated_bytes(&self) -> usize {
        self.mem.current.load(Ordering::Relaxed)
    }

    fn driver(&self) -> Result<&driver::Driver> {
        match &self.engine {
            Engine::Driver(d) => Ok(d),
            Engine::Emulator(_) => bail!("the CUDA emulator has no streams or pinned memory"),
        }
    }

    /// Wait for the compute and copy streams; an error from an earlier asynchronous kernel or
    /// copy is returned here (`Backend::synchronize` panics with it instead).
    pub fn try_synchronize(&self) -> Result<()> {
        self.graph_boundary();
        match &self.engine {
            Engine::Driver(d) => d.synchronize(),
            Engine::Emulator(_) => Ok(()),
        }
    }

    fn alloc_buf(&self, len: usize) -> Result<CudaBuf> {
        self.graph_boundary();
        let (addr, storage) = match &self.engine {
            Engine::Driver(d) => {
                let (addr, a) = d.alloc(len, self.allocated_bytes())?;
                (addr, Storage::Device(a))
            }
            Engine::Emulator(_) => {
                let h = emu::HostAlloc::new(len)?;
                (h.addr(), Storage::Host(h))
            }
        };
        self.mem.add(4 * len.max(1));
        Ok(CudaBuf { addr, len, mem: self.mem.clone(), _storage: storage })
    }

    /// Grow the workspace to at least `floats` floats now, so ops never allocate later.
    pub fn reserve_workspace(&self, floats: usize) -> Result<()> {
        let mut ws = self.workspace.lock().unwrap();
        if ws.as_ref().is_none_or(|b| b.len < floats) {
            // Kernels held back for a graph may use the old workspace: launch them first.
            self.graph_boundary();
            // Doubles live in it too: keep the length even so the end stays 8-byte aligned.
            let len = floats.next_multiple_of(4);
            *ws = None;
            *ws = Some(self.alloc_buf(len)?);
        }
        Ok(())
    }

    /// Reserve the workspace the three convolution directions of `g` need, after checking
    /// that its tensors fit the kernels' 32-bit indexing (an error here, not a panic at the
    /// first launch).
    pub fn prepare_conv(&self, g: &ConvGeom) -> Result<()> {
        for (what, len) in [("input", g.x_len()), ("output", g.y_len()), ("weight", g.w_len())] {
            if len >= 1 << 31 {
                bail!(
                    "a convolution {what} of {len} floats at batch {} is beyond the 2^31 floats the \
                     CUDA kernels index in 32 bits; use a smaller --batch-size",
                    g.batch
                );
            }
        }
        self.reserve_workspace(conv::cuda::workspace_floats(g, self.sm_count))
    }

    /// Reserve the workspace batch norm over `g` needs.
    pub fn prepare_bn(&self, g: &BnGeom) -> Result<()> {
        self.reserve_workspace(batchnorm::cuda::workspace_floats(g, self.sm_count))
    }

    /// The workspace, at least `floats` long (grown here if nobody reserved enough).
    pub(crate) fn workspace(&self, floats: usize) -> DevPtr {
        if let Err(e) = self.reserve_workspace(floats) {
            panic!("{e:#}");
        }
        self.workspace.lock().unwrap().as_ref().unwrap().addr()
    }

    /// Launch kernel `index` of `family` on the compute stream (used by `cuda_kernels!`).
    pub(crate) fn launch(
        &self,
        family: Family,
        index: usize,
        name: &'static str,
        dims: Dims,
        params: &mut [*mut c_void],
    ) {
        debug_assert_eq!(family.kernels().kernels[index].name, name);
        if dims.is_empty() || self.graph_launch(family, index, name, dims, params) {
            return;
        }
        self.launch_now(family, index, name, dims, params);
    }

    /// Launch on the engine at once, past the graph recorder.
    fn launch_now(&self, family: Family, index: usize, name: &'static str, dims: Dims, params: &mut [*mut c_void]) {
        match &self.engine {
            Engine::Driver(d) => d.launch(family, index, name, dims, params),
            Engine::Emulator(e) => e.launch(family, index, name, dims, params),
        }
    }

    /// Page-locked host memory for `len` floats, allocated with flags 0 (cudarc's default is
    /// write-combined, which is slow for the CPU to read), zero-filled.
    pub fn alloc_pinned(&self, len: usize) -> Result<PinnedHostSlice<f32>> {
        let d = self.driver()?;
        let mut p = unsafe { d.ctx.alloc_pinned_with_flags::<f32>(len, 0) }
            .map_err(|e| anyhow!("allocating {len} floats of pinned host memory: {e}"))?;
        p.as_mut_slice()?.fill(0.0);
        Ok(p)
    }

    /// Copy `src` into `dst[dst_off..]` on the copy stream, after everything issued on the
    /// compute stream so far; returns the event that completes with the copy. `dst` must
    /// stay alive and untouched until then (its `as_slice()` waits for the copy).
    pub fn stage_to_host(
        &self,
        src: View<'_, Cuda>,
        dst: &mut PinnedHostSlice<f32>,
        dst_off: usize,
    ) -> Result<CudaEvent> {
        self.graph_boundary();
        let d = self.driver()?;
        let end = dst_off + src.len;
        if end > dst.len() {
            bail!("staging {} floats at {dst_off} into a pinned buffer of {}", src.len, dst.len());
        }
        d.copy_after_compute()?;
        // Waits for earlier copies into `dst`; `_record` marks it busy until this copy ends.
        let (slice, _record) = unsafe { dst.stream_synced_mut_slice(&d.copy) };
        d.copy_to_pinned(dptr(src).0, &mut slice[dst_off..end])?;
        drop(_record);
        d.record_copy()
    }

    /// Copy `src[src_off..]` into `dst` on the copy stream, after everything issued on the
    /// compute stream so far; returns the event to pass to `compute_wait` before using `dst`.
    pub fn stage_to_device(
        &self,
        src: &PinnedHostSlice<f32>,
        src_off: usize,
        dst: ViewMut<'_, Cuda>,
    ) -> Result<CudaEvent> {
        self.graph_boundary();
        let d = self.driver()?;
        let end = src_off + dst.len;
        if end > src.len() {
            bail!("staging {} floats from {src_off} of a pinned buffer of {}", dst.len, src.len());
        }
        d.copy_after_compute()?;
        let (slice, _record) = unsafe { src.stream_synced_slice(&d.copy) };
        d.copy_from_pinned(&slice[src_off..end], dptr_mut(&dst).0)?;
        drop(_record);
        d.record_copy()
    }

    /// Make the compute stream wait for `ev` (e.g. a gradient's return before its Adam step).
    pub fn compute_wait(&self, ev: &CudaEvent) -> Result<()> {
        self.graph_boundary();
        self.driver()?.compute_wait(ev)
    }
}

/// The launch shape of an elementwise kernel over `n` items: enough blocks of `THREADS` to
/// fill the device, capped so that each thread loops over a few elements (grid-stride).
pub(crate) fn elementwise_dims(cu: &Cuda, n: usize) -> Dims {
    Dims::linear(n.div_ceil(THREADS as usize).min(cu.sm_count * 16), THREADS)
}

/// Threads per block of every kernel (`THREADS` in common.cuh).
pub(crate) const THREADS: u32 = 256;
