//! metrics.jsonl: one line per step and one per epoch, each with its `type`.

use serde::{Deserialize, Serialize};

/// One step's figures, averaged over ranks.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// Some rank asked to stop (SIGINT/SIGTERM); every rank sees the same answer.
    #[serde(skip)]
    pub stop: bool,
    #[serde(flatten)]
    pub losses: Losses,
    /// `--wire 1bit`: the L2 norm of rank 0's error-feedback residuals of G and D (its own
    /// and its stripe's), once each network's gradients have travelled 1-bit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residual_g: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residual_d: Option<f32>,
}

/// The losses of a step, by the GAN's loss (their names tell which).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Losses {
    /// `--loss dcgan`: binary cross-entropy and D's outputs as probabilities.
    Dcgan {
        /// BCE(D(x), 1) + BCE(D(G(z)), 0)
        loss_d: f32,
        /// BCE(D(G(z)), 1) with the updated D
        loss_g: f32,
        /// mean D(x)
        d_x: f32,
        /// mean D(G(z)) before D's update
        d_g_z: f32,
        /// mean D(G(z)) after D's update
        d_g_z2: f32,
    },
    /// `--loss wgan-gp`: one critic step (and the last generator step's loss).
    WganGp {
        /// mean D(G(z)) - mean D(x) + gp: what the critic minimizes
        loss_c: f32,
        /// -mean D(G(z')): only at the steps that end with a generator step (every n_critic-th)
        #[serde(default, skip_serializing_if = "Option::is_none")]
        loss_g: Option<f32>,
        /// mean D(x) - mean D(G(z)): the critic's estimate of the Wasserstein distance
        wasserstein: f32,
        /// lambda mean (||grad D(x^)|| - 1)^2
        gp: f32,
        /// mean ||grad D(x^)|| at the interpolates x^ (the penalty holds it near 1; 0 where
        /// --gp-lambda 0 skips the penalty)
        grad_norm: f32,
    },
}

impl Default for StepMetrics {
    fn default() -> Self {
        let losses = Losses::Dcgan { loss_d: 0.0, loss_g: 0.0, d_x: 0.0, d_g_z: 0.0, d_g_z2: 0.0 };
        StepMetrics { stop: false, losses, residual_g: None, residual_d: None }
    }
}

impl Losses {
    /// The losses as the step computes them on each rank, in the order `from_raw` reads.
    pub fn to_raw(&self) -> [f32; 5] {
        match *self {
            Losses::Dcgan { loss_d, loss_g, d_x, d_g_z, d_g_z2 } => [loss_d, loss_g, d_x, d_g_z, d_g_z2],
            Losses::WganGp { loss_c, loss_g, wasserstein, gp, grad_norm } => {
                [loss_c, loss_g.unwrap_or(0.0), wasserstein, gp, grad_norm]
            }
        }
    }
    /// The same kind of losses with `raw`'s values (the averages over ranks).
    pub fn from_raw(&self, r: &[f32]) -> Losses {
        match self {
            Losses::Dcgan { .. } => Losses::Dcgan { loss_d: r[0], loss_g: r[1], d_x: r[2], d_g_z: r[3], d_g_z2: r[4] },
            Losses::WganGp { loss_g, .. } => Losses::WganGp {
                loss_c: r[0],
                loss_g: loss_g.map(|_| r[1]),
                wasserstein: r[2],
                gp: r[3],
                grad_norm: r[4],
            },
        }
    }
    /// The figures the progress line shows.
    pub fn short_text(&self) -> String {
        match *self {
            Losses::Dcgan { loss_d, loss_g, d_x, d_g_z, .. } => {
                format!("loss_D {loss_d:.3} loss_G {loss_g:.3} D(x) {d_x:.2} D(G(z)) {d_g_z:.2}")
            }
            Losses::WganGp { loss_c, loss_g, wasserstein, gp, grad_norm } => {
                let g = loss_g.map_or("-".to_string(), |v| format!("{v:.3}"));
                format!("loss_C {loss_c:.3} loss_G {g} W {wasserstein:.3} gp {gp:.3} |grad| {grad_norm:.2}")
            }
        }
    }

    /// For display: these losses, with G's loss of `earlier` where this step had no
    /// generator step (WGAN-GP's critic steps between).
    pub fn with_loss_g_of(&self, earlier: &Losses) -> Losses {
        match (*self, earlier) {
            (Losses::WganGp { loss_c, loss_g: None, wasserstein, gp, grad_norm }, Losses::WganGp { loss_g, .. }) => {
                Losses::WganGp { loss_c, loss_g: *loss_g, wasserstein, gp, grad_norm }
            }
            (this, _) => this,
        }
    }

    /// The two losses, (D's or the critic's, G's), for the checks that they are finite.
    pub fn pair(&self) -> (f32, f32) {
        let r = self.to_raw();
        (r[0], r[1])
    }
}

/// What a line of metrics.jsonl is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LineType {
    Step,
    Epoch,
    Stopped,
}

/// A step's line (`"type": "step"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    #[serde(rename = "type")]
    pub kind: LineType,
    /// Steps done, from 1.
    pub step: u64,
    /// From 0.
    pub epoch: u64,
    #[serde(flatten)]
    pub metrics: StepMetrics,
    pub lr: f32,
    pub ms: f64,
    /// Of `ms`, the time blocked on other ranks (gradient buckets and the metrics).
    pub wait_ms: f64,
    /// The training thread's CPU time in the step (with `--threads 1` on the CPU, all of the
    /// compute; worker threads are not counted).
    pub cpu_ms: f64,
    /// Of `ms`, the time the training thread was runnable but waiting for a core (other
    /// threads had it: the comm thread, other ranks on shared cores). Linux only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descheduled_ms: Option<f64>,
}

/// An epoch's line (`"type": "epoch"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    #[serde(rename = "type")]
    pub kind: LineType,
    pub epoch: u64,
    pub steps: u64,
    pub seconds: f64,
    pub images_per_s: f64,
    /// The epoch's sample grid.
    pub sample: String,
    /// Sample quality after the epoch (`--eval-every`): the Fréchet distance and KID to the
    /// test split, and the seconds the evaluation took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fid: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_seconds: Option<f64>,
    /// KID's standard deviation over its subsets, and the images generated: with the
    /// figures above, all of summary.json's `quality` entry, which a resume takes back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid_std: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_n: Option<usize>,
    /// The feature network that measured it: the xxh3-64 of its file, in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_net: Option<String>,
    #[serde(flatten)]
    pub more: MoreQuality,
}

impl EpochRecord {
    /// The epoch's sample quality as summary.json lists it, where the line holds all of it
    /// and the feature network of digest `feature_net` measured it.
    pub fn quality(&self, feature_net: &str) -> Option<crate::record::summary::EpochQuality> {
        if self.feature_net.as_deref() != Some(feature_net) {
            return None;
        }
        Some(crate::record::summary::EpochQuality {
            epoch: self.epoch,
            fid: self.fid?,
            kid: self.kid?,
            kid_std: self.kid_std?,
            n: self.eval_n?,
            seconds: self.eval_seconds?,
            more: self.more,
        })
    }
}

/// The figures of an evaluated epoch beyond G's FID and KID, kept flat in the epoch line and
/// in summary.json's `quality`: `--g-ema`'s averaged generator's FID and KID, and precision,
/// recall, density and coverage (eval::manifold) of G and of the average. Every one is absent
/// where the epoch was not evaluated (or, for `_ema`, without `--g-ema`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MoreQuality {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fid_ema: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid_ema: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision_ema: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall_ema: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density_ema: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_ema: Option<f64>,
}

/// The line of a run stopped by a signal before its end (`"type": "stopped"`): also in the
/// run itself, since mpiexec may stop relaying output while the job ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoppedRecord {
    #[serde(rename = "type")]
    pub kind: LineType,
    pub step: u64,
    /// The checkpoint written at the stop.
    pub checkpoint: String,
    /// How to continue.
    pub resume: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_loss_writes_and_reads_back_its_own_names() {
        let dcgan = Losses::Dcgan { loss_d: 1.0, loss_g: 2.0, d_x: 0.5, d_g_z: 0.25, d_g_z2: 0.125 };
        let wgan = Losses::WganGp { loss_c: -1.0, loss_g: Some(3.0), wasserstein: 2.0, gp: 0.5, grad_norm: 0.75 };
        let critic_only = Losses::WganGp { loss_c: -1.0, loss_g: None, wasserstein: 2.0, gp: 0.5, grad_norm: 0.75 };
        assert_eq!(critic_only.with_loss_g_of(&wgan), wgan);
        assert!(!serde_json::to_string(&critic_only).unwrap().contains("loss_g"));
        for losses in [dcgan, wgan, critic_only] {
            let m = StepMetrics { stop: false, losses, residual_g: None, residual_d: None };
            let json = serde_json::to_value(m).unwrap();
            assert_eq!(serde_json::from_value::<StepMetrics>(json.clone()).unwrap(), m, "{json}");
            assert_eq!(losses.from_raw(&losses.to_raw()), losses);
        }
        let json = serde_json::to_value(StepMetrics { stop: false, losses: wgan, residual_g: None, residual_d: None })
            .unwrap();
        assert_eq!(json["grad_norm"], 0.75);
        assert!(json.get("loss_d").is_none(), "{json}");
        assert!(wgan.short_text().contains("W 2.000 gp 0.500 |grad| 0.75"), "{}", wgan.short_text());
    }
}
