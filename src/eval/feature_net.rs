//! The feature network: a small classifier of the data set's classes, built from the project's
//! own layers, whose penultimate layer (128 features) the sample-quality distances compare.
//! Strided convolutions stand in for pooling, and the linear layers are convolutions whose
//! kernel covers their whole input:
//!
//! images [1, B, S, S] -> conv 4x4/2 [32, B, S/2, S/2] ReLU -> conv 4x4/2 + BN [64, B, S/4, S/4]
//! ReLU -> conv (S/4)x(S/4) + BN [128, B, 1, 1] ReLU (the features) -> conv 1x1 [classes, B, 1, 1]
//! (the logits).
//!
//! Its weights are a safetensors file (with digests, as checkpoints are) whose metadata records
//! the data it was trained on (name and fingerprint), the image size and its test accuracy.

use crate::backend::{Backend, View, ViewMut};
use crate::checkpoint::tensors::{self, NetTensors};
use crate::model::net::{BackwardOrder, Net, NoObserver, Norm, StageSpec};
use crate::ops::activation::Activation::{self, Relu};
use anyhow::{Context, Result, bail};
use std::collections::HashMap;
use std::path::Path;

/// What errors about a file that is not a feature network tell a user to do.
const FEATURE_NET_FIX: &str = "pass --classifier a file that `dcgan-train classifier` wrote, or leave --classifier out";

/// Features the distances compare.
pub const FEATURES: usize = 128;
/// The stage whose output is the features.
const FEATURE_STAGE: usize = 2;

/// The architecture for `image_size` (divisible by 4) and `classes`.
pub fn specs(image_size: usize, classes: usize) -> Result<[StageSpec; 4]> {
    if image_size == 0 || !image_size.is_multiple_of(4) {
        bail!("the feature network takes images whose side is a multiple of 4, not {image_size}");
    }
    Ok([
        StageSpec::conv(1, 32, 4, 2, 1, Norm::None, Relu),
        StageSpec::conv(32, 64, 4, 2, 1, Norm::Batch, Relu),
        StageSpec::conv(64, FEATURES, image_size / 4, 1, 0, Norm::Batch, Relu),
        StageSpec::conv(FEATURES, classes, 1, 1, 0, Norm::None, Activation::None),
    ])
}

/// What the network was trained on and how well it does, kept in its file's metadata.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FeatureNetInfo {
    /// The data set's description.
    pub data: String,
    /// `Labelled::fingerprint` of its training split.
    pub fingerprint: String,
    pub image_size: usize,
    pub classes: usize,
    /// Share of the test split classified right.
    pub test_accuracy: f64,
    pub epochs: u64,
    pub seed: u64,
}

impl FeatureNetInfo {
    /// Whether it was trained on the training split of `fingerprint` at `image_size`: the
    /// network that measures that data.
    pub fn measures(&self, fingerprint: &str, image_size: usize) -> bool {
        self.fingerprint == fingerprint && self.image_size == image_size
    }
}

/// The network on a backend, at a fixed batch.
pub struct FeatureNet<B: Backend> {
    pub net: Net<B>,
    pub info: FeatureNetInfo,
}

impl<B: Backend> FeatureNet<B> {
    /// A fresh network (weights from `seed`) for `batch` images at a time.
    pub fn new(be: &B, info: FeatureNetInfo, batch: usize) -> Result<Self> {
        let specs = specs(info.image_size, info.classes)?;
        let input = (1, info.image_size, info.image_size);
        let net = Net::new(be, "F", &specs, batch, input, BackwardOrder::LayerByLayer, info.seed)?;
        Ok(FeatureNet { net, info })
    }

    /// The network in `path`, checked against its digests, for `batch` images at a time.
    pub fn load(be: &B, path: &Path, batch: usize) -> Result<Self> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read the feature network {}", path.display()))?;
        let (bytes, digested) = crate::checkpoint::find::checked(bytes, path, FEATURE_NET_FIX)?;
        if !digested {
            bail!(
                "{} has no digests, so it was not written by `dcgan-train classifier`: {FEATURE_NET_FIX}",
                path.display()
            );
        }
        Self::from_bytes(be, &bytes, &path.display().to_string(), batch)
    }

    /// The network in a file's `bytes` (already checked), named `what` in errors.
    pub fn from_bytes(be: &B, bytes: &[u8], what: &str, batch: usize) -> Result<Self> {
        let (_, meta) = tensors::parse_for(bytes, what, FEATURE_NET_FIX)?;
        let info: FeatureNetInfo = serde_json::from_str(meta.get("feature_net").map_or("", String::as_str))
            .with_context(|| format!("{what} is not a feature network: {FEATURE_NET_FIX}"))?;
        let mut f = FeatureNet::new(be, info, batch)?;
        let (t, _) = tensors::decode_net(bytes, &f.net.store.layout, what)?;
        be.upload(&t.values, ViewMut::whole(&mut f.net.store.value));
        be.upload(&t.state, ViewMut::whole(&mut f.net.store.state));
        Ok(f)
    }

    /// Write the weights and `info` to `path` (through a temporary file, so a crash leaves
    /// either the old file or the new one).
    pub fn save(&self, be: &B, path: &Path) -> Result<()> {
        let (values, state) = self.net.store.download_values(be);
        let t = NetTensors { values, state, batches_tracked: self.net.store.bn_batches_tracked };
        let meta = HashMap::from([("feature_net".to_string(), serde_json::to_string(&self.info)?)]);
        let bytes = tensors::encode_net(&self.net.store.layout, &t, meta)?;
        crate::report::write_atomically(path, |f| Ok(std::io::Write::write_all(f, &bytes)?))
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// The batch the network runs at.
    pub fn batch(&self) -> usize {
        self.net.batch
    }

    /// Evaluation-mode features [n, FEATURES] and logits [n, classes] (sample-major) of
    /// `images` [n, S, S] in [-1, 1], a batch at a time (the last one padded with zeros).
    pub fn run(&mut self, be: &B, images: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let (b, side, classes) = (self.batch(), self.info.image_size, self.info.classes);
        let plane = side * side;
        let n = images.len() / plane;
        let (mut features, mut logits) = (vec![0.0; n * FEATURES], vec![0.0; n * classes]);
        // [b, S, S] input, [FEATURES, b] and [classes, b] outputs of one batch.
        let mut input = vec![0.0f32; b * plane];
        let (mut f_out, mut l_out) = (vec![0.0f32; FEATURES * b], vec![0.0f32; classes * b]);
        for start in (0..n).step_by(b) {
            let m = b.min(n - start);
            input.fill(0.0);
            input[..m * plane].copy_from_slice(&images[start * plane..(start + m) * plane]);
            be.upload(&input, ViewMut::whole(self.net.input_mut()));
            self.net.forward(be, false, None, &mut NoObserver);
            be.download(View::whole(self.net.stages[FEATURE_STAGE].output()), &mut f_out);
            be.download(View::whole(self.net.output()), &mut l_out);
            for i in 0..m {
                for c in 0..FEATURES {
                    features[(start + i) * FEATURES + c] = f_out[c * b + i];
                }
                for c in 0..classes {
                    logits[(start + i) * classes + c] = l_out[c * b + i];
                }
            }
        }
        (features, logits)
    }
}

/// The file name that records the data a network was trained on, so that every distance taken
/// with the data set's network is taken with the same one: e.g.
/// `feature-net-28-3f2a9c01d4e5b6a7.safetensors`.
pub fn file_name(image_size: usize, fingerprint: &str) -> String {
    format!("feature-net-{image_size}-{}.safetensors", &fingerprint[..fingerprint.len().min(16)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::Cpu;

    fn info(classes: usize) -> FeatureNetInfo {
        FeatureNetInfo {
            data: "test".into(),
            fingerprint: "00".into(),
            image_size: 28,
            classes,
            test_accuracy: 0.5,
            epochs: 1,
            seed: 3,
        }
    }

    #[test]
    fn a_saved_network_loads_back_the_same_and_a_flipped_byte_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.safetensors");
        let mut f = FeatureNet::new(&Cpu, info(10), 4).unwrap();
        f.save(&Cpu, &path).unwrap();
        let images: Vec<f32> = (0..5 * 784).map(|i| ((i % 97) as f32 / 48.0) - 1.0).collect();
        let (feat, logits) = f.run(&Cpu, &images);
        assert_eq!((feat.len(), logits.len()), (5 * FEATURES, 5 * 10));
        // Another batch size: the same numbers (evaluation mode: no batch statistics).
        let mut g = FeatureNet::load(&Cpu, &path, 3).unwrap();
        assert_eq!(g.info, f.info);
        assert_eq!(g.run(&Cpu, &images), (feat, logits));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
        let e = FeatureNet::<Cpu>::load(&Cpu, &path, 3).err().unwrap().to_string();
        assert!(e.contains("corrupt"), "{e}");
    }

    /// A file that is no feature network (not safetensors at all, or another program's) is
    /// refused with the fix for `--classifier`, not a checkpoint's.
    #[test]
    fn a_file_that_is_no_feature_network_names_the_classifier_fix() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.safetensors");
        std::fs::write(&junk, "junk").unwrap();
        // Another program's safetensors file (no metadata of ours).
        let other = dir.path().join("other.safetensors");
        let data = [0u8; 8];
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &data).unwrap();
        safetensors::serialize_to_file([("w", view)], None, &other).unwrap();
        for path in [&junk, &other] {
            let e = format!("{:#}", FeatureNet::<Cpu>::load(&Cpu, path, 3).err().unwrap());
            assert!(e.contains("pass --classifier a file that `dcgan-train classifier` wrote"), "{e}");
            assert!(!e.contains("checkpoint directory"), "{e}");
        }
    }

    #[test]
    fn sides_not_divisible_by_four_are_refused() {
        assert!(specs(30, 10).unwrap_err().to_string().contains("multiple of 4"));
        assert_eq!(specs(64, 10).unwrap()[2].k, 16);
    }
}
