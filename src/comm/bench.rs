//! `dcgan-train bench-allreduce`: placeholder replaced below.
pub fn run(_args: crate::cli::comm::BenchAllreduceArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench-allreduce is not built yet")
}
