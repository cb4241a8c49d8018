//! The CUDA emulator: the same kernels/*.cu, compiled as host C++ against kernels/emu/cuda_emu.h
//! and run on the CPU one block at a time (each thread a fiber, real barrier semantics), so the
//! launchers and kernels can be tested against the CPU backend on machines without a GPU.
//! For tests and debugging only: it is slow, and it has no streams (everything is synchronous).
//!
//! "Device" memory is host memory placed right before an inaccessible guard page, so a kernel
//! reading or writing past the end of a buffer crashes instead of passing silently.

use super::kernel_table::Dims;
use super::{Family, kernel_cache, nvrtc};
use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

const SHIM: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/emu/cuda_emu.h"));

type Tramp = unsafe extern "C" fn(*mut *mut c_void);
type LaunchFn = unsafe extern "C" fn(Tramp, *const u32, *const u32, *mut *mut c_void, *mut c_char, c_int) -> c_int;

pub(crate) struct Emulator {
    launch: LaunchFn,
    /// `tramps[family as usize][kernel index]`
    tramps: Vec<Vec<Tramp>>,
}

/// How the emulator library is compiled. -ffp-contract=off: GNU C++ fuses a*b+c into an FMA
/// wherever the target has one (not plain x86-64, but aarch64), which would undo the kernels'
/// __fmul_rn/__fadd_rn. -U_FORTIFY_SOURCE: where a toolchain fortifies by default (Ubuntu's),
/// _longjmp becomes a checked jump that aborts when it lands on another stack, as every fiber
/// switch does.
const FLAGS: [&str; 7] = ["-std=c++17", "-O2", "-ffp-contract=off", "-U_FORTIFY_SOURCE", "-fPIC", "-shared", "-w"];

/// The C++ compiler that builds the emulator: `$CXX`, default `c++`.
fn compiler() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "c++".into())
}

/// Whether a C++ compiler is there to build the emulator (tests skip it where not).
pub fn is_available() -> bool {
    Command::new(compiler()).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// The one translation unit: the shim, every family, a trampoline per kernel.
fn main_source() -> String {
    let mut s = String::from("#include \"cuda_emu.h\"\n");
    for f in Family::ALL {
        s += &format!("#include \"{}\"\n", f.kernels().file);
    }
    for f in Family::ALL {
        for k in f.kernels().kernels {
            s += &format!("EMU_KERNEL({})\n", k.name);
        }
    }
    s
}

fn files() -> Vec<(String, String)> {
    let mut v = vec![("cuda_emu.h".to_string(), SHIM.to_string()), ("emu_main.cpp".to_string(), main_source())];
    for (name, text) in nvrtc::headers() {
        v.push((name.to_string(), text));
    }
    for f in Family::ALL {
        v.push((f.kernels().file.to_string(), f.kernels().source.to_string()));
    }
    v
}

fn build_dir() -> PathBuf {
    kernel_cache::cache_dir().unwrap_or_else(|| std::env::temp_dir().join("dcgan-train-kernels")).join("emu")
}

/// Build (or find in the cache) the emulator library; once per process.
fn library() -> Result<PathBuf> {
    static LIB: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    LIB.get_or_init(|| build().map_err(|e| format!("{e:#}"))).clone().map_err(|e| anyhow!(e))
}

fn build() -> Result<PathBuf> {
    let files = files();
    let cxx = compiler();
    let mut h = Sha256::new();
    for (name, text) in &files {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
    }
    h.update(cxx.as_bytes());
    h.update(FLAGS.join(" ").as_bytes());
    let key: String = h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
    let dir = build_dir();
    let lib = dir.join(format!("libdcgan-emu-{key}.so"));
    if lib.exists() {
        return Ok(lib);
    }
    let src = dir.join(format!("src-{key}-{}", std::process::id()));
    std::fs::create_dir_all(&src).with_context(|| format!("creating {}", src.display()))?;
    for (name, text) in &files {
        std::fs::write(src.join(name), text)?;
    }
    let tmp = dir.join(format!("libdcgan-emu-{key}.so.tmp.{}", std::process::id()));
    let out = Command::new(&cxx)
        .args(FLAGS)
        .arg("-I")
        .arg(&src)
        .arg(src.join("emu_main.cpp"))
        .arg("-o")
        .arg(&tmp)
        .output()
        .with_context(|| format!("running {cxx}"))?;
    let _ = std::fs::remove_dir_all(&src);
    if !out.status.success() {
        bail!("building the CUDA emulator with {cxx} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::rename(&tmp, &lib)?;
    Ok(lib)
}

fn dlsym(handle: *mut c_void, name: &str) -> Result<*mut c_void> {
    let c = CString::new(name)?;
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if p.is_null() {
        bail!("symbol {name} missing from the emulator library");
    }
    Ok(p)
}

impl Emulator {
    pub fn new() -> Result<Emulator> {
        let path = library()?;
        let cpath = CString::new(path.to_string_lossy().as_bytes())?;
        // Never closed: the library lives as long as the process.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            let msg = unsafe { CStr::from_ptr(libc::dlerror()) };
            bail!("loading {}: {}", path.display(), msg.to_string_lossy());
        }
        let launch: LaunchFn = unsafe { std::mem::transmute(dlsym(handle, "emu_launch")?) };
        let tramps = Family::ALL
            .iter()
            .map(|f| {
                f.kernels()
                    .kernels
                    .iter()
                    .map(|k| {
                        let p = dlsym(handle, &format!("emu_tramp_{}", k.name))?;
                        Ok(unsafe { std::mem::transmute::<*mut c_void, Tramp>(p) })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Emulator { launch, tramps })
    }

    pub fn launch(&self, family: Family, index: usize, name: &str, dims: Dims, params: &mut [*mut c_void]) {
        assert_eq!(dims.shared_bytes, 0, "the emulator has no dynamic shared memory");
        let grid = [dims.grid.0, dims.grid.1, dims.grid.2];
        let block = [dims.block.0, dims.block.1, dims.block.2];
        let mut err = [0 as c_char; 512];
        let rc = unsafe {
            (self.launch)(
                self.tramps[family as usize][index],
                grid.as_ptr(),
                block.as_ptr(),
                params.as_mut_ptr(),
                err.as_mut_ptr(),
                err.len() as c_int,
            )
        };
        if rc != 0 {
            let msg = unsafe { CStr::from_ptr(err.as_ptr()) };
            panic!("emulated kernel {name} {dims:?}: {}", msg.to_string_lossy());
        }
    }
}

/// Host memory standing in for device memory: zero-filled floats that end exactly at an
/// inaccessible page (and start after one).
pub(crate) struct HostAlloc {
    map: *mut c_void,
    map_len: usize,
    data: *mut f32,
}

unsafe impl Send for HostAlloc {}
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    pub fn new(len: usize) -> Result<HostAlloc> {
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let bytes = 4 * len.max(1);
        let data_pages = bytes.div_ceil(page);
        let map_len = (data_pages + 2) * page;
        let map = unsafe {
            libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if map == libc::MAP_FAILED {
            bail!("emulator: cannot map {map_len} bytes");
        }
        let rw = unsafe { (map as *mut u8).add(page) };
        if unsafe { libc::mprotect(rw as *mut c_void, data_pages * page, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            unsafe { libc::munmap(map, map_len) };
            bail!("emulator: mprotect failed");
        }
        // End-aligned: the first byte past the buffer is the guard page.
        let data = unsafe { rw.add(data_pages * page - bytes) } as *mut f32;
        Ok(HostAlloc { map, map_len, data })
    }

    pub fn addr(&self) -> u64 {
        self.data as u64
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

#[cfg(test)]
#[path = "emu_tests.rs"]
mod tests;
