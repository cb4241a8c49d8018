//! Scoring a set of images against a reference set (the test split) with the feature network:
//! the Fréchet distance, KID, precision and recall, and what the classifier makes of them.

use super::ClassView;
use super::feature_net::{FEATURES, FeatureNet};
use super::frechet::{Gaussian, frechet_distance};
use super::kid::{Kid, kid};
use super::manifold::{Balls, Manifold, manifold};
use crate::backend::Backend;
use crate::data::Dataset;
use anyhow::Result;
use std::sync::OnceLock;

/// KID's subsets and their size, as the reference implementations take them.
pub const KID_SUBSETS: usize = 100;
pub const KID_SUBSET_SIZE: usize = 1000;
/// The key of KID's subsets (fixed, so that a figure is the same every time it is taken).
const KID_SEED: u64 = 0x6b6964;

/// The reference images' features, taken once.
pub struct Reference {
    pub gaussian: Gaussian,
    /// [n, FEATURES], for KID.
    pub features: Vec<f32>,
    /// The balls of the first m samples, for precision and recall against m generated images:
    /// taken at the first m asked for (a run asks for one m throughout).
    balls: OnceLock<(usize, Balls)>,
    pub n: usize,
    pub description: String,
}

/// How a set of images scores.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Score {
    /// Images scored.
    pub n: usize,
    pub fid: f64,
    pub kid: Kid,
    /// Precision, recall, density and coverage, of at most as many images as the reference has.
    pub manifold: Manifold,
    pub classes: ClassView,
}

/// All of `set`'s images [count, S, S] at side `side`, in [-1, 1].
pub fn images_of(set: &Dataset, side: usize, count: usize) -> Vec<f32> {
    let n = count.min(set.count);
    let mut out = vec![0.0f32; n * side * side];
    let all: Vec<usize> = (0..n).collect();
    set.fill_batch(&all, side, &mut out);
    out
}

impl Reference {
    /// The features of `images` [n, S, S].
    pub fn of<B: Backend>(be: &B, f: &mut FeatureNet<B>, images: &[f32], description: String) -> Result<Reference> {
        let (features, _) = f.run(be, images);
        let gaussian = Gaussian::of(&features, FEATURES)?;
        let n = gaussian.n;
        Ok(Reference { gaussian, features, balls: OnceLock::new(), n, description })
    }
}

/// Score `images` [n, S, S] in [-1, 1] against `reference`.
pub fn score<B: Backend>(be: &B, f: &mut FeatureNet<B>, images: &[f32], reference: &Reference) -> Result<Score> {
    let (features, logits) = f.run(be, images);
    score_features(&features, &logits, reference, f.info.classes)
}

/// Score images by their features [n, FEATURES] and logits [n, classes].
pub fn score_features(features: &[f32], logits: &[f32], reference: &Reference, classes: usize) -> Result<Score> {
    let g = Gaussian::of(features, FEATURES)?;
    // Balls' radii shrink as a set grows, so precision and recall compare sets of one size: the
    // first m of each.
    let m = g.n.min(reference.n);
    let other;
    let real = match reference.balls.get_or_init(|| (m, Balls::of(&reference.features, FEATURES, m))) {
        (at, balls) if *at == m => balls,
        _ => {
            other = Balls::of(&reference.features, FEATURES, m);
            &other
        }
    };
    Ok(Score {
        n: g.n,
        fid: frechet_distance(&g, &reference.gaussian),
        kid: kid(features, &reference.features, FEATURES, KID_SUBSETS, KID_SUBSET_SIZE, KID_SEED),
        manifold: manifold(real, &Balls::of(features, FEATURES, m)),
        classes: ClassView::of(logits, classes),
    })
}

/// What `evaluate` reports (and `--json` writes).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Evaluation {
    /// Where the images came from (a checkpoint, a file).
    pub images: String,
    pub n: usize,
    pub fid: f64,
    pub kid: f64,
    pub kid_std: f64,
    /// Precision, recall, density and coverage against the reference.
    pub manifold: Manifold,
    pub mean_confidence: f64,
    pub class_shares: Vec<f64>,
    pub class_imbalance: f64,
    /// The reference images (the test split) and how many.
    pub reference: String,
    pub reference_n: usize,
    /// The feature network's file and its accuracy on the test split.
    pub feature_net: String,
    pub feature_net_test_accuracy: f64,
    /// The same figures for `n` real training images: what "as good as the data" reads.
    pub floor: Option<Score>,
    pub seconds: f64,
}

impl Evaluation {
    pub fn new(images: String, s: Score, reference: &Reference, feature_net: String, accuracy: f64) -> Evaluation {
        Evaluation {
            images,
            n: s.n,
            fid: s.fid,
            kid: s.kid.mean,
            kid_std: s.kid.std,
            manifold: s.manifold,
            mean_confidence: s.classes.mean_confidence,
            class_shares: s.classes.class_shares,
            class_imbalance: s.classes.class_imbalance,
            reference: reference.description.clone(),
            reference_n: reference.n,
            feature_net,
            feature_net_test_accuracy: accuracy,
            floor: None,
            seconds: 0.0,
        }
    }
}

impl std::fmt::Display for Evaluation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shares: Vec<String> = self.class_shares.iter().map(|s| format!("{:.0}", 100.0 * s)).collect();
        writeln!(f, "images: {} ({} of them)", self.images, self.n)?;
        writeln!(f, "against: {} ({} images)", self.reference, self.reference_n)?;
        writeln!(f, "feature network: {} (test accuracy {:.4})", self.feature_net, self.feature_net_test_accuracy)?;
        writeln!(f, "FID {:.3}  KID {:.5} (+- {:.5})", self.fid, self.kid, self.kid_std)?;
        writeln!(f, "{}", self.manifold)?;
        writeln!(
            f,
            "classifier: mean confidence {:.3}, classes (%) {} (the largest {:.2}x uniform)",
            self.mean_confidence,
            shares.join(" "),
            self.class_imbalance
        )?;
        if let Some(fl) = &self.floor {
            writeln!(
                f,
                "floor ({} training images): FID {:.3}  KID {:.5}, precision {:.3} recall {:.3}, mean confidence {:.3}",
                fl.n, fl.fid, fl.kid.mean, fl.manifold.precision, fl.manifold.recall, fl.classes.mean_confidence
            )?;
        }
        Ok(())
    }
}
