//! The wire packed on the device (`ops::wire`, kernels/wire.cu) against the comm thread's own
//! packing, bit for bit. 1-bit: the columns of a bucket's stripes against `quantize` as the
//! 1-bit allreduce calls it, over several steps of error feedback (the residuals must stay the
//! same bits too), then the decoding against the CPU's. bf16: every class of f32 rounded as
//! the `half` crate rounds it, and every bf16 widened as it widens it. On each engine
//! available (GPU, emulator), and on the CPU backend, whose side is the codec itself.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::*;
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::codec::onebit::{Land, column_words, columns, decode, encoded_len};
use dcgan_train::comm::onebit::packed_layout;
use dcgan_train::comm::onebit::quantize::quantize;

/// The bits of a device buffer.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A bucket of `n` values in fragments of `frag` values laid out as the packed 1-bit
/// allreduce lays them out (`packed_layout`, from each fragment's first value on): (value
/// start, length, first byte) of each stripe.
fn stripes(n: usize, frag: usize, p: usize) -> Vec<(usize, usize, usize)> {
    (0..n)
        .step_by(frag)
        .flat_map(|f0| packed_layout(frag.min(n - f0), p).into_iter().map(move |(s, len, b)| (f0 + s, len, 4 * f0 + b)))
        .collect()
}

#[test]
fn onebit_packing_is_the_comm_threads_bit_for_bit_over_steps_of_feedback() {
    let mut rng = rng(22);
    for (n, frag, p) in [(5000, 5000, 3), (3000, 1100, 4), (600, 600, 1), (70, 70, 2)] {
        let vectors = stripes(n, frag, p);
        let cols = columns(vectors.iter().copied());
        let table: Vec<f32> = column_words(&cols).into_iter().map(f32::from_bits).collect();
        let engines = engines("1-bit wire");
        let mut devices: Vec<_> = engines
            .iter()
            .map(|cu| {
                (
                    up(cu, &table),
                    up(cu, &vec![0.0; n]),
                    cu.alloc(n).unwrap(),
                    cu.alloc(n).unwrap(),
                    cu.alloc(cols.len()).unwrap(),
                )
            })
            .collect();
        let mut cpu_residual = vec![0.0f32; n];
        let mut want_residual = vec![0.0f32; n];
        for step in 0..3 {
            let g: Vec<f32> = random(&mut rng, n, 1.0).iter().map(|v| v * (1.0 + step as f32)).collect();
            // The comm thread: each stripe quantized as a vector of its own into its bytes.
            let mut want = vec![0u8; 4 * n];
            for &(start, len, byte) in &vectors {
                let r = start..start + len;
                quantize(&g[r.clone()], &mut want_residual[r], &mut want[byte..byte + encoded_len(len)]);
            }
            let want_words: Vec<u32> = want.chunks(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).collect();
            let mut want_decoded = vec![0.0f32; n];
            for &(start, len, byte) in &vectors {
                decode(&want[byte..byte + encoded_len(len)], &mut want_decoded[start..start + len], Land::Copy);
            }
            // Only the bytes the stripes' encodings fill are compared (the rest is not written).
            let used = |w: &[u32]| -> Vec<u32> {
                vectors.iter().flat_map(|&(_, len, byte)| w[byte / 4..(byte + encoded_len(len)) / 4].to_vec()).collect()
            };
            // Each column's residual's sum of squares, in f64 from the definition.
            let want_sq: Vec<f64> = cols
                .iter()
                .map(|c| want_residual[c.start..c.start + c.len].iter().map(|&x| (x as f64).powi(2)).sum())
                .collect();
            let close_sq = |got: &[f32]| got.iter().zip(&want_sq).all(|(&g, &w)| (g as f64 - w).abs() <= 1e-6 * w);
            let mut cpu_enc = vec![0.0; n];
            let mut cpu_sq = vec![0.0; cols.len()];
            Cpu.wire_onebit_quantize(
                View::whole(&table),
                View::whole(&g),
                ViewMut::whole(&mut cpu_residual),
                ViewMut::whole(&mut cpu_enc),
                ViewMut::whole(&mut cpu_sq),
            );
            assert_eq!(used(&bits(&cpu_enc)), used(&want_words), "CPU n={n} step {step}");
            assert_eq!(bits(&cpu_residual), bits(&want_residual), "CPU residual n={n} step {step}");
            assert!(close_sq(&cpu_sq), "CPU squares n={n} step {step}");
            for (cu, (btable, bres, benc, bdec, bsq)) in engines.iter().zip(&mut devices) {
                let bg = up(cu, &g);
                let (t, v) = (View::whole(&*btable), View::whole(&bg));
                cu.wire_onebit_quantize(t, v, ViewMut::whole(bres), ViewMut::whole(benc), ViewMut::whole(bsq));
                let who = format!("{} n={n} frag={frag} p={p} step {step}", cu.describe());
                assert_eq!(used(&bits(&down(cu, benc))), used(&want_words), "{who}");
                assert_eq!(bits(&down(cu, bres)), bits(&want_residual), "{who}: residual");
                assert_eq!(bits(&down(cu, bsq)), bits(&cpu_sq), "{who}: squares");
                cu.wire_onebit_decode(View::whole(btable), View::whole(benc), ViewMut::whole(bdec));
                assert_eq!(bits(&down(cu, bdec)), bits(&want_decoded), "{who}: decoded");
            }
        }
    }
}

#[test]
fn bf16_packing_rounds_and_widens_as_half_does() {
    use half::bf16;
    // Every sign and exponent with the dropped half at the rounding boundaries (ties with even
    // and odd kept parts, overflow to infinity, NaNs), and an odd count: two to a float.
    let x: Vec<f32> = (0..=u16::MAX)
        .flat_map(|high| [0, 0x7FFF, 0x8000, 0x8001].map(|low| f32::from_bits(u32::from(high) << 16 | low)))
        .chain([1.5f32])
        .collect();
    let want: Vec<u16> = x.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
    // The bf16 the encoding makes: all but the signalling NaNs (`half` quiets those).
    let signalling = |b: u16| (b & 0x7FFF) > 0x7F80 && b & 0x0040 == 0;
    let enc: Vec<u16> = (0..=u16::MAX).filter(|&b| !signalling(b)).collect();
    let enc_floats: Vec<f32> = enc
        .chunks(2)
        .map(|p| f32::from_bits(u32::from(p[0]) | u32::from(p.get(1).copied().unwrap_or(0)) << 16))
        .collect();
    let widened: Vec<u32> = enc.iter().map(|&b| bf16::from_bits(b).to_f32().to_bits()).collect();
    let halves = |floats: &[f32], n: usize| -> Vec<u16> {
        floats.iter().flat_map(|v| [v.to_bits() as u16, (v.to_bits() >> 16) as u16]).take(n).collect()
    };
    let mut cpu_out = vec![0.0; x.len().div_ceil(2)];
    Cpu.wire_bf16_encode(View::whole(&x), ViewMut::whole(&mut cpu_out));
    assert_eq!(halves(&cpu_out, x.len()), want, "CPU encoding");
    let mut cpu_wide = vec![0.0; enc.len()];
    Cpu.wire_bf16_decode(View::whole(&enc_floats), ViewMut::whole(&mut cpu_wide));
    assert_eq!(bits(&cpu_wide), widened, "CPU decoding");
    for cu in engines("bf16 wire") {
        let mut out = cu.alloc(x.len().div_ceil(2)).unwrap();
        cu.wire_bf16_encode(View::whole(&up(&cu, &x)), ViewMut::whole(&mut out));
        assert_eq!(halves(&down(&cu, &out), x.len()), want, "{}: encoding", cu.describe());
        let mut wide = cu.alloc(enc.len()).unwrap();
        cu.wire_bf16_decode(View::whole(&up(&cu, &enc_floats)), ViewMut::whole(&mut wide));
        assert_eq!(bits(&down(&cu, &wide)), widened, "{}: decoding", cu.describe());
    }
}
