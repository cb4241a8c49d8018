//! The bf16 conversions of `--wire bf16` on one 1 MiB fragment (262,144 floats), ours against
//! `half`'s one-value conversion (the straightforward alternative), in one run so the ratio is
//! fair on a noisy machine: `cargo bench --bench bf16_wire`. Encoding and decoding are what
//! the comm thread does to a fragment when the device does not pack it; the combination is
//! what it does to the values it reduces either way.

use dcgan_train::codec::bf16::{decode_into, encode_into};
use dcgan_train::comm::transport::Combine;
use dcgan_train::comm::transport::bf16_wire::combine;
use half::bf16;
use std::hint::black_box;
use std::time::Instant;

const N: usize = 1 << 18;

/// Median microseconds of `f` over 301 runs, the two ways taking turns.
fn median_us_pair(mut ours: impl FnMut(), mut theirs: impl FnMut()) -> (f64, f64) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..301 {
        let t = Instant::now();
        ours();
        a.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        theirs();
        b.push(t.elapsed().as_secs_f64() * 1e6);
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    (a[150], b[150])
}

fn report(what: &str, (ours, theirs): (f64, f64)) {
    println!("{what:<28} ours {ours:>7.1} us   half {theirs:>7.1} us   half / ours {:.2}x", theirs / ours);
}

fn main() {
    // [N] gradients of mixed magnitude, and another rank's as bf16.
    let grads: Vec<f32> = (0..N).map(|i| ((i as f32) * 0.37).sin() * 1e-3 * (1 + i % 7) as f32).collect();
    let other: Vec<u16> = grads.iter().rev().map(|&v| bf16::from_f32(v).to_bits()).collect();
    let (mut out, mut out_half) = (vec![0u16; N], vec![0u16; N]);
    let (mut wide, mut wide_half) = (vec![0.0f32; N], vec![0.0f32; N]);
    report(
        "encode",
        median_us_pair(
            || encode_into(black_box(&grads), &mut out),
            || {
                for (v, o) in black_box(&grads).iter().zip(&mut out_half) {
                    *o = bf16::from_f32(*v).to_bits();
                }
            },
        ),
    );
    assert_eq!(out, out_half, "the two encodings differ");
    report(
        "decode",
        median_us_pair(
            || decode_into(black_box(&out), &mut wide),
            || black_box(&out).iter().zip(&mut wide_half).for_each(|(&b, v)| *v = bf16::from_bits(b).to_f32()),
        ),
    );
    assert_eq!(wide, wide_half, "the two decodings differ");
    let (mut sum, mut sum_half) = (out.clone(), out.clone());
    report(
        "add in f32 and round",
        median_us_pair(
            || {
                sum.copy_from_slice(&out);
                combine(black_box(&mut sum), &other, Combine::Add)
            },
            || {
                sum_half.copy_from_slice(&out);
                for (d, &b) in black_box(&mut sum_half).iter_mut().zip(&other) {
                    *d = bf16::from_f32(bf16::from_bits(*d).to_f32() + bf16::from_bits(b).to_f32()).to_bits();
                }
            },
        ),
    );
    assert_eq!(sum, sum_half, "the two sums differ");
}
