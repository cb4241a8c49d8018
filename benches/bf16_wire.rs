//! The comm thread's bf16 conversions on one 1 MiB fragment (262,144 floats), ours against
//! `half`'s one-value conversion (the straightforward alternative), in one run so the ratio is
//! fair on a noisy machine: `cargo bench --bench bf16_wire`.

use dcgan_train::comm::transport::Combine;
use dcgan_train::comm::transport::bf16_round::{decode_combine, round_and_encode, round_in_place};
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
    // [N] gradients of mixed magnitude.
    let grads: Vec<f32> = (0..N).map(|i| ((i as f32) * 0.37).sin() * 1e-3 * (1 + i % 7) as f32).collect();
    let mut x = grads.clone();
    let mut y = grads.clone();
    let mut out = vec![0u16; N];
    let mut out_half = vec![0u16; N];
    report(
        "round and encode",
        median_us_pair(
            || {
                x.copy_from_slice(&grads);
                round_and_encode(black_box(&mut x), &mut out)
            },
            || {
                y.copy_from_slice(&grads);
                for (v, o) in black_box(&mut y).iter_mut().zip(&mut out_half) {
                    let b = bf16::from_f32(*v);
                    *v = b.to_f32();
                    *o = b.to_bits();
                }
            },
        ),
    );
    report(
        "round in place",
        median_us_pair(
            || {
                x.copy_from_slice(&grads);
                round_in_place(black_box(&mut x))
            },
            || {
                y.copy_from_slice(&grads);
                black_box(&mut y).iter_mut().for_each(|v| *v = bf16::from_f32(*v).to_f32());
            },
        ),
    );
    report(
        "decode and add",
        median_us_pair(
            || decode_combine(black_box(&mut x), &out, Combine::Add),
            || {
                let y = black_box(&mut y);
                y.iter_mut().zip(&out_half).for_each(|(d, &b)| *d += bf16::from_bits(b).to_f32())
            },
        ),
    );
    assert_eq!(out, out_half, "the two encodings differ");
}
