//! Sample quality: distances between the features a classifier trained on the data set gives
//! generated images and real ones (the Fréchet distance and KID), how the two sets overlap
//! (precision and recall), and what the classifier makes of the generated images (its
//! confidence, and how the images spread over its classes).

pub mod evaluate;
pub mod feature_net;
pub mod feature_net_file;
pub mod frechet;
pub mod generate;
pub mod kid;
pub mod manifold;
pub mod train_classifier;

/// The index of the largest value (the first of equals).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// What the classifier makes of a set of images, from their logits [n, classes].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClassView {
    /// The mean over images of the largest softmax probability.
    pub mean_confidence: f64,
    /// The share of images assigned to each class.
    pub class_shares: Vec<f64>,
    /// The largest class share over the uniform one (1: the classes even; `classes`: every
    /// image in one class, a collapsed generator).
    pub class_imbalance: f64,
}

impl ClassView {
    pub fn of(logits: &[f32], classes: usize) -> ClassView {
        let n = logits.len() / classes.max(1);
        let mut shares = vec![0.0f64; classes];
        let mut confidence = 0.0f64;
        for l in logits.chunks_exact(classes) {
            let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = l.iter().map(|&x| (x as f64 - max).exp()).sum();
            confidence += 1.0 / sum;
            shares[argmax(l)] += 1.0;
        }
        let n = n.max(1) as f64;
        shares.iter_mut().for_each(|s| *s /= n);
        let top = shares.iter().copied().fold(0.0, f64::max);
        ClassView { mean_confidence: confidence / n, class_shares: shares, class_imbalance: top * classes as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_view_reads_confidence_and_collapse() {
        // Two classes; logits 0 and ln 3: p = 3/4 on class 1.
        let ln3 = 3f32.ln();
        let v = ClassView::of(&[0.0, ln3, 0.0, ln3], 2);
        assert!((v.mean_confidence - 0.75).abs() < 1e-6, "{v:?}");
        assert_eq!(v.class_shares, vec![0.0, 1.0]);
        assert_eq!(v.class_imbalance, 2.0, "every image in one of two classes");
        let even = ClassView::of(&[5.0, 0.0, 0.0, 5.0], 2);
        assert_eq!((even.class_shares.clone(), even.class_imbalance), (vec![0.5, 0.5], 1.0));
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1, "ties go to the first");
    }
}
