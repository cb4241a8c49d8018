//! Fidelity and diversity told apart: precision and recall (Kynkäänniemi et al. 2019) and
//! density and coverage (Naeem et al. 2020), from balls around each sample that reach its k-th
//! nearest neighbour in feature space. FID and KID fold both into one number; these say which
//! way a generator falls short (images unlike the data, or too little of the data reached).

use nalgebra::DMatrix;
use rayon::prelude::*;

/// The neighbour that sets a ball's radius for precision and recall (Kynkäänniemi et al.).
pub const K_RECALL: usize = 3;
/// The neighbour that sets a ball's radius for density and coverage (Naeem et al.).
pub const K_COVERAGE: usize = 5;
/// Query samples per block of the distance matrix: a block is [n, ROWS] floats.
const ROWS: usize = 256;

/// How a generated set sits among the real samples.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifold {
    /// The share of generated samples inside some real sample's ball (k = 3): how many look real.
    pub precision: f64,
    /// The share of real samples inside some generated sample's ball (k = 3): how much of the
    /// data the generator reaches.
    pub recall: f64,
    /// Real balls (k = 5) holding a generated sample, per generated sample, over k: near 1 when
    /// generated samples crowd where real ones do, above 1 when they pile onto dense regions.
    pub density: f64,
    /// The share of real samples whose ball (k = 5) holds a generated sample.
    pub coverage: f64,
    /// Generated samples scored (`evaluate` and the run's evaluations take as many real ones).
    pub n: usize,
}

/// A set of samples with the squared radii of their balls.
pub struct Balls {
    /// [n, dim]
    points: DMatrix<f32>,
    /// [dim, n]: the queries' side of a distance block.
    points_t: DMatrix<f32>,
    /// `[n]` squared norms, for |a - b|^2 = |a|^2 + |b|^2 - 2 a.b.
    norms: Vec<f64>,
    /// `[n]` squared distance to the K_RECALL-th and the K_COVERAGE-th nearest other sample.
    r_recall: Vec<f64>,
    r_coverage: Vec<f64>,
}

impl Balls {
    /// The balls of the first `n` samples of `features` [.., dim] (n > K_COVERAGE).
    pub fn of(features: &[f32], dim: usize, n: usize) -> Balls {
        assert!(n > K_COVERAGE && features.len() >= n * dim, "{n} samples: too few for balls");
        let points = DMatrix::from_fn(n, dim, |i, j| features[i * dim + j]);
        let points_t = points.transpose();
        let norms = (0..n).map(|i| points.row(i).iter().map(|&x| (x as f64) * (x as f64)).sum()).collect();
        let mut balls = Balls { points, points_t, norms, r_recall: vec![], r_coverage: vec![] };
        // Per query, its K_COVERAGE smallest squared distances to the others, ascending.
        let nearest: Vec<[f64; K_COVERAGE]> = balls
            .blocks_against(&balls, |start, d2| {
                (0..d2.ncols())
                    .map(|q| {
                        let mut best = [f64::INFINITY; K_COVERAGE];
                        for (j, &d) in d2.column(q).iter().enumerate() {
                            if j != start + q && d < best[K_COVERAGE - 1] {
                                insert_sorted(&mut best, d);
                            }
                        }
                        best
                    })
                    .collect::<Vec<_>>()
            })
            .into_iter()
            .flatten()
            .collect();
        balls.r_recall = nearest.iter().map(|b| b[K_RECALL - 1]).collect();
        balls.r_coverage = nearest.iter().map(|b| b[K_COVERAGE - 1]).collect();
        balls
    }

    /// Samples in the set.
    fn len(&self) -> usize {
        self.points.nrows()
    }

    /// `per_block(start, d2)` for each block of ROWS of this set's samples (the queries) in
    /// order, on the compute threads: d2 [others.len(), rows] holds column q's squared
    /// distances from query start + q to every sample of `others`.
    fn blocks_against<T: Send>(&self, others: &Balls, per_block: impl Fn(usize, &DMatrix<f64>) -> T + Sync) -> Vec<T> {
        let n = self.len();
        (0..n.div_ceil(ROWS))
            .into_par_iter()
            .map(|b| {
                let (start, rows) = (b * ROWS, ROWS.min(n - b * ROWS));
                // [others, rows] dot products in f32 (a feature vector's terms each); the distances
                // in f64 so that the norms' sum loses nothing more.
                let dots = &others.points * self.points_t.columns(start, rows);
                let d2 = DMatrix::from_fn(others.len(), rows, |j, q| {
                    (others.norms[j] + self.norms[start + q] - 2.0 * dots[(j, q)] as f64).max(0.0)
                });
                per_block(start, &d2)
            })
            .collect()
    }
}

impl std::fmt::Display for Manifold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "precision {:.3}  recall {:.3} (k = {K_RECALL})  density {:.3}  coverage {:.3} (k = {K_COVERAGE}; {} images a side)",
            self.precision, self.recall, self.density, self.coverage, self.n
        )
    }
}

/// Put `d` into `best` (ascending), dropping its largest.
fn insert_sorted(best: &mut [f64], d: f64) {
    let mut i = best.len() - 1;
    best[i] = d;
    while i > 0 && best[i - 1] > best[i] {
        best.swap(i - 1, i);
        i -= 1;
    }
}

/// Which samples the figures counted: what `by_class` groups by class.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleFlags {
    /// [fake n]: each generated sample inside some real ball (k = 3).
    pub inside: Vec<bool>,
    /// [real n]: each real sample inside some generated sample's ball (k = 3).
    pub reached: Vec<bool>,
}

/// What one block of generated samples finds among the real ones.
struct BlockFinds {
    /// `[rows]`: the block's samples inside a real ball (k = 3).
    inside: Vec<bool>,
    /// Real balls (k = 5) around each generated sample, summed.
    balls_holding: usize,
    /// [real n]: real samples whose ball (k = 5) holds one of the block's samples.
    covered: Vec<bool>,
    /// [real n]: real samples inside one of the block's samples' balls (k = 3).
    reached: Vec<bool>,
}

/// Precision, recall, density and coverage of `fake` against `real` (any sizes), and which
/// samples they counted.
pub fn manifold(real: &Balls, fake: &Balls) -> (Manifold, SampleFlags) {
    let m = real.len();
    let finds = fake.blocks_against(real, |start, d2| {
        let mut f = BlockFinds { inside: vec![], balls_holding: 0, covered: vec![false; m], reached: vec![false; m] };
        for q in 0..d2.ncols() {
            let own = fake.r_recall[start + q];
            let mut inside = false;
            for (j, &d) in d2.column(q).iter().enumerate() {
                inside |= d <= real.r_recall[j];
                if d <= real.r_coverage[j] {
                    f.balls_holding += 1;
                    f.covered[j] = true;
                }
                f.reached[j] |= d <= own;
            }
            f.inside.push(inside);
        }
        f
    });
    let (mut inside, mut holding) = (Vec::with_capacity(fake.len()), 0);
    let (mut covered, mut reached) = (vec![false; m], vec![false; m]);
    for f in finds {
        inside.extend(f.inside);
        holding += f.balls_holding;
        covered.iter_mut().zip(&f.covered).for_each(|(c, &b)| *c |= b);
        reached.iter_mut().zip(&f.reached).for_each(|(r, &b)| *r |= b);
    }
    let share = |flags: &[bool]| flags.iter().filter(|&&b| b).count() as f64 / flags.len() as f64;
    let figures = Manifold {
        precision: share(&inside),
        recall: share(&reached),
        density: holding as f64 / (K_COVERAGE * fake.len()) as f64,
        coverage: share(&covered),
        n: fake.len(),
    };
    (figures, SampleFlags { inside, reached })
}

/// The share of `flags` set among the samples of each class (`class_of[i]`: sample i's, below
/// `classes`); None for a class without samples.
pub fn by_class(flags: &[bool], class_of: &[usize], classes: usize) -> Vec<Option<f64>> {
    let (mut set, mut all) = (vec![0usize; classes], vec![0usize; classes]);
    for (&f, &c) in flags.iter().zip(class_of) {
        all[c] += 1;
        set[c] += f as usize;
    }
    set.iter().zip(&all).map(|(&s, &a)| (a > 0).then(|| s as f64 / a as f64)).collect()
}

#[cfg(test)]
#[path = "manifold_tests.rs"]
mod tests;
