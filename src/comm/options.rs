//! What a user chooses of the communication layer (the allreduce, how values travel, fragments,
//! the stall timeout), as runs record it; `CommConfig::from_options` turns it into the comm
//! thread's settings. The command line converts its flags into these.

use super::allreduce::Algorithm;
use clap::ValueEnum;
use clap::builder::PossibleValue;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

/// `--allreduce`: one algorithm for every message, or `auto` (by message size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AllreduceChoice {
    /// rd below the threshold, the large-message algorithm above, or a tuning file's rules.
    #[default]
    Auto,
    Fixed(Algorithm),
}

impl AllreduceChoice {
    /// The fixed algorithm; None for `auto`.
    pub fn algorithm(self) -> Option<Algorithm> {
        match self {
            AllreduceChoice::Auto => None,
            AllreduceChoice::Fixed(a) => Some(a),
        }
    }

    pub fn name(self) -> &'static str {
        self.algorithm().map_or("auto", Algorithm::name)
    }
}

impl std::fmt::Display for AllreduceChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `auto` and then `Algorithm`'s own values, so the list of algorithms is written once.
impl ValueEnum for AllreduceChoice {
    fn value_variants<'a>() -> &'a [Self] {
        static ALL: LazyLock<Vec<AllreduceChoice>> = LazyLock::new(|| {
            let fixed = Algorithm::all().iter().map(|&a| AllreduceChoice::Fixed(a));
            std::iter::once(AllreduceChoice::Auto).chain(fixed).collect()
        });
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self {
            AllreduceChoice::Auto => Some(PossibleValue::new("auto").help(
                "rd below --allreduce-threshold, vhd above (ring if the rank count is not a power of two, hier \
                 where several ranks share each host), or the rules of --allreduce-tuning",
            )),
            AllreduceChoice::Fixed(a) => a.to_possible_value(),
        }
    }
}

impl Serialize for AllreduceChoice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for AllreduceChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        <AllreduceChoice as ValueEnum>::from_str(&name, false)
            .map_err(|_| serde::de::Error::custom(format!("unknown allreduce '{name}'")))
    }
}

/// `--wire`: how gradient values travel between ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    /// Exact: 4 bytes per value.
    #[default]
    F32,
    /// bfloat16, 2 bytes per value: half the bytes on slow links, each value rounded to 8
    /// significant bits before it travels (sums stay f32; every rank keeps identical bits).
    Bf16,
    /// One bit per value and two floats per column of 512 (28x fewer bytes), with error
    /// feedback: what a step's quantization misses is added to the next step's gradient
    /// (CNTK's 1-bit SGD). After the f32 warm-up of --wire-warmup-steps.
    #[value(name = "1bit")]
    #[serde(rename = "1bit")]
    OneBit,
}

impl Wire {
    /// Bytes on the wire per byte of f32 gradient (1-bit: its whole columns' encoding).
    pub fn size_ratio(self) -> f64 {
        match self {
            Wire::F32 => 1.0,
            Wire::Bf16 => 0.5,
            Wire::OneBit => {
                let column = super::onebit::quantize::COLUMN;
                super::onebit::quantize::encoded_len(column) as f64 / (4 * column) as f64
            }
        }
    }

    /// For commands that time or tune exact f32 messages: an error for anything else.
    pub fn require_f32(self, command: &str) -> anyhow::Result<()> {
        if self != Wire::F32 {
            anyhow::bail!("{command} times exact f32 messages; --wire applies to train: drop --wire {}", self.name());
        }
        Ok(())
    }

    pub fn name(self) -> &'static str {
        match self {
            Wire::F32 => "f32",
            Wire::Bf16 => "bf16",
            Wire::OneBit => "1bit",
        }
    }
}

/// The communication options of a run, as summary.json and checkpoints keep them (the field
/// names are the flags'; a missing one reads as its default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CommOptions {
    pub allreduce: AllreduceChoice,
    /// With `auto`: messages below this many bytes use rd, larger ones the large-message
    /// algorithm.
    pub allreduce_threshold: usize,
    /// With `auto`: a rules file of `tune-allreduce` instead of the threshold.
    pub allreduce_tuning: Option<PathBuf>,
    /// Buckets are cut into fragments of at most this many bytes (0 = not cut).
    pub fragment_bytes: usize,
    /// A collective that waits longer than this ends the job (`Duration::MAX` = never).
    pub stall_timeout: Duration,
    pub wire: Wire,
    /// `--wire 1bit`: steps that exchange f32 before it takes over (None: a tenth of the
    /// run's steps).
    pub wire_warmup_steps: Option<u64>,
    /// `--wire 1bit`: freeze Adam's second moment when the warm-up ends (1-bit Adam).
    pub wire_freeze_variance: bool,
}

/// `--allreduce-threshold`'s default: the rd/vhd crossover measured between 2 ranks.
pub const DEFAULT_THRESHOLD_BYTES: usize = 8 << 10;
/// `--fragment-bytes`'s default.
pub const DEFAULT_FRAGMENT_BYTES: usize = 1 << 20;
/// `--stall-timeout`'s default.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for CommOptions {
    fn default() -> Self {
        CommOptions {
            allreduce: AllreduceChoice::Auto,
            allreduce_threshold: DEFAULT_THRESHOLD_BYTES,
            allreduce_tuning: None,
            fragment_bytes: DEFAULT_FRAGMENT_BYTES,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            wire: Wire::F32,
            wire_warmup_steps: None,
            wire_freeze_variance: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_is_auto_then_every_algorithm_by_its_own_name() {
        let names: Vec<String> = AllreduceChoice::value_variants()
            .iter()
            .map(|c| c.to_possible_value().unwrap().get_name().to_string())
            .collect();
        assert_eq!(names, ["auto", "tree", "rd", "vhd", "ring", "hier", "mpi"]);
        for c in AllreduceChoice::value_variants() {
            assert_eq!(c.name(), c.to_possible_value().unwrap().get_name());
            let json = serde_json::to_value(c).unwrap();
            assert_eq!(json, serde_json::json!(c.name()));
            assert_eq!(serde_json::from_value::<AllreduceChoice>(json).unwrap(), *c);
        }
        assert!(serde_json::from_value::<AllreduceChoice>(serde_json::json!("fast")).is_err());
    }

    #[test]
    fn options_keep_their_recorded_form() {
        // Checkpoints and summaries already written hold this form: it must read back, and
        // options added since are written beside it.
        let mut recorded = serde_json::json!({
            "allreduce": "auto", "allreduce_threshold": 8192, "allreduce_tuning": null,
            "fragment_bytes": 1048576, "stall_timeout": {"secs": 60, "nanos": 0}, "wire": "f32"
        });
        assert_eq!(serde_json::from_value::<CommOptions>(recorded.clone()).unwrap(), CommOptions::default());
        recorded["wire_warmup_steps"] = serde_json::Value::Null;
        recorded["wire_freeze_variance"] = false.into();
        assert_eq!(serde_json::to_value(CommOptions::default()).unwrap(), recorded);
        let one_bit = CommOptions { wire: Wire::OneBit, ..CommOptions::default() };
        assert_eq!(serde_json::to_value(&one_bit).unwrap()["wire"], "1bit");
    }
}
