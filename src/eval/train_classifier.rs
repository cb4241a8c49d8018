//! Training the feature network on the data set's labelled training split: softmax cross-entropy,
//! Adam, a shuffled order keyed by the seed, so that the same data and seed give the same
//! network on the CPU. Its accuracy on the test split goes into its file.

use super::feature_net::{FeatureNet, FeatureNetInfo};
use crate::backend::{Backend, View, ViewMut};
use crate::data::labelled::Labelled;
use crate::model::net::NoObserver;
use crate::ops::adam::AdamStep;
use anyhow::{Result, bail};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// How to train.
#[derive(Clone, Copy, Debug)]
pub struct ClassifierTraining {
    /// The side of the images it classifies (the data is resized to it, as for a run).
    pub image_size: usize,
    pub epochs: u64,
    pub batch: usize,
    pub lr: f32,
    pub seed: u64,
}

impl Default for ClassifierTraining {
    fn default() -> Self {
        ClassifierTraining { image_size: 28, epochs: 5, batch: 64, lr: 1e-3, seed: 1 }
    }
}

/// What one epoch did, for the progress lines.
#[derive(Clone, Copy, Debug)]
pub struct EpochReport {
    pub epoch: u64,
    pub loss: f64,
    pub train_accuracy: f64,
    pub test_accuracy: f64,
    pub seconds: f64,
}

/// Train a network on `train` at its native image size and measure it on `test`; `report` is
/// told each epoch's figures.
pub fn train_classifier<B: Backend>(
    be: &B,
    train: &Labelled,
    test: &Labelled,
    how: ClassifierTraining,
    mut report: impl FnMut(&EpochReport),
) -> Result<FeatureNet<B>> {
    let side = how.image_size;
    if train.set.count < how.batch {
        bail!(
            "{} training images are fewer than the feature network's batch of {}: give --data a set of at least {} training images",
            train.set.count,
            how.batch,
            how.batch
        );
    }
    let info = FeatureNetInfo {
        data: train.set.description.clone(),
        fingerprint: train.fingerprint(),
        image_size: side,
        classes: train.classes.max(test.classes),
        test_accuracy: 0.0,
        epochs: how.epochs,
        seed: how.seed,
    };
    let mut f = FeatureNet::new(be, info, how.batch)?;
    let b = how.batch;
    // [b, S, S] images, [b] labels, [classes, b] logits' gradient and [2] (loss, accuracy).
    let mut images = vec![0.0f32; b * side * side];
    let mut labels_b = vec![0.0f32; b];
    let mut labels = be.alloc(b)?;
    let mut dlogits = be.alloc(f.info.classes * b)?;
    let mut out = be.alloc(2)?;
    let mut order: Vec<usize> = (0..train.set.count).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(how.seed);
    for epoch in 0..how.epochs {
        let started = std::time::Instant::now();
        order.shuffle(&mut rng);
        let (mut loss, mut right, mut batches) = (0.0f64, 0.0f64, 0usize);
        for batch in order.chunks_exact(b) {
            train.set.fill_batch(batch, side, &mut images);
            for (l, &i) in labels_b.iter_mut().zip(batch) {
                *l = train.labels[i] as f32;
            }
            be.upload(&images, ViewMut::whole(f.net.input_mut()));
            be.upload(&labels_b, ViewMut::whole(&mut labels));
            f.net.forward(be, true, None, &mut NoObserver);
            be.softmax_xent(
                View::whole(f.net.output()),
                View::whole(&labels),
                f.info.classes,
                ViewMut::whole(&mut dlogits),
                ViewMut::whole(&mut out),
            );
            be.copy(View::whole(&dlogits), ViewMut::whole(f.net.d_output_mut()));
            f.net.backward(be, Some(false), false, None, &mut NoObserver);
            let store = &mut f.net.store;
            store.adam_steps += 1;
            let step = AdamStep::with_betas(how.lr, 0.9, 0.999, 1e-8, store.adam_steps);
            be.adam(
                &step,
                ViewMut::whole(&mut store.value),
                View::whole(&store.grad),
                ViewMut::whole(&mut store.m),
                ViewMut::whole(&mut store.v),
            );
            let mut o = [0.0f32; 2];
            be.download(View::whole(&out), &mut o);
            (loss, right, batches) = (loss + o[0] as f64, right + o[1] as f64, batches + 1);
        }
        let test_accuracy = accuracy(be, &mut f, test);
        let n = batches.max(1) as f64;
        let seconds = started.elapsed().as_secs_f64();
        report(&EpochReport { epoch, loss: loss / n, train_accuracy: right / n, test_accuracy, seconds });
        f.info.test_accuracy = test_accuracy;
    }
    Ok(f)
}

/// The share of `set` whose largest logit is its label (ties to the lowest class).
pub fn accuracy<B: Backend>(be: &B, f: &mut FeatureNet<B>, set: &Labelled) -> f64 {
    let side = f.info.image_size;
    let mut images = vec![0.0f32; set.set.count * side * side];
    let all: Vec<usize> = (0..set.set.count).collect();
    set.set.fill_batch(&all, side, &mut images);
    let (_, logits) = f.run(be, &images);
    let classes = f.info.classes;
    let right =
        logits.chunks_exact(classes).zip(&set.labels).filter(|(l, label)| super::argmax(l) == **label as usize).count();
    right as f64 / set.set.count.max(1) as f64
}
