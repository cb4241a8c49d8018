//! `--device auto|cpu|cuda|cuda-emulated`: which backend a rank runs on, and a way to run
//! code generic over `Backend` on whichever was chosen.

use crate::backend::Backend;
use crate::backend::cpu::Cpu;
pub use crate::backend::{GraphStats, Precision};
use anyhow::Result;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceChoice {
    /// CUDA when a GPU is usable, otherwise the CPU (saying why).
    #[default]
    Auto,
    Cpu,
    Cuda,
    /// The CUDA kernels run on the CPU by an emulator: slow, for checking the CUDA code path
    /// on machines without a GPU.
    CudaEmulated,
}

/// The chosen backend.
pub enum Device {
    Cpu(Cpu),
    #[cfg(feature = "cuda")]
    Cuda(Box<crate::backend::cuda::Cuda>),
}

/// Code to run on whichever backend was chosen.
pub trait OnBackend {
    type Out;
    fn run<B: Backend>(self, be: B) -> Self::Out;
}

impl Device {
    pub fn run<F: OnBackend>(self, f: F) -> F::Out {
        match self {
            Device::Cpu(be) => f.run(be),
            #[cfg(feature = "cuda")]
            Device::Cuda(be) => f.run(*be),
        }
    }
}

/// How a CUDA backend computes: `--precision` and `--cuda-graphs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaSettings {
    pub precision: Precision,
    pub graphs: bool,
}

/// The backend for this rank (GPU = local rank modulo the visible GPUs) with `cuda`'s
/// settings, and for `auto` falling back to the CPU, the reason as a one-line notice.
pub fn select(choice: DeviceChoice, cuda: CudaSettings, local_rank: usize) -> Result<(Device, Option<String>)> {
    let (device, no_gpu) = select_backend(choice, local_rank)?;
    let on_cpu = no_gpu.as_ref().map(|why| format!("the CPU ({why})"));
    if matches!(device, Device::Cpu(_)) {
        let on = on_cpu.as_deref().unwrap_or("the CPU");
        if cuda.precision != Precision::Fp32 {
            anyhow::bail!(
                "--precision {} is for a GPU's tensor cores, and this rank computes on {on}: use --precision fp32, or --device cuda on a GPU",
                cuda.precision.name(),
            );
        }
        if cuda.graphs {
            anyhow::bail!(
                "--cuda-graphs replays CUDA kernels, and this rank computes on {on}: drop --cuda-graphs, or use --device cuda on a GPU"
            );
        }
    }
    let notice = on_cpu.map(|on| format!("device: {on}"));
    #[cfg(feature = "cuda")]
    if let Device::Cuda(cu) = device {
        let cu = cu.with_precision(cuda.precision)?.with_graphs(cuda.graphs);
        return Ok((Device::Cuda(Box::new(cu)), notice));
    }
    Ok((device, notice))
}

/// The backend `choice` asks for, and where `auto` found no usable GPU, why.
fn select_backend(choice: DeviceChoice, local_rank: usize) -> Result<(Device, Option<String>)> {
    #[cfg(feature = "cuda")]
    {
        use crate::backend::cuda::{self, Cuda};
        let gpu = || -> Result<Device> {
            let count = cuda::device_count().map_err(|why| anyhow::anyhow!("{why}"))?;
            cuda::probe_device(local_rank % count).map_err(|why| anyhow::anyhow!("{why}"))?;
            Ok(Device::Cuda(Box::new(Cuda::new(local_rank % count)?)))
        };
        match choice {
            DeviceChoice::Cpu => Ok((Device::Cpu(Cpu), None)),
            DeviceChoice::Cuda => Ok((gpu().map_err(|e| anyhow::anyhow!("--device cuda: {e:#}"))?, None)),
            DeviceChoice::CudaEmulated => Ok((Device::Cuda(Box::new(Cuda::emulated(8)?)), None)),
            DeviceChoice::Auto => match cuda::probe() {
                Ok(_) => Ok((gpu()?, None)),
                Err(why) => Ok((Device::Cpu(Cpu), Some(why.to_string()))),
            },
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = local_rank;
        match choice {
            DeviceChoice::Cpu | DeviceChoice::Auto => Ok((Device::Cpu(Cpu), None)),
            DeviceChoice::Cuda | DeviceChoice::CudaEmulated => {
                anyhow::bail!(
                    "--device cuda: this binary was built without the `cuda` feature: rebuild with default features"
                )
            }
        }
    }
}
