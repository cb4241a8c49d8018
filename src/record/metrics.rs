//! metrics.jsonl: one line per step and one per epoch, each with its `type`.

use serde::{Deserialize, Serialize};

/// Losses and discriminator outputs of one step, averaged over ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// Some rank asked to stop (SIGINT/SIGTERM); every rank sees the same answer.
    #[serde(skip)]
    pub stop: bool,
    /// BCE(D(x), 1) + BCE(D(G(z)), 0)
    pub loss_d: f32,
    /// BCE(D(G(z)), 1) with the updated D
    pub loss_g: f32,
    /// mean D(x)
    pub d_x: f32,
    /// mean D(G(z)) before D's update
    pub d_g_z: f32,
    /// mean D(G(z)) after D's update
    pub d_g_z2: f32,
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
