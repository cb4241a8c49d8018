//! Sample quality as the run goes (`--eval-every`): after an epoch every rank draws its share of
//! `--eval-n` images from G on noise of its own key (no training stream is touched, so a run
//! trains bitwise the same with or without it), takes their features with the feature network,
//! and rank 0 gathers them, in the order of their global index whatever the rank count, and
//! scores them against the test split.

use super::job::Job;
use super::step::GanTrainer;
use crate::backend::Backend;
use crate::data::DataSource;
use crate::eval::evaluate::{Reference, Score, images_of, score_features};
use crate::eval::feature_net::{FEATURES, FeatureNet};
use crate::eval::feature_net_file::{Splits, default_dir, obtain};
use crate::eval::generate::EVAL_NOISE;
use crate::eval::train_classifier::ClassifierTraining;
use crate::model::dcgan::{NZ, seed_for};
use crate::model::noise::fixed_noise;
use crate::record::TrainOptions;
use anyhow::Result;
use std::time::Instant;

/// Images the feature network takes at a time.
const BATCH: usize = 500;

/// What rank 0 decided, sent to every rank.
#[derive(serde::Serialize, serde::Deserialize)]
struct Decision {
    every: u64,
    n: u64,
    seed: u64,
    /// The feature network's file, its bytes and its path.
    net: Vec<u8>,
    path: String,
}

/// The evaluation every rank takes part in.
pub struct Quality<B: Backend> {
    every: u64,
    n: usize,
    seed: u64,
    net: FeatureNet<B>,
    /// The feature network's file (for the summary), and the xxh3-64 of its bytes.
    pub path: String,
    pub digest: String,
    /// Rank 0: the test split's features.
    reference: Option<Reference>,
    /// Rank 0: the test split's fingerprint (`Labelled::fingerprint`), which checkpoints keep.
    pub test_fingerprint: Option<String>,
}

/// Rank 0: whether to evaluate and with which network (None: not at all), saying why not
/// where the user may have expected it.
/// `measured_against`: on a resume, the fingerprint of the test split the run measured with,
/// which the split found now must match; the returned fingerprint is the split's.
fn decide<B: Backend>(
    be: &B,
    args: &TrainOptions,
    measured_against: Option<&str>,
) -> Result<Option<(Decision, Reference, String)>> {
    let e = &args.eval;
    if e.eval_every == Some(0) {
        return Ok(None);
    }
    let side = args.model.image_size;
    let splits = match Splits::load(&DataSource::parse(args.data.as_deref())?) {
        Ok(s) => s,
        Err(why) if e.eval_every.is_none() => {
            eprintln!("sample quality: not measured ({why:#})");
            return Ok(None);
        }
        Err(why) => return Err(why.context("--eval-every needs the data's test split and its labels")),
    };
    let test_fingerprint = splits.test.fingerprint();
    same_test_images(measured_against, &test_fingerprint, args)?;
    // Without --eval-every, only a network trained already: a run never waits minutes unasked.
    let train = e.eval_every.map(|_| ClassifierTraining::default());
    let (mut net, path) = match obtain(be, &splits, side, e.classifier.as_deref(), BATCH, train) {
        Ok(x) => x,
        Err(_) if e.eval_every.is_none() => {
            eprintln!(
                "sample quality: not measured (no feature network for this data in {}: `dcgan-train classifier` trains one, or pass --eval-every 1)",
                default_dir().display()
            );
            return Ok(None);
        }
        Err(why) => return Err(why),
    };
    let test = images_of(&splits.test.set, side, splits.test.set.count);
    let reference = Reference::of(be, &mut net, &test, &splits.test.labels, splits.test.set.description.clone())?;
    let bytes = std::fs::read(&path)?;
    let d = Decision {
        every: e.eval_every.unwrap_or(1),
        n: e.eval_n,
        seed: args.model.seed,
        net: bytes,
        path: path.display().to_string(),
    };
    Ok(Some((d, reference, test_fingerprint)))
}

/// A resumed run measures its samples against the test images it was measured against: other
/// ones (a `--data` that moved to other images beside the same training split) would mix two
/// references in one run's figures. `run`: the fingerprint its checkpoint keeps.
fn same_test_images(run: Option<&str>, now: &str, args: &TrainOptions) -> Result<()> {
    match run {
        Some(run) if run != now => anyhow::bail!(
            "--resume {}: the test images --data {} holds (fingerprint {now}) are not those the run's sample quality was measured against (fingerprint {run}): give --data the run's images, or resume with --eval-every 0 to measure nothing",
            args.checkpoints.resume.as_deref().unwrap_or(std::path::Path::new("")).display(),
            args.data.as_deref().unwrap_or(crate::data::DEFAULT_DIR)
        ),
        _ => Ok(()),
    }
}

impl<B: Backend> Quality<B> {
    /// Collective: rank 0 decides and every rank builds the same feature network on `be`.
    /// `measured_against`: rank 0's record of the run's test split, on a resume (see `decide`).
    pub fn prepare(
        job: &Job,
        be: &B,
        args: &TrainOptions,
        measured_against: Option<&str>,
    ) -> Result<Option<Quality<B>>> {
        let decided = job.agree(if job.is_root() { decide(be, args, measured_against) } else { Ok(None) })?;
        let (decision, reference, test_fingerprint) = match decided {
            Some((d, r, f)) => (Some(d), Some(r), Some(f)),
            None => (None, None, None),
        };
        let bytes = job.comm.broadcast_bytes(0, serde_json::to_vec(&decision)?)?;
        let Some(d) = serde_json::from_slice::<Option<Decision>>(&bytes)? else { return Ok(None) };
        let net = job.agree(FeatureNet::from_bytes(be, &d.net, &d.path, BATCH))?;
        let digest = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&d.net));
        Ok(Some(Quality {
            every: d.every,
            n: d.n as usize,
            seed: d.seed,
            net,
            path: d.path,
            digest,
            reference,
            test_fingerprint,
        }))
    }

    /// Images generated for each evaluation.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Whether the end of epoch `epoch` (0-based) is evaluated.
    pub fn due(&self, epoch: u64) -> bool {
        (epoch + 1).is_multiple_of(self.every)
    }

    /// Collective: the score of G's images now (rank 0; None elsewhere) and the seconds taken;
    /// `averaged`: of `--g-ema`'s averaged generator.
    pub fn evaluate(&mut self, job: &Job, trainer: &mut GanTrainer<B>, averaged: bool) -> Result<Option<(Score, f64)>> {
        let started = Instant::now();
        let (rank, ranks) = (job.world.rank, job.world.size);
        // This rank's images: global indices rank, rank + ranks, ... of the n.
        let noise = fixed_noise(seed_for(self.seed, EVAL_NOISE), self.n, NZ);
        let mine: Vec<f32> = noise.chunks_exact(NZ).skip(rank).step_by(ranks).flatten().copied().collect();
        let images = trainer.draw(&mine, averaged);
        let (features, logits) = self.net.run(&trainer.be, &images);
        let classes = self.net.info.classes;
        let Some(parts) = job.comm.gather_bytes(bytes_of(&[features, logits].concat()))? else { return Ok(None) };
        // Back in global order: image i came from rank i mod ranks, its (i / ranks)-th; each
        // rank sent its features, then its logits.
        let parts: Vec<Vec<f32>> = parts.iter().map(|p| floats_of(p)).collect();
        let (mut all_f, mut all_l) = (Vec::with_capacity(self.n * FEATURES), Vec::with_capacity(self.n * classes));
        for i in 0..self.n {
            let (part, j) = (&parts[i % ranks], i / ranks);
            let split = part.len() / (FEATURES + classes) * FEATURES;
            all_f.extend_from_slice(&part[j * FEATURES..(j + 1) * FEATURES]);
            all_l.extend_from_slice(&part[split + j * classes..split + (j + 1) * classes]);
        }
        let reference = self.reference.as_ref().expect("rank 0 holds the reference");
        let s = score_features(&all_f, &all_l, reference, classes)?;
        Ok(Some((s, started.elapsed().as_secs_f64())))
    }
}

fn bytes_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats_of(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
