//! The wire encodings on the device: `--wire 1bit`'s columns (format in `codec::onebit`) and
//! `--wire bf16`'s values (`codec::bf16`), packed next to the gradients before they are copied
//! to the host, unpacked after the copy back. Encodings live in f32 buffers as raw bits, laid
//! out as the codecs lay out their bytes. CPU side in
//! `cpu.rs` (the codec itself), CUDA in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// The bf16 packing's shape: `values` values take `floats` floats, two to a float.
pub fn check_bf16_floats(values: usize, floats: usize) {
    assert_eq!(floats, crate::codec::bf16::floats_for(values), "bf16 packing: {values} values take two to a float");
}
