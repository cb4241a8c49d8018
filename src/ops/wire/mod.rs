//! `--wire 1bit`'s columns on the device (format in `codec::onebit`): packed next to the
//! gradients before they are copied to the host, unpacked after the copy back. Encodings live
//! in f32 buffers as raw bits, laid out as the codec lays out their bytes. CPU side in
//! `cpu.rs` (the codec itself), CUDA in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
