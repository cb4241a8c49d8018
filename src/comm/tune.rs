//! `dcgan-train tune-allreduce`: placeholder replaced below.
pub fn run(_args: crate::cli::comm::TuneAllreduceArgs) -> anyhow::Result<()> {
    anyhow::bail!("tune-allreduce is not built yet")
}
