//! The gradient path's host side for CUDA: pinned memory (flags 0, readable at full speed by
//! the CPU) filled and drained on the copy stream, with the events the comm thread and the
//! compute stream wait on. The emulator has no streams: plain memory and synchronous copies.

use super::{Cuda, Engine};
use crate::backend::{Backend, HostBuffer, StageWaiter, View, ViewMut};
use anyhow::{Result, anyhow};
use cudarc::driver::PinnedHostSlice;
use std::sync::Arc;

pub enum CudaHost {
    /// The slice, and its start taken once while idle (cudarc's accessors wait for copies).
    Pinned(PinnedHostSlice<f32>, *mut f32),
    Plain(Vec<f32>),
}

// The pointer is into the pinned allocation the variant owns.
unsafe impl Send for CudaHost {}

impl HostBuffer for CudaHost {
    fn raw_parts(&mut self) -> (*mut f32, usize) {
        match self {
            CudaHost::Pinned(p, ptr) => (*ptr, p.len()),
            CudaHost::Plain(v) => (v.as_mut_ptr(), v.len()),
        }
    }
}

impl Cuda {
    pub(super) fn host_buffer(&self, len: usize) -> Result<CudaHost> {
        match &self.engine {
            Engine::Driver(_) => {
                let mut p = self.alloc_pinned(len)?;
                let ptr = p.as_mut_ptr()?;
                Ok(CudaHost::Pinned(p, ptr))
            }
            Engine::Emulator(_) => Ok(CudaHost::Plain(vec![0.0; len])),
        }
    }

    pub(super) fn stage_out_to(&self, src: View<Cuda>, host: &mut CudaHost, at: usize) -> Result<StageWaiter> {
        match host {
            CudaHost::Pinned(p, _) => {
                let ev = self.stage_to_host(src, p, at)?;
                Ok(Arc::new(move || {
                    if let Err(e) = ev.synchronize() {
                        panic!("waiting for a gradient copy to the host: {e}");
                    }
                }))
            }
            CudaHost::Plain(v) => {
                let dst = v.get_mut(at..at + src.len).ok_or_else(|| anyhow!("staging {} floats at {at}", src.len))?;
                self.download(src, dst);
                Ok(Arc::new(|| {}))
            }
        }
    }

    pub(super) fn stage_in_from(&self, host: &CudaHost, at: usize, dst: ViewMut<Cuda>) -> Result<()> {
        match host {
            CudaHost::Pinned(p, _) => {
                let ev = self.stage_to_device(p, at, dst)?;
                self.compute_wait(&ev)
            }
            CudaHost::Plain(v) => {
                let n = dst.len;
                if at + n > v.len() {
                    return Err(anyhow!("staging {n} floats at {at} from {}", v.len()));
                }
                // Only v[at..at + n]: the comm thread may still be averaging later fragments.
                let src = unsafe { std::slice::from_raw_parts(v.as_ptr().add(at), n) };
                self.upload(src, dst);
                Ok(())
            }
        }
    }
}
