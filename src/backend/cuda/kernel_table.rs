//! How the Rust launchers and the CUDA sources agree: kernel signatures checked against the
//! PTX, `#[repr(C)]` parameter structs whose C declarations are generated from Rust, and the
//! fast integer division the kernels use.
//!
//! Each op family declares its kernels once with `cuda_kernels!`, which yields the family's
//! `KERNELS` table (source file and signatures) and one typed launch function per kernel, so
//! a launcher cannot name a kernel or pass an argument type that the table does not list; the
//! NVRTC test (tests/cuda_nvrtc.rs) then checks every table entry against the `.entry`
//! declarations in the PTX.

/// How one kernel parameter is passed, as PTX declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A device pointer (`float*`, `double*`).
    Ptr,
    /// `long long`
    I64,
    /// `int`
    I32,
    /// `float`
    F32,
    /// `double`
    F64,
    /// A struct passed by value, generated from a `device_struct!`.
    Struct { name: &'static str, size: usize, align: usize },
}

/// A Rust type that can be passed by value as a kernel parameter.
///
/// # Safety
/// `KIND` must describe the type's exact size and representation as the kernel declares it.
pub unsafe trait KernelArg: Copy + 'static {
    const KIND: ParamKind;
}

/// A device address (of a buffer plus an offset), passed where a kernel takes `float*`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevPtr(pub u64);

impl DevPtr {
    /// The address `floats` f32 further on.
    pub fn offset(self, floats: usize) -> DevPtr {
        DevPtr(self.0 + 4 * floats as u64)
    }
}

unsafe impl KernelArg for DevPtr {
    const KIND: ParamKind = ParamKind::Ptr;
}
unsafe impl KernelArg for i64 {
    const KIND: ParamKind = ParamKind::I64;
}
unsafe impl KernelArg for i32 {
    const KIND: ParamKind = ParamKind::I32;
}
unsafe impl KernelArg for f32 {
    const KIND: ParamKind = ParamKind::F32;
}
unsafe impl KernelArg for f64 {
    const KIND: ParamKind = ParamKind::F64;
}

/// One kernel: its `extern "C"` name and parameter list.
#[derive(Debug)]
pub struct KernelSig {
    pub name: &'static str,
    /// What the launcher passes: tests/cuda_nvrtc.rs checks it against the kernel's PTX.
    pub params: &'static [ParamKind],
}

/// One CUDA source file (one NVRTC program, one module) and the kernels launched from it.
#[derive(Debug)]
pub struct KernelFile {
    /// File name under kernels/.
    pub file: &'static str,
    pub source: &'static str,
    pub kernels: &'static [KernelSig],
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

impl Dims {
    /// A 1-D grid of `blocks` blocks of `threads` threads.
    pub fn linear(blocks: usize, threads: u32) -> Dims {
        Dims::grid3((blocks, 1, 1), threads)
    }
    pub fn grid3(grid: (usize, usize, usize), threads: u32) -> Dims {
        let dim = |v: usize, limit: usize| -> u32 {
            assert!(v <= limit, "grid dimension {v} exceeds the CUDA limit {limit}");
            v as u32
        };
        Dims {
            grid: (dim(grid.0, (1 << 31) - 1), dim(grid.1, 65535), dim(grid.2, 65535)),
            block: (threads, 1, 1),
            shared_bytes: 0,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.grid.0 == 0 || self.grid.1 == 0 || self.grid.2 == 0
    }
}

/// The C type a `device_struct!` field type is written as.
pub fn c_type_name(rust: &str) -> &str {
    match rust {
        "i32" => "int",
        "u32" => "unsigned int",
        "f32" => "float",
        "f64" => "double",
        other => other,
    }
}

/// A `#[repr(C)]` struct passed to kernels by value. Its C declaration (`c_decl()`) is written
/// into the generated `params.cuh`, so the kernels can never disagree on field order.
/// Fields are i32, u32, f32, f64 or another device struct declared before it.
macro_rules! device_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident : $ty:ident,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct $name { $($(#[$fmeta])* pub $field: $ty,)* }

        impl $name {
            /// The C declaration of this struct, for the generated params.cuh.
            pub fn c_decl() -> String {
                let mut s = format!("struct {} {{\n", stringify!($name));
                $(
                    s += &format!(
                        "  {} {};\n",
                        $crate::backend::cuda::kernel_table::c_type_name(stringify!($ty)),
                        stringify!($field)
                    );
                )*
                s += "};\n";
                s
            }
        }

        unsafe impl $crate::backend::cuda::kernel_table::KernelArg for $name {
            const KIND: $crate::backend::cuda::kernel_table::ParamKind =
                $crate::backend::cuda::kernel_table::ParamKind::Struct {
                    name: stringify!($name),
                    size: ::std::mem::size_of::<$name>(),
                    align: ::std::mem::align_of::<$name>(),
                };
        }
    };
}
pub(crate) use device_struct;

/// Declares the kernels of one family: `KERNELS` (the source file and every signature) and a
/// typed launch function per kernel: `launch::name(cu, dims, args...)`.
macro_rules! cuda_kernels {
    (family: $family:expr, file: $file:literal; $(fn $name:ident($($arg:ident : $ty:ty),* $(,)?);)*) => {
        /// This family's CUDA source and the signature of every kernel launched from it.
        pub const KERNELS: $crate::backend::cuda::kernel_table::KernelFile =
            $crate::backend::cuda::kernel_table::KernelFile {
                file: $file,
                source: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/", $file)),
                kernels: &[$($crate::backend::cuda::kernel_table::KernelSig {
                    name: stringify!($name),
                    params: &[$(<$ty as $crate::backend::cuda::kernel_table::KernelArg>::KIND),*],
                }),*],
            };

        /// One typed launch function per kernel: `name(cu, dims, args...)`.
        #[allow(dead_code, unused_imports)]
        mod launch {
            use super::*;

            #[allow(non_camel_case_types, clippy::enum_variant_names)]
            #[derive(Clone, Copy)]
            #[repr(usize)]
            enum KernelIndex { $($name),* }

            $(
                #[allow(clippy::too_many_arguments)]
                pub(super) fn $name(
                    cu: &$crate::backend::cuda::Cuda,
                    dims: $crate::backend::cuda::kernel_table::Dims,
                    $($arg: $ty),*
                ) {
                    let mut params = [$(&$arg as *const $ty as *mut ::std::ffi::c_void),*];
                    cu.launch(
                        $family,
                        KernelIndex::$name as usize,
                        stringify!($name),
                        dims,
                        &mut params,
                    );
                }
            )*
        }
    };
}
pub(crate) use cuda_kernels;

device_struct! {
    /// n / d as a multiply-high and a shift, valid for 0 <= n < 2^31 (`fdiv` in common.cuh).
    pub struct FastDiv {
        pub d: u32,
        pub mul: u32,
        pub shr: u32,
    }
}

impl FastDiv {
    /// The round-up method: with l = ceil(log2 d), p = 31 + l, mul = ceil(2^p / d),
    /// n / d = (n * mul) >> p for every n < 2^31 (mul fits 32 bits because d > 2^(l-1)).
    pub fn new(d: usize) -> FastDiv {
        assert!((1..1 << 31).contains(&d), "fast division by {d}");
        if d == 1 {
            return FastDiv { d: 1, mul: 0, shr: 0 };
        }
        let l = usize::BITS - (d - 1).leading_zeros(); // ceil(log2 d) for d >= 2
        let p = 31 + l;
        let mul = (1u64 << p).div_ceil(d as u64);
        debug_assert!(mul <= u32::MAX as u64);
        FastDiv { d: d as u32, mul: mul as u32, shr: p - 32 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernels compute for n / d (`fdiv` in common.cuh).
    fn kernel_div(f: &FastDiv, n: u32) -> u32 {
        if f.d == 1 { n } else { (((n as u64 * f.mul as u64) >> 32) as u32) >> f.shr }
    }

    #[test]
    fn fast_division_matches_integer_division() {
        let mut divisors: Vec<usize> = (1..=2100).collect();
        divisors.extend([4095, 4096, 4097, 12544, 65535, 65536, 262144, 1 << 30, (1 << 31) - 1]);
        let mut numerators: Vec<u32> = (0..70_000).collect();
        numerators.extend([(1 << 31) - 1, (1 << 31) - 2, 1 << 30, 123_456_789, 2_000_000_000]);
        for &d in &divisors {
            let f = FastDiv::new(d);
            for &n in &numerators {
                assert_eq!(kernel_div(&f, n), n / d as u32, "{n} / {d}");
            }
        }
    }

    device_struct! {
        /// A struct used only to test the generated declaration.
        pub struct Probe {
            pub a: i32,
            pub b: f32,
            pub c: FastDiv,
            pub d: u32,
        }
    }

    #[test]
    fn generated_c_declaration_lists_fields_in_order() {
        assert_eq!(Probe::c_decl(), "struct Probe {\n  int a;\n  float b;\n  FastDiv c;\n  unsigned int d;\n};\n");
        assert_eq!(<Probe as KernelArg>::KIND, ParamKind::Struct { name: "Probe", size: 24, align: 4 });
    }
}
