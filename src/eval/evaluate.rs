//! Scoring a set of images against a reference set (the test split) with the feature network:
//! the Fréchet distance, KID, precision and recall, and what the classifier makes of them.

use super::feature_net::{FEATURES, FeatureNet};
use super::frechet::{Gaussian, frechet_distance};
use super::kid::{Kid, kid};
use super::manifold::{Balls, Manifold, by_class, manifold};
use super::{ClassView, argmax};
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
    /// `[n]`: each image's class (the data's labels), for recall by class.
    pub labels: Vec<usize>,
    pub n: usize,
    pub description: String,
}

/// Precision and recall class by class (None for a class without images): which kinds of
/// image a generator makes unlike the data, and which it does not reach.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ByClass {
    /// Of the generated images the classifier puts in each class, the share that look real.
    pub precision: Vec<Option<f64>>,
    /// Of the reference images of each class (their labels), the share the generated reach.
    pub recall: Vec<Option<f64>>,
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
    pub by_class: ByClass,
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
    /// The features of `images` [n, S, S], whose classes are `labels` (`[n]`).
    pub fn of<B: Backend>(
        be: &B,
        f: &mut FeatureNet<B>,
        images: &[f32],
        labels: &[u8],
        description: String,
    ) -> Result<Reference> {
        if let Some(&l) = labels.iter().find(|&&l| l as usize >= f.info.classes) {
            anyhow::bail!(
                "{description} has label {l}, and the feature network knows {} classes: pass --classifier with one trained on this data (`dcgan-train classifier`)",
                f.info.classes
            );
        }
        let (features, _) = f.run(be, images);
        let gaussian = Gaussian::of(&features, FEATURES)?;
        let n = gaussian.n;
        let labels = labels.iter().map(|&l| l as usize).collect();
        Ok(Reference { gaussian, features, balls: OnceLock::new(), labels, n, description })
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
    let (figures, flags) = manifold(real, &Balls::of(features, FEATURES, m));
    let predicted: Vec<usize> = logits.chunks_exact(classes).map(argmax).collect();
    Ok(Score {
        n: g.n,
        fid: frechet_distance(&g, &reference.gaussian),
        kid: kid(features, &reference.features, FEATURES, KID_SUBSETS, KID_SUBSET_SIZE, KID_SEED),
        manifold: figures,
        by_class: ByClass {
            precision: by_class(&flags.inside, &predicted[..m], classes),
            recall: by_class(&flags.reached, &reference.labels[..m], classes),
        },
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
    pub by_class: ByClass,
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
            by_class: s.by_class,
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
        let percent = |v: &[Option<f64>]| -> String {
            v.iter().map(|x| x.map_or("-".to_string(), |x| format!("{:.0}", 100.0 * x))).collect::<Vec<_>>().join(" ")
        };
        writeln!(
            f,
            "by class (%): precision {} (the classifier's classes); recall {} (the labels)",
            percent(&self.by_class.precision),
            percent(&self.by_class.recall)
        )?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Real samples of 4 classes; generated ones are 4 copies of each class-0 sample, moved
    /// 0.1 along the first two axes each way (so each copy's third neighbour is its opposite
    /// copy, 0.2 away, and the real sample lies within 0.1 of all four). The classifier calls
    /// the copies of the first 38 class 0, and those of the other 37, moved 100 away from the
    /// data, class 1: class 0's images look real and class 1's do not; only the first 38 of
    /// class 0's real images are reached (the rest of the data lies some 18 away).
    #[test]
    fn by_class_groups_precision_by_predicted_class_and_recall_by_label() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let n = 300;
        let real: Vec<f32> = (0..n * FEATURES).map(|_| rng.random::<f32>() * 4.0).collect();
        let labels: Vec<usize> = (0..n).map(|i| i % 4).collect();
        let near = 38 * 4;
        let fake: Vec<f32> = (0..n)
            .flat_map(|i| {
                let mut z = real[(i / 4 * 4) * FEATURES..(i / 4 * 4 + 1) * FEATURES].to_vec();
                z[(i % 4) / 2] += if i % 2 == 0 { 0.1 } else { -0.1 };
                let away = if i < near { 0.0 } else { 100.0 };
                z.into_iter().map(move |x| x + away)
            })
            .collect();
        let logits: Vec<f32> =
            (0..n).flat_map(|i| if i < near { [1.0, 0.0, 0.0, 0.0] } else { [0.0, 1.0, 0.0, 0.0] }).collect();
        let reference = Reference {
            gaussian: Gaussian::of(&real, FEATURES).unwrap(),
            features: real,
            balls: OnceLock::new(),
            labels,
            n,
            description: String::new(),
        };
        let s = score_features(&fake, &logits, &reference, 4).unwrap();
        assert_eq!(s.by_class.precision, [Some(1.0), Some(0.0), None, None]);
        assert_eq!(s.by_class.recall, [Some(38.0 / 75.0), Some(0.0), Some(0.0), Some(0.0)]);
        assert_eq!((s.manifold.precision, s.manifold.recall), (near as f64 / 300.0, 38.0 / 300.0));
    }

    /// A test split whose labels the feature network has no class for is refused in one line
    /// (recall by class would index past its classes).
    #[test]
    fn labels_beyond_the_networks_classes_are_refused() {
        use crate::backend::cpu::Cpu;
        use crate::eval::feature_net::FeatureNetInfo;
        let info = FeatureNetInfo {
            data: "test".into(),
            fingerprint: "00".into(),
            image_size: 28,
            classes: 3,
            test_accuracy: 0.5,
            epochs: 1,
            seed: 3,
        };
        let mut f = FeatureNet::new(&Cpu, info, 4).unwrap();
        let images = vec![0.0f32; 4 * 784];
        let e = Reference::of(&Cpu, &mut f, &images, &[0, 1, 3, 2], "the test split".into()).err().unwrap();
        assert!(
            e.to_string().starts_with("the test split has label 3, and the feature network knows 3 classes"),
            "{e}"
        );
    }
}
