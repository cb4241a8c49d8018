//! Tests of precision, recall, density and coverage: against a direct count in f64, and on sets
//! whose answers are known (the data itself, a collapsed generator, a far one).

use super::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// [n, dim] standard normal samples, scaled and shifted.
fn gaussian(n: usize, dim: usize, scale: f32, shift: f32, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n * dim)
        .map(|_| {
            shift
                + scale * {
                    let x: f32 = StandardNormal.sample(&mut rng);
                    x
                }
        })
        .collect()
}

/// Squared distances [a.n, b.n] taken directly, in f64.
fn distances(a: &[f32], b: &[f32], dim: usize) -> Vec<Vec<f64>> {
    a.chunks_exact(dim)
        .map(|x| {
            b.chunks_exact(dim).map(|y| x.iter().zip(y).map(|(&p, &q)| (p as f64 - q as f64).powi(2)).sum()).collect()
        })
        .collect()
}

/// The k-th smallest squared distance from each sample to the others of its set.
fn radii(x: &[f32], dim: usize, k: usize) -> Vec<f64> {
    distances(x, x, dim)
        .into_iter()
        .enumerate()
        .map(|(i, mut row)| {
            row.remove(i);
            row.sort_by(f64::total_cmp);
            row[k - 1]
        })
        .collect()
}

/// The four figures by their definitions, pair by pair.
fn direct(real: &[f32], fake: &[f32], dim: usize) -> [f64; 4] {
    let d = distances(fake, real, dim);
    let (real3, real5, fake3) = (radii(real, dim, 3), radii(real, dim, 5), radii(fake, dim, 3));
    let (g, m) = (d.len(), real3.len());
    let precision = (0..g).filter(|&i| (0..m).any(|j| d[i][j] <= real3[j])).count();
    let recall = (0..m).filter(|&j| (0..g).any(|i| d[i][j] <= fake3[i])).count();
    let holding: usize = (0..g).map(|i| (0..m).filter(|&j| d[i][j] <= real5[j]).count()).sum();
    let coverage = (0..m).filter(|&j| (0..g).any(|i| d[i][j] <= real5[j])).count();
    [precision as f64 / g as f64, recall as f64 / m as f64, holding as f64 / (5 * g) as f64, coverage as f64 / m as f64]
}

fn figures(real: &[f32], fake: &[f32], dim: usize) -> Manifold {
    flagged(real, fake, dim).0
}

fn flagged(real: &[f32], fake: &[f32], dim: usize) -> (Manifold, SampleFlags) {
    manifold(&Balls::of(real, dim, real.len() / dim), &Balls::of(fake, dim, fake.len() / dim))
}

#[test]
fn the_four_figures_match_a_direct_count_in_f64() {
    // Sizes that split into blocks with a remainder (ROWS 256), different on the two sides, and
    // a generated set wider and off-centre, so that no figure is 0 or 1.
    let dim = 16;
    let real = gaussian(300, dim, 1.0, 0.0, 1);
    let fake = gaussian(530, dim, 1.3, 0.25, 2);
    let (m, flags) = flagged(&real, &fake, dim);
    let want = direct(&real, &fake, dim);
    assert_eq!([m.precision, m.recall, m.density, m.coverage], want);
    // The samples counted, one by one.
    let d = distances(&fake, &real, dim);
    let (real3, fake3) = (radii(&real, dim, 3), radii(&fake, dim, 3));
    let inside: Vec<bool> = d.iter().map(|row| row.iter().zip(&real3).any(|(x, r)| x <= r)).collect();
    let reached: Vec<bool> = (0..real3.len()).map(|j| d.iter().zip(&fake3).any(|(row, r)| row[j] <= *r)).collect();
    assert_eq!(flags, SampleFlags { inside, reached });
    assert!(want.iter().all(|&x| x > 0.0 && x < 1.0), "{want:?}: a figure at 0 or 1 tests less");
    assert_eq!(m.n, 530);
}

#[test]
fn ties_count_as_inside() {
    // Small integers: exact distances, many of them equal to a radius, and repeated samples.
    let dim = 3;
    let grid =
        |n: usize, seed: u64| -> Vec<f32> { gaussian(n, dim, 1.2, 0.0, seed).iter().map(|x| x.round()).collect() };
    let (real, fake) = (grid(300, 6), grid(280, 7));
    let m = figures(&real, &fake, dim);
    assert_eq!([m.precision, m.recall, m.density, m.coverage], direct(&real, &fake, dim));
}

#[test]
fn the_data_against_itself_is_all_precision_recall_and_coverage() {
    let real = gaussian(400, 8, 1.0, 0.0, 3);
    let m = figures(&real, &real, 8);
    assert_eq!((m.precision, m.recall, m.coverage), (1.0, 1.0, 1.0));
    // Each ball holds its own sample and its 5 nearest: 6 n memberships over 5 n.
    assert_eq!(m.density, 1.2, "{m:?}");
}

#[test]
fn a_collapsed_generator_keeps_precision_and_loses_recall() {
    let dim = 8;
    let real = gaussian(400, dim, 1.0, 0.0, 4);
    // Every generated sample within 1e-3 of the first real one.
    let jitter = gaussian(400, dim, 1e-3, 0.0, 5);
    let fake: Vec<f32> =
        jitter.chunks_exact(dim).flat_map(|j| j.iter().zip(&real[..dim]).map(|(a, b)| a + b)).collect();
    let m = figures(&real, &fake, dim);
    assert_eq!(m.precision, 1.0, "every image looks real");
    assert_eq!(m.recall, 1.0 / 400.0, "only the one real sample is reached");
    assert!(m.coverage < 0.05, "{m:?}");
    // A generator far from the data: nothing inside, nothing reached.
    let far: Vec<f32> = real.iter().map(|x| x + 100.0).collect();
    let m = figures(&real, &far, dim);
    assert_eq!([m.precision, m.recall, m.density, m.coverage], [0.0; 4]);
}

#[test]
fn shares_by_class_count_each_class_apart() {
    let flags = [true, false, true, true, false];
    assert_eq!(by_class(&flags, &[0, 0, 2, 2, 2], 3), [Some(0.5), None, Some(2.0 / 3.0)]);
}

#[test]
fn insertion_keeps_the_smallest_in_order() {
    let mut best = [f64::INFINITY; 3];
    for d in [5.0, 1.0, 4.0, 2.0, 3.0] {
        if d < best[2] {
            insert_sorted(&mut best, d);
        }
    }
    assert_eq!(best, [1.0, 2.0, 3.0]);
}
