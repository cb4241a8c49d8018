//! Communication between ranks: transports, hand-written allreduce algorithms, the comm
//! thread. (Skeleton: filled in by the allreduce work, issue 3.)

pub mod bench {
    pub fn run(_args: crate::cli::comm::BenchAllreduceArgs) -> anyhow::Result<()> {
        anyhow::bail!("bench-allreduce is not built yet")
    }
}
pub mod tune {
    pub fn run(_args: crate::cli::comm::TuneAllreduceArgs) -> anyhow::Result<()> {
        anyhow::bail!("tune-allreduce is not built yet")
    }
}
