//! The flags of the communication layer, shared by every command that talks to other ranks.

use super::parse::{fragment_bytes, parse_bytes, parse_timeout};
use crate::comm::{AllreduceChoice, CommOptions, Wire};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Clone, Debug)]
pub struct CommArgs {
    /// Allreduce algorithm for gradients: auto picks by message size.
    #[arg(long, value_enum, default_value = "auto")]
    pub allreduce: AllreduceChoice,
    /// With --allreduce auto: messages smaller than this use rd, larger ones vhd (or ring).
    /// Sizes accept B, KiB, MiB.
    #[arg(long, value_parser = parse_bytes, default_value = "8KiB", conflicts_with = "allreduce_tuning")]
    pub allreduce_threshold: usize,
    /// With --allreduce auto: take the algorithm per message size from this rules file
    /// (written by `dcgan-train tune-allreduce --out FILE`).
    #[arg(long, value_name = "FILE")]
    pub allreduce_tuning: Option<PathBuf>,
    /// Cut gradient buckets into fragments of at most this size, each its own allreduce, so
    /// that copies and the exchange pipeline (0 = do not cut).
    #[arg(long, value_parser = fragment_bytes, default_value = "1MiB")]
    pub fragment_bytes: usize,
    /// End the job when a collective has waited this long for another rank, printing which
    /// ranks have not arrived (e.g. 60s, 500ms, 5m; 0 = never).
    #[arg(long, value_parser = parse_timeout, default_value = "60s")]
    pub stall_timeout: Duration,
    /// How gradients travel between ranks: f32 (exact), bf16 (half the bytes, like
    /// Horovod's fp16 compression; for slow links) or 1bit (28x fewer bytes, the error carried
    /// to the next step; its own allreduce over stripe owners).
    #[arg(long, value_enum, default_value_t = Wire::F32)]
    pub wire: Wire,
    /// With --wire 1bit: exchange f32 for this many steps first, while Adam's moments settle
    /// [default: a tenth of the run's steps].
    #[arg(long, value_name = "STEPS")]
    pub wire_warmup_steps: Option<u64>,
    /// With --wire 1bit: freeze Adam's second moment (and its bias correction) when the
    /// warm-up ends, as 1-bit Adam does: the compressed gradients' noise no longer reaches it.
    #[arg(long)]
    pub wire_freeze_variance: bool,
}

impl From<CommArgs> for CommOptions {
    fn from(a: CommArgs) -> CommOptions {
        CommOptions {
            allreduce: a.allreduce,
            allreduce_threshold: a.allreduce_threshold,
            allreduce_tuning: a.allreduce_tuning,
            fragment_bytes: a.fragment_bytes,
            stall_timeout: a.stall_timeout,
            wire: a.wire,
            wire_warmup_steps: a.wire_warmup_steps,
            wire_freeze_variance: a.wire_freeze_variance,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        comm: CommArgs,
    }

    #[test]
    fn the_flags_defaults_are_the_options_defaults() {
        assert_eq!(CommOptions::from(T::parse_from(["x"]).comm), CommOptions::default());
        let o = CommOptions::from(T::parse_from(["x", "--allreduce", "ring", "--fragment-bytes", "64KiB"]).comm);
        assert_eq!((o.allreduce, o.fragment_bytes), (AllreduceChoice::Fixed(crate::comm::Algorithm::Ring), 65536));
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = T::try_parse_from(["x", "--allreduce", "fast"]).err().unwrap().to_string();
        assert!(e.contains("--allreduce") && e.contains("auto, tree, rd, vhd, ring, hier, mpi"), "{e}");
        let e = T::try_parse_from(["x", "--allreduce-threshold", "8XB"]).err().unwrap().to_string();
        assert!(e.contains("--allreduce-threshold") && e.contains("is not a size"), "{e}");
        let e = T::try_parse_from(["x", "--fragment-bytes", "5"]).err().unwrap().to_string();
        assert!(e.contains("--fragment-bytes") && e.contains("multiple of 4"), "{e}");
        let e = T::try_parse_from(["x", "--stall-timeout", "soon"]).err().unwrap().to_string();
        assert!(e.contains("--stall-timeout") && e.contains("is not a duration"), "{e}");
        let e = T::try_parse_from(["x", "--allreduce-threshold", "1KiB", "--allreduce-tuning", "f"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot be used with"), "{e}");
    }
}
