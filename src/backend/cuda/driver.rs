//! The real GPU under the CUDA backend: a cudarc context, the compute and copy streams, the
//! kernel modules (NVRTC images from the cache) and raw launches, copies and allocations.
//!
//! Launches and copies go through the driver API with raw device addresses: the backend
//! orders its work itself (one compute stream; the copy stream waits on events), so cudarc's
//! per-buffer event tracking is never engaged on the hot path.

use super::kernel_table::Dims;
use super::nvrtc::{self, Output, Target};
use super::probe::{self, DeviceProbe};
use super::{Family, kernel_cache};
use anyhow::{Context, Result, anyhow, bail};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, result, sys};
use cudarc::nvrtc::Ptx;
use std::ffi::c_void;
use std::sync::Arc;

pub(crate) struct Driver {
    pub probe: DeviceProbe,
    pub ctx: Arc<CudaContext>,
    pub compute: Arc<CudaStream>,
    pub copy: Arc<CudaStream>,
    pub sm_count: usize,
    /// `functions[family as usize][kernel index]`, in the order of each family's KERNELS.
    functions: Vec<Vec<CudaFunction>>,
}

/// A device allocation. Dropping it first makes the compute stream (where it is freed) wait
/// for the copy stream, so a buffer is never freed under an in-flight gradient copy.
pub(crate) struct DeviceAlloc {
    slice: CudaSlice<f32>,
    copy: Arc<CudaStream>,
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        let _ = self.slice.stream().join(&self.copy);
    }
}

/// The compile target for a device of compute capability `cc`: CUBIN for the device itself
/// when NVRTC knows it, else PTX for the newest architecture NVRTC knows below the device's
/// (the driver compiles it forward at load); none below it is an error naming the NVRTC.
fn target_for(cc: (i32, i32)) -> Result<Target> {
    let arch = (cc.0 * 10 + cc.1) as u32;
    let supported = nvrtc::supported_archs()?;
    if supported.contains(&arch) {
        return Ok(Target { arch, output: Output::Cubin });
    }
    match supported.iter().copied().filter(|&a| a < arch).max() {
        Some(older) => Ok(Target { arch: older, output: Output::Ptx }),
        None => bail!(
            "NVRTC {:?} cannot compile for compute capability {}.{} (it supports {:?}); use an \
             NVRTC that supports this GPU",
            nvrtc::version()?,
            cc.0,
            cc.1,
            supported
        ),
    }
}

fn load_family(ctx: &Arc<CudaContext>, family: Family, target: &Target) -> Result<Vec<CudaFunction>> {
    let file = family.kernels();
    let as_ptx = |image: Vec<u8>| match target.output {
        Output::Cubin => Ptx::from_binary(image),
        Output::Ptx => Ptx::from_src(nvrtc::ptx_text(&image)),
    };
    let image = kernel_cache::load_or_compile(family, target, false)?;
    let module = match ctx.load_module(as_ptx(image)) {
        Ok(m) => m,
        // A damaged cache entry: compile afresh before giving up.
        Err(_) => {
            let image = kernel_cache::load_or_compile(family, target, true)?;
            ctx.load_module(as_ptx(image)).map_err(|e| {
                anyhow!(
                    "loading kernels/{} compiled by NVRTC {:?} for {} failed: {e}; the driver \
                     must support the NVRTC's CUDA version (see `dcgan-train info`)",
                    file.file,
                    nvrtc::version().unwrap_or((0, 0)),
                    target.arch_flag()
                )
            })?
        }
    };
    file.kernels
        .iter()
        .map(|k| {
            module
                .load_function(k.name)
                .with_context(|| format!("kernel {} missing from kernels/{}", k.name, file.file))
        })
        .collect()
}

impl Driver {
    pub fn new(ordinal: usize) -> Result<Driver> {
        let probe = probe::probe_device(ordinal)?;
        let ctx = CudaContext::new(ordinal).with_context(|| format!("creating a CUDA context on device {ordinal}"))?;
        let sm_count =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize;
        let target = target_for(probe.cc)?;
        let functions = Family::ALL.iter().map(|&f| load_family(&ctx, f, &target)).collect::<Result<Vec<_>>>()?;
        let compute = ctx.new_stream()?;
        let copy = ctx.new_stream()?;
        Ok(Driver { probe, ctx, compute, copy, sm_count, functions })
    }

    pub(super) fn bind(&self) {
        if let Err(e) = self.ctx.bind_to_thread() {
            panic!("CUDA context unusable: {e}");
        }
    }

    /// Device memory free now, as the driver says.
    pub fn free_bytes(&self) -> Option<u64> {
        self.bind();
        self.ctx.mem_get_info().ok().map(|(free, _)| free as u64)
    }

    /// A zero-filled allocation of `len` floats (at least one, so the address is valid),
    /// ordered on the compute stream.
    pub fn alloc(&self, len: usize, already: usize) -> Result<(u64, DeviceAlloc)> {
        self.bind();
        let slice = self.compute.alloc_zeros::<f32>(len.max(1)).map_err(|e| {
            let (free, total) = self.ctx.mem_get_info().unwrap_or((0, 0));
            let mib = |b: usize| b as f64 / (1u64 << 20) as f64;
            anyhow!(
                "out of GPU memory on {}: allocating {:.1} MiB with {:.1} MiB already allocated \
                 by this run and {:.1} of {:.1} MiB free ({e}); use a smaller --batch-size",
                self.probe.name,
                mib(4 * len),
                mib(already),
                mib(free),
                mib(total)
            )
        })?;
        let (ptr, _record) = slice.device_ptr(&self.compute);
        drop(_record);
        Ok((ptr, DeviceAlloc { slice, copy: self.copy.clone() }))
    }

    /// Kernel `index` of `family`.
    pub(super) fn function(&self, family: Family, index: usize) -> &CudaFunction {
        &self.functions[family as usize][index]
    }

    pub fn launch(&self, family: Family, index: usize, name: &str, dims: Dims, params: &mut [*mut c_void]) {
        self.bind();
        let f = self.function(family, index);
        let r = unsafe {
            result::launch_kernel(
                f.cu_function(),
                dims.grid,
                dims.block,
                dims.shared_bytes,
                self.compute.cu_stream(),
                params,
            )
        };
        if let Err(e) = r {
            panic!("CUDA kernel {name} failed to launch with {dims:?}: {e}");
        }
    }

    /// Host -> device on the compute stream. From pageable memory the driver has copied `src`
    /// out before returning, so the caller may reuse it at once.
    pub fn upload(&self, src: &[f32], dst: u64) {
        self.bind();
        unsafe { result::memcpy_htod_async(dst, src, self.compute.cu_stream()) }
            .unwrap_or_else(|e| panic!("CUDA upload of {} floats failed: {e}", src.len()));
    }

    /// Device -> host, waiting for everything issued before it.
    pub fn download(&self, src: u64, dst: &mut [f32]) {
        self.bind();
        let n = dst.len();
        unsafe { result::memcpy_dtoh_async(dst, src, self.compute.cu_stream()) }
            .and_then(|_| self.compute.synchronize())
            .unwrap_or_else(|e| panic!("CUDA download of {n} floats failed: {e}"));
    }

    pub fn copy_dtod(&self, src: u64, dst: u64, len: usize) {
        self.bind();
        unsafe { result::memcpy_dtod_async(dst, src, 4 * len, self.compute.cu_stream()) }
            .unwrap_or_else(|e| panic!("CUDA device copy of {len} floats failed: {e}"));
    }

    pub fn synchronize(&self) -> Result<()> {
        self.compute.synchronize().and_then(|_| self.copy.synchronize()).map_err(|e| {
            anyhow!(
                "CUDA error in an earlier kernel or copy: {e} (rerun under compute-sanitizer \
                     to find it)"
            )
        })
    }

    /// Make the copy stream wait for everything issued on the compute stream so far.
    pub fn copy_after_compute(&self) -> Result<()> {
        self.copy.join(&self.compute)?;
        Ok(())
    }

    pub fn record_copy(&self) -> Result<CudaEvent> {
        Ok(self.copy.record_event(None)?)
    }

    pub fn compute_wait(&self, ev: &CudaEvent) -> Result<()> {
        self.compute.wait(ev)?;
        Ok(())
    }

    /// Device -> pinned host on the copy stream (after `copy_after_compute`).
    pub fn copy_to_pinned(&self, src: u64, dst: &mut [f32]) -> Result<()> {
        self.bind();
        unsafe { result::memcpy_dtoh_async(dst, src, self.copy.cu_stream()) }?;
        Ok(())
    }

    /// Pinned host -> device on the copy stream (after `copy_after_compute`).
    pub fn copy_from_pinned(&self, src: &[f32], dst: u64) -> Result<()> {
        self.bind();
        unsafe { result::memcpy_htod_async(dst, src, self.copy.cu_stream()) }?;
        Ok(())
    }
}
