//! The memory a rank's run will hold at its peak, estimated from the model and the batch before
//! anything big is allocated, and refused with one line (needed, available, the largest batch
//! that fits) when it cannot have it. Without the check an oversize batch grows the process
//! for minutes and is then killed by the system, or swaps the host to a halt.

use crate::backend::Backend;
use crate::model::{dcgan, penalty};
use crate::record::{GanLoss, ModelOptions};
use anyhow::{Result, bail};

const GIB: f64 = (1u64 << 30) as f64;

/// A rank's memory at its peak, by where it lives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryEstimate {
    /// This process's resident memory (on the CPU backend it holds the model too).
    pub host_bytes: u64,
    /// On a GPU of its own (None where the model lives in host memory).
    pub device_bytes: Option<u64>,
}

/// What the estimate is made of, in bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Parts {
    /// The layers' buffers, parameters, gradients, Adam's moments, the trainer's buffers.
    model: u64,
    /// The ops' scratch (column matrices, split reductions).
    workspace: u64,
    /// Host copies: the gradient buckets in flight (with other ranks), a checkpoint's copy of
    /// the weights and moments and its encoded file, the batch of images and its noise.
    host: u64,
}

/// The parts at `batch` images per rank.
fn parts<B: Backend>(be: &B, model: &ModelOptions, batch: usize, ranks: usize) -> Result<Parts> {
    let (image_size, loss) = (model.image_size, model.loss);
    let (widths, kind) = (super::config::widths(model), super::config::discriminator(model));
    // The networks are built for one micro-batch; G keeps each micro-batch's forward for its
    // backward unless it recomputes them (train/micro_step.rs).
    let micro = (model.micro_batches as usize).max(1);
    let [g, d] = dcgan::plan(image_size, widths, batch.div_ceil(micro), kind)?;
    let params = (g.params + d.params) as u64;
    // The step's own buffers: the logits' gradient and three pairs of outputs (train/step.rs).
    let mut trainer = batch.div_ceil(micro) as u64 + 6;
    if micro > 1 {
        // One micro-batch's outputs and zeros, and its images on the host (counted here).
        trainer += (2 + batch.div_ceil(micro).max(2) + batch.div_ceil(micro) * image_size * image_size) as u64;
        if !model.recompute {
            trainer += (micro * g.saved_floats) as u64;
        }
    }
    if loss == GanLoss::WganGp {
        // The penalty's streams and seed, the real images and the interpolation weights.
        let (_, d_spec) = dcgan::architecture(image_size, widths, kind)?;
        let images = batch * image_size * image_size;
        trainer += (penalty::plan_floats(&d_spec, batch, (1, image_size, image_size))? + images + batch) as u64;
    }
    // `--g-ema`: the average and its scratch, each G's size (train/ema.rs).
    let averaged = if model.g_ema > 0 { g.params as u64 } else { 0 };
    trainer += 2 * averaged;
    let convs: Vec<_> = g.convs.iter().chain(&d.convs).copied().collect();
    let bns: Vec<_> = g.bns.iter().chain(&d.bns).copied().collect();
    let buckets = if ranks > 1 { params } else { 0 };
    // A checkpoint copies values and both moments to the host (3 floats a parameter, and the
    // running statistics), then encodes the optimizer file: both moments copied to bytes and
    // serialized into one buffer, 4 more. The copies live until the files are written; with
    // `--g-ema` the average is copied and encoded too.
    let checkpoint = 8 * params + 2 * averaged;
    let images = (batch * image_size * image_size) as u64;
    let noise = (batch * dcgan::NZ) as u64;
    Ok(Parts {
        model: 4 * ((g.floats + d.floats) as u64 + trainer),
        workspace: 4 * be.workspace_floats(&convs, &bns) as u64,
        host: 4 * (buckets + checkpoint + images + noise),
    })
}

impl MemoryEstimate {
    /// The estimate for `batch` images per rank of `model` on `be`, on top of `resident`
    /// bytes this process holds already (the program, the libraries, the data set).
    pub fn of<B: Backend>(be: &B, model: &ModelOptions, batch: usize, ranks: usize, resident: u64) -> Result<Self> {
        let p = parts(be, model, batch, ranks)?;
        Ok(match be.free_device_bytes() {
            Some(_) => MemoryEstimate { host_bytes: resident + p.host, device_bytes: Some(p.model + p.workspace) },
            None => MemoryEstimate { host_bytes: resident + p.model + p.workspace + p.host, device_bytes: None },
        })
    }
}

/// What one rank may use: its share of the host's available memory, and a GPU's free memory.
#[derive(Clone, Copy, Debug)]
pub struct MemoryLimits {
    /// The host's available memory (MemAvailable).
    pub host_available: u64,
    /// Ranks sharing the host.
    pub local_ranks: usize,
    /// This process's resident memory when the limits were read (counted in the estimate, and
    /// already taken from the host's available memory).
    pub resident: u64,
    /// The GPU's free memory (None on the CPU).
    pub device_free: Option<u64>,
}

impl MemoryLimits {
    /// The limits of this process now, `None` where the system does not say.
    pub fn now<B: Backend>(be: &B, local_ranks: usize) -> Option<MemoryLimits> {
        Some(MemoryLimits {
            host_available: crate::memory::available_memory()?,
            local_ranks: local_ranks.max(1),
            resident: crate::memory::resident_bytes()?,
            device_free: be.free_device_bytes(),
        })
    }

    /// This rank's share of the host memory still available.
    fn host_share(&self) -> u64 {
        self.host_available / self.local_ranks as u64
    }

    /// Whether `e` fits, else the first part that does not, as (what, needed, available).
    fn shortfall(&self, e: &MemoryEstimate) -> Option<(&'static str, u64, u64)> {
        let host_new = e.host_bytes.saturating_sub(self.resident);
        if host_new > self.host_share() {
            return Some(("host memory", host_new, self.host_share()));
        }
        match (e.device_bytes, self.device_free) {
            (Some(need), Some(free)) if need > free => Some(("GPU memory", need, free)),
            _ => None,
        }
    }
}

/// The estimate at `batch`, or one line saying what does not fit and the largest batch per
/// rank that does (`resumed`: a resumed run keeps its global batch, so more ranks are the fix).
pub fn check<B: Backend>(
    be: &B,
    model: &ModelOptions,
    batch: usize,
    ranks: usize,
    limits: &MemoryLimits,
    resumed: bool,
) -> Result<MemoryEstimate> {
    let image_size = model.image_size;
    let estimate = |b: usize| MemoryEstimate::of(be, model, b, ranks, limits.resident);
    let e = estimate(batch)?;
    let Some((what, need, have)) = limits.shortfall(&e) else { return Ok(e) };
    // The estimate grows with the batch: bisect for the largest that fits.
    let (mut lo, mut hi) = (0usize, batch);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if limits.shortfall(&estimate(mid)?).is_none() { lo = mid } else { hi = mid }
    }
    let shared = match (what, limits.local_ranks) {
        ("host memory", n) if n > 1 => {
            format!(" (the host's {:.1} GiB shared by its {n} ranks)", gib(limits.host_available))
        }
        _ => String::new(),
    };
    let fix = if lo == 0 {
        "no batch fits: free memory on the host or run fewer ranks on it".to_string()
    } else if resumed {
        let (global, micro) = (batch * ranks, (model.micro_batches as usize).max(1));
        // A rank count the resume takes: it shares the global batch, and its share splits
        // into the micro-batches (`train/resume.rs`).
        let takes = |r: &usize| global.is_multiple_of(*r) && (global / r).is_multiple_of(micro) && global / r <= lo;
        format!(
            "the largest batch per rank that fits is {lo}, and a resumed run keeps its global batch of {global}: resume on {} or more ranks (a number that divides {global}), no more of them a host than now",
            (ranks..=global).find(takes).unwrap_or(global)
        )
    } else {
        let global = if ranks > 1 { format!(" (a global batch of {})", lo * ranks) } else { String::new() };
        format!("the largest batch per rank that fits is {lo}{global}: use --batch-size {lo} or fewer")
    };
    bail!(
        "batch {batch} per rank at {image_size}x{image_size} needs about {:.1} GiB of {what} and this rank has {:.1} GiB{shared}; {fix}",
        gib(need),
        gib(have)
    )
}

fn gib(b: u64) -> f64 {
    b as f64 / GIB
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::Cpu;

    fn model(image_size: usize) -> ModelOptions {
        ModelOptions { image_size, ..ModelOptions::default() }
    }

    fn limits(host_available: u64, local_ranks: usize) -> MemoryLimits {
        MemoryLimits { host_available, local_ranks, resident: 100 << 20, device_free: None }
    }

    #[test]
    fn the_estimate_grows_with_the_batch_and_the_ranks() {
        let at = |b, r| MemoryEstimate::of(&Cpu, &model(28), b, r, 0).unwrap().host_bytes;
        assert!(at(128, 1) > at(64, 1) && at(64, 2) > at(64, 1));
        // Activations grow linearly with the batch: the step from 64 to 128 is the step from
        // 128 to 192, to the column scratch's rounding.
        let (a, b, c) = (at(64, 1) as f64, at(128, 1) as f64, at(192, 1) as f64);
        assert!(((c - b) - (b - a)).abs() < 0.02 * (b - a), "{a} {b} {c}");
    }

    #[test]
    fn a_batch_that_does_not_fit_is_refused_with_the_largest_that_does() {
        let need = |b| MemoryEstimate::of(&Cpu, &model(28), b, 2, 100 << 20).unwrap().host_bytes - (100 << 20);
        // Room for exactly 1000 images per rank on each of 2 ranks.
        let l = limits(2 * need(1000), 2);
        let e = check(&Cpu, &model(28), 5000, 2, &l, false).unwrap_err().to_string();
        assert!(e.contains("batch 5000 per rank") && e.contains("shared by its 2 ranks"), "{e}");
        assert!(e.contains("the largest batch per rank that fits is 1000 (a global batch of 2000)"), "{e}");
        assert_eq!(
            check(&Cpu, &model(28), 1000, 2, &l, false).unwrap(),
            MemoryEstimate::of(&Cpu, &model(28), 1000, 2, 100 << 20).unwrap()
        );
        // A resumed run keeps its global batch of 10000: 10 ranks of 1000 fit.
        let e = check(&Cpu, &model(28), 5000, 2, &l, true).unwrap_err().to_string();
        assert!(
            e.contains("fits is 1000, and a resumed run keeps its global batch of 10000: resume on 10 or more"),
            "{e}"
        );
        // Nothing fits.
        let e = check(&Cpu, &model(28), 64, 1, &limits(1 << 20, 1), false).unwrap_err().to_string();
        assert!(e.contains("no batch fits"), "{e}");
    }

    /// Micro-batches shrink the activations in flight, G's kept forwards add them back, and
    /// recomputing them is what saves memory.
    #[test]
    fn micro_batches_keep_g_forwards_unless_they_recompute() {
        let at = |micro_batches, recompute| {
            let m = ModelOptions { micro_batches, recompute, ..model(28) };
            MemoryEstimate::of(&Cpu, &m, 256, 1, 0).unwrap().host_bytes
        };
        assert!(at(8, true) < at(8, false), "recompute must need less");
        assert!(at(8, true) < at(1, false), "8 micro-batches recomputed must need less than one batch");
    }

    #[test]
    fn a_gpu_holds_the_model_and_the_host_its_copies() {
        let l = MemoryLimits { device_free: Some(1 << 30), ..limits(64 << 30, 1) };
        let host_only = MemoryEstimate::of(&Cpu, &model(64), 4096, 1, 0).unwrap();
        assert!(host_only.host_bytes > 1 << 30, "{host_only:?}");
        assert!(l.shortfall(&MemoryEstimate { host_bytes: 0, device_bytes: Some(2 << 30) }).is_some());
        assert!(l.shortfall(&MemoryEstimate { host_bytes: 0, device_bytes: Some(1 << 29) }).is_none());
    }
}
