//! Command-line options of the communication layer: the allreduce selection and the comm
//! thread's settings (flattened into `train`), and the `bench-allreduce` / `tune-allreduce`
//! subcommands.

use clap::Args;

/// Options every command that talks to other ranks accepts.
#[derive(Args, Clone, Debug, Default, serde::Serialize)]
pub struct CommArgs {}

/// `dcgan-train bench-allreduce`
#[derive(Args, Clone, Debug)]
pub struct BenchAllreduceArgs {
    #[command(flatten)]
    pub comm: CommArgs,
}

/// `dcgan-train tune-allreduce`
#[derive(Args, Clone, Debug)]
pub struct TuneAllreduceArgs {
    #[command(flatten)]
    pub comm: CommArgs,
}
