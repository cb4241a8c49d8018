//! Is a GPU usable here? Checks, in order, the driver library, the driver, a device and NVRTC,
//! without creating a context, and says which one was missing. cudarc panics when a library
//! is missing, so every check that loads one asks first whether it can be loaded.

use super::nvrtc;
use cudarc::driver::{result, sys};
use std::fmt;

/// One CUDA device as `dcgan-train info` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceProbe {
    /// The ordinal probed (CUDA_VISIBLE_DEVICES numbering).
    pub ordinal: usize,
    /// Visible devices on this host.
    pub count: usize,
    pub name: String,
    /// Device memory in bytes.
    pub total_mem: usize,
    /// Compute capability (major, minor), e.g. (9, 0) for an H100.
    pub cc: (i32, i32),
    /// The CUDA version the driver supports, e.g. (12, 8).
    pub driver_version: (i32, i32),
    pub nvrtc_version: (i32, i32),
}

impl fmt::Display for DeviceProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cuda:{} {} ({:.1} GiB, compute capability {}.{}, driver CUDA {}.{}, NVRTC {}.{})",
            self.ordinal,
            self.name,
            self.total_mem as f64 / (1u64 << 30) as f64,
            self.cc.0,
            self.cc.1,
            self.driver_version.0,
            self.driver_version.1,
            self.nvrtc_version.0,
            self.nvrtc_version.1
        )
    }
}

/// Why no GPU is usable: each says what was missing and how to fix it, on one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoGpu {
    /// libcuda.so could not be loaded.
    DriverLibrary,
    /// cuInit failed (no driver loaded, or driver older than the library).
    DriverInit(String),
    /// The driver sees no device (none installed, or CUDA_VISIBLE_DEVICES hides them).
    NoDevice,
    /// An ordinal past the visible devices.
    BadOrdinal { ordinal: usize, count: usize },
    /// libnvrtc.so could not be loaded.
    Nvrtc,
    /// A device query failed.
    Query(String),
}

impl fmt::Display for NoGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoGpu::DriverLibrary => write!(
                f,
                "no GPU: the CUDA driver library (libcuda.so) was not found; install the NVIDIA \
                 driver or use --device cpu"
            ),
            NoGpu::DriverInit(e) => write!(
                f,
                "no GPU: the CUDA driver failed to initialize ({e}); check nvidia-smi or use \
                 --device cpu"
            ),
            NoGpu::NoDevice => write!(
                f,
                "no GPU: the CUDA driver sees no device (check CUDA_VISIBLE_DEVICES and \
                 nvidia-smi) or use --device cpu"
            ),
            NoGpu::BadOrdinal { ordinal, count } => write!(
                f,
                "no GPU: device {ordinal} does not exist ({count} visible); use an ordinal \
                 below {count}"
            ),
            NoGpu::Nvrtc => write!(
                f,
                "no GPU: the NVRTC library (libnvrtc.so) that compiles the kernels was not \
                 found; install the CUDA toolkit or run scripts/lib/install-nvrtc.sh and add its \
                 lib directory to LD_LIBRARY_PATH, or use --device cpu"
            ),
            NoGpu::Query(e) => write!(f, "no GPU: a device query failed ({e})"),
        }
    }
}

impl std::error::Error for NoGpu {}

/// The number of visible devices, after checking the driver library and the driver.
pub fn device_count() -> Result<usize, NoGpu> {
    if !unsafe { sys::is_culib_present() } {
        return Err(NoGpu::DriverLibrary);
    }
    match result::init() {
        Ok(()) => {}
        Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_NO_DEVICE => {
            return Err(NoGpu::NoDevice);
        }
        Err(e) => return Err(NoGpu::DriverInit(e.to_string())),
    }
    let count = result::device::get_count().map_err(|e| NoGpu::Query(e.to_string()))?;
    if count <= 0 {
        return Err(NoGpu::NoDevice);
    }
    Ok(count as usize)
}

/// Device 0.
pub fn probe() -> Result<DeviceProbe, NoGpu> {
    probe_device(0)
}

/// Device `ordinal`: name, memory, compute capability, driver and NVRTC versions.
pub fn probe_device(ordinal: usize) -> Result<DeviceProbe, NoGpu> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(NoGpu::BadOrdinal { ordinal, count });
    }
    let q = |e: result::DriverError| NoGpu::Query(e.to_string());
    let dev = result::device::get(ordinal as i32).map_err(q)?;
    let name = result::device::get_name(dev).map_err(q)?;
    let total_mem = unsafe { result::device::total_mem(dev) }.map_err(q)?;
    let attr = |a| unsafe { result::device::get_attribute(dev, a) }.map_err(q);
    let cc = (
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let mut v = 0;
    unsafe { sys::cuDriverGetVersion(&mut v) }.result().map_err(q)?;
    if !nvrtc::is_available() {
        return Err(NoGpu::Nvrtc);
    }
    let nvrtc_version = nvrtc::version().map_err(|e| NoGpu::Query(e.to_string()))?;
    Ok(DeviceProbe { ordinal, count, name, total_mem, cc, driver_version: (v / 1000, (v % 1000) / 10), nvrtc_version })
}
