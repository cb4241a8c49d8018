//! NVRTC: compile one kernel family (`kernels/<file>.cu` with common.cuh and the generated
//! params.cuh) to PTX or CUBIN, keeping the compiler log so that warnings fail the CI test and
//! errors reach the user with file and line.

use super::Family;
use anyhow::{Result, anyhow, bail};
use cudarc::nvrtc::sys;
use std::ffi::{CStr, CString, c_char, c_int};

/// common.cuh, included by every family.
pub const COMMON_HEADER: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/common.cuh"));
/// tensor_core.cuh, the TF32 MMA primitives of the convolutions.
pub const TENSOR_CORE_HEADER: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/tensor_core.cuh"));

/// What NVRTC should produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Virtual-architecture PTX (`compute_XY`), JIT-compiled by the driver at load.
    Ptx,
    /// Machine code for one architecture (`sm_XY`): nothing left to compile at load.
    Cubin,
}

/// A compile target: the architecture number (90 for sm_90 / compute_90) and the output kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub arch: u32,
    pub output: Output,
}

impl Target {
    /// The `--gpu-architecture` value: sm_90 for CUBIN, compute_90 for PTX.
    pub fn arch_flag(&self) -> String {
        match self.output {
            Output::Ptx => format!("compute_{}", self.arch),
            Output::Cubin => format!("sm_{}", self.arch),
        }
    }
}

/// A successful compile: the image (PTX text or CUBIN bytes) and the compiler log.
#[derive(Debug)]
pub struct Compiled {
    pub image: Vec<u8>,
    /// Warnings, if any: tests/cuda_nvrtc.rs fails on them.
    pub log: String,
}

/// Whether the NVRTC library can be loaded (cudarc panics on first use when it cannot).
pub fn is_available() -> bool {
    unsafe { sys::is_culib_present() }
}

fn check(r: sys::nvrtcResult, what: &str) -> Result<()> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    let msg = unsafe { CStr::from_ptr(sys::nvrtcGetErrorString(r)) };
    bail!("NVRTC {what} failed: {}", msg.to_string_lossy())
}

fn require() -> Result<()> {
    if !is_available() {
        bail!(
            "the NVRTC library (libnvrtc.so) was not found: install the CUDA toolkit or run \
             scripts/lib/install-nvrtc.sh, and add its lib directory to LD_LIBRARY_PATH"
        );
    }
    Ok(())
}

/// NVRTC's (major, minor) version.
pub fn version() -> Result<(i32, i32)> {
    require()?;
    let (mut major, mut minor) = (0 as c_int, 0 as c_int);
    check(unsafe { sys::nvrtcVersion(&mut major, &mut minor) }, "version")?;
    Ok((major, minor))
}

/// The architectures this NVRTC can compile for (e.g. [75, 80, 86, 89, 90, 100, 120]).
pub fn supported_archs() -> Result<Vec<u32>> {
    require()?;
    let mut n: c_int = 0;
    check(unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }, "arch count")?;
    let mut archs = vec![0 as c_int; n.max(0) as usize];
    check(unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }, "arch list")?;
    Ok(archs.into_iter().map(|a| a as u32).collect())
}

/// The options every kernel is compiled with. `-lineinfo` costs nothing at run time and lets
/// compute-sanitizer and Nsight Compute point at source lines.
pub fn options(target: &Target) -> Vec<String> {
    vec![format!("--gpu-architecture={}", target.arch_flag()), "--std=c++17".into(), "-lineinfo".into()]
}

/// The headers every family is compiled with: common.cuh, tensor_core.cuh and the generated
/// params.cuh.
pub fn headers() -> Vec<(&'static str, String)> {
    vec![
        ("common.cuh", COMMON_HEADER.to_string()),
        ("tensor_core.cuh", TENSOR_CORE_HEADER.to_string()),
        ("params.cuh", super::params_header()),
    ]
}

/// Compile `family` for `target`. An error carries NVRTC's log (file and line of each error).
pub fn compile_family(family: Family, target: &Target) -> Result<Compiled> {
    let file = family.kernels();
    compile(&format!("kernels/{}", file.file), file.source, &headers(), &options(target), target.output)
}

/// Compile one program; `name` is what the log calls the main file.
pub fn compile(
    name: &str,
    source: &str,
    headers: &[(&str, String)],
    options: &[String],
    output: Output,
) -> Result<Compiled> {
    require()?;
    let src = CString::new(source).map_err(|_| anyhow!("{name} contains a NUL byte"))?;
    let cname = CString::new(name)?;
    let header_src: Vec<CString> = headers.iter().map(|(_, s)| CString::new(s.as_str())).collect::<Result<_, _>>()?;
    let header_names: Vec<CString> = headers.iter().map(|(n, _)| CString::new(*n)).collect::<Result<_, _>>()?;
    let header_src_ptrs: Vec<*const c_char> = header_src.iter().map(|s| s.as_ptr()).collect();
    let header_name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
    let opts: Vec<CString> = options.iter().map(|o| CString::new(o.as_str())).collect::<Result<_, _>>()?;
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();

    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    check(
        unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                headers.len() as c_int,
                header_src_ptrs.as_ptr(),
                header_name_ptrs.as_ptr(),
            )
        },
        "program creation",
    )?;
    // Destroy the program on every path out of here.
    struct Guard(sys::nvrtcProgram);
    impl Drop for Guard {
        fn drop(&mut self) {
            unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        }
    }
    let guard = Guard(prog);

    let status = unsafe { sys::nvrtcCompileProgram(guard.0, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
    let log = program_log(guard.0)?;
    if status != sys::nvrtcResult::NVRTC_SUCCESS {
        bail!("NVRTC could not compile {name} ({}):\n{}", options.join(" "), log.trim_end());
    }
    let image = match output {
        Output::Ptx => {
            let mut size = 0usize;
            check(unsafe { sys::nvrtcGetPTXSize(guard.0, &mut size) }, "PTX size")?;
            let mut buf = vec![0u8; size];
            check(unsafe { sys::nvrtcGetPTX(guard.0, buf.as_mut_ptr() as *mut c_char) }, "PTX")?;
            buf
        }
        Output::Cubin => {
            let mut size = 0usize;
            check(unsafe { sys::nvrtcGetCUBINSize(guard.0, &mut size) }, "CUBIN size")?;
            let mut buf = vec![0u8; size];
            check(unsafe { sys::nvrtcGetCUBIN(guard.0, buf.as_mut_ptr() as *mut c_char) }, "CUBIN")?;
            buf
        }
    };
    Ok(Compiled { image, log })
}

fn program_log(prog: sys::nvrtcProgram) -> Result<String> {
    let mut size = 0usize;
    check(unsafe { sys::nvrtcGetProgramLogSize(prog, &mut size) }, "log size")?;
    let mut buf = vec![0u8; size.max(1)];
    check(unsafe { sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char) }, "log")?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The PTX text of a PTX image (without its trailing NUL).
pub fn ptx_text(image: &[u8]) -> String {
    let end = image.iter().position(|&b| b == 0).unwrap_or(image.len());
    String::from_utf8_lossy(&image[..end]).into_owned()
}
