//! Generator noise that depends only on (seed, step, global sample index): a rank draws just
//! its own samples, and 2 ranks x 32 see the same noise as 1 rank x 64 over the same batch.

#[cfg(test)]
use crate::model::dcgan::NZ;
use crate::model::dcgan::seed_for;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// Purposes for `seed_for`, so that noise never reuses the weights' random numbers.
const NOISE_PURPOSE: u64 = 0x6e6f697365;
const FIXED_NOISE_PURPOSE: u64 = 0x66697865;
const UNIFORM_PURPOSE: u64 = 0x756e69666f726d;

/// One sample's z `[nz]`: stream `index` of a generator keyed by (seed, step).
fn sample(key: u64, index: u64, out: &mut [f32]) {
    let mut rng = ChaCha8Rng::seed_from_u64(key);
    rng.set_stream(index);
    for v in out.iter_mut() {
        *v = StandardNormal.sample(&mut rng);
    }
}

/// z for this rank's share of the global batch of `step`, channel-major [nz, B]: local
/// sample i is global sample i * world + rank (the data sampler's stride).
pub fn step_noise(seed: u64, step: u64, rank: usize, world: usize, nz: usize, out: &mut [f32]) {
    let batch = out.len() / nz;
    let key = seed_for(seed_for(seed, NOISE_PURPOSE), step);
    let mut z = vec![0.0f32; nz];
    for i in 0..batch {
        sample(key, (i * world + rank) as u64, &mut z);
        for (c, &v) in z.iter().enumerate() {
            out[c * batch + i] = v;
        }
    }
}

/// One uniform number in [0, 1) per sample of this rank's share of the global batch of
/// `step`, out `[B]`, drawn as `step_noise` draws z: local sample i is global sample
/// i * world + rank (WGAN-GP's interpolation weights).
pub fn step_uniform(seed: u64, step: u64, rank: usize, world: usize, out: &mut [f32]) {
    let key = seed_for(seed_for(seed, UNIFORM_PURPOSE), step);
    for (i, v) in out.iter_mut().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(key);
        rng.set_stream((i * world + rank) as u64);
        *v = rng.random::<f32>();
    }
}

/// `samples` [m, nz] (sample-major, m <= b) as G's input `out` [nz, b] (channel-major), the
/// columns past m zero.
pub fn to_channel_major(samples: &[f32], nz: usize, out: &mut [f32]) {
    let b = out.len() / nz;
    out.fill(0.0);
    for (i, z) in samples.chunks_exact(nz).enumerate() {
        for (c, &v) in z.iter().enumerate() {
            out[c * b + i] = v;
        }
    }
}

/// The fixed noise of the sample grids, [n, nz] sample-major (the same on every rank).
pub fn fixed_noise(seed: u64, n: usize, nz: usize) -> Vec<f32> {
    let key = seed_for(seed, FIXED_NOISE_PURPOSE);
    let mut out = vec![0.0; n * nz];
    for (i, z) in out.chunks_exact_mut(nz).enumerate() {
        sample(key, i as u64, z);
    }
    out
}

/// `steps` points from `a` to `b` (`[nz]`) along the great circle between them, [steps, nz]
/// sample-major, the first `a` and the last `b`. Spherical, not straight (White 2016,
/// "Sampling Generative Networks"): Gaussian noise of nz dimensions lies near the sphere of
/// radius sqrt(nz), and a straight line's middle falls inside it, where G never saw noise.
pub fn slerp_path(a: &[f32], b: &[f32], steps: usize) -> Vec<f32> {
    let norm = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let omega = (dot / (norm(a) * norm(b))).clamp(-1.0, 1.0).acos();
    let mut out = Vec::with_capacity(steps * a.len());
    for s in 0..steps {
        let t = s as f64 / (steps - 1).max(1) as f64;
        // Parallel or opposite ends have no one circle between them: the straight line is the
        // path (through the origin for opposite ones; independent Gaussian noise vectors are
        // all but orthogonal, so neither happens to the vectors `sample` walks between).
        let (wa, wb) = match omega.sin() {
            sin if sin.abs() < 1e-12 => (1.0 - t, t),
            sin => (((1.0 - t) * omega).sin() / sin, (t * omega).sin() / sin),
        };
        out.extend(a.iter().zip(b).map(|(&x, &y)| (wa * x as f64 + wb * y as f64) as f32));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_ranks_draw_the_one_rank_batch_between_them() {
        let mut one = vec![0.0; NZ * 8];
        step_noise(5, 3, 0, 1, NZ, &mut one);
        let (mut r0, mut r1) = (vec![0.0; NZ * 4], vec![0.0; NZ * 4]);
        step_noise(5, 3, 0, 2, NZ, &mut r0);
        step_noise(5, 3, 1, 2, NZ, &mut r1);
        for c in 0..NZ {
            for i in 0..4 {
                assert_eq!(r0[c * 4 + i], one[c * 8 + 2 * i]);
                assert_eq!(r1[c * 4 + i], one[c * 8 + 2 * i + 1]);
            }
        }
        let mut next = vec![0.0; NZ * 8];
        step_noise(5, 4, 0, 1, NZ, &mut next);
        assert_ne!(one, next, "another step draws other noise");
        let (mut u1, mut u2) = (vec![0.0; 6], vec![0.0; 3]);
        step_uniform(5, 3, 0, 1, &mut u1);
        step_uniform(5, 3, 1, 2, &mut u2);
        assert_eq!(u2, [u1[1], u1[3], u1[5]], "uniforms are drawn by global sample too");
        assert!(u1.iter().all(|&u| (0.0..1.0).contains(&u)) && u1[0] != u1[1], "{u1:?}");
        let mean = one.iter().map(|&v| v as f64).sum::<f64>() / one.len() as f64;
        let var = one.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / one.len() as f64;
        assert!(mean.abs() < 0.15 && (var - 1.0).abs() < 0.2, "standard normal: mean {mean}, var {var}");
    }

    #[test]
    fn the_path_runs_on_the_circle_from_one_end_to_the_other() {
        // Orthogonal ends of norms 2 and 4: the point at t lies at angle t * 90 degrees from a
        // with norm between the two (2 cos + 4 sin weights on the unit directions).
        let (a, b) = ([2.0f32, 0.0, 0.0], [0.0f32, 4.0, 0.0]);
        let path = slerp_path(&a, &b, 4);
        assert_eq!((&path[..3], &path[9..]), (&a[..], &b[..]), "the ends are the noise itself");
        for (s, p) in path.chunks_exact(3).enumerate() {
            let angle = s as f64 / 3.0 * std::f64::consts::FRAC_PI_2;
            let want = [2.0 * angle.cos(), 4.0 * angle.sin(), 0.0];
            assert!(p.iter().zip(want).all(|(&x, w)| (x as f64 - w).abs() < 1e-6), "step {s}: {p:?} against {want:?}");
        }
        // Parallel ends: the straight line.
        let line = slerp_path(&[1.0, 1.0], &[3.0, 3.0], 3);
        assert_eq!(line, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    }
}
