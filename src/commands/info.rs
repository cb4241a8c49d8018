//! `dcgan-train info`: per rank, the host, local rank, device (name, memory, compute
//! capability; or the CPU, the host's memory and why no GPU), the compute threads, and the
//! MPI library.

use super::comm_args::CommArgs;
use crate::comm::CommConfig;
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct InfoArgs {
    #[command(flatten)]
    pub comm: CommArgs,
}

/// This rank's device, as one line: a GPU with its memory, or the CPU with the host's memory
/// and why no GPU.
fn device_line(local_rank: usize) -> String {
    let cpu = |why: &dyn std::fmt::Display| format!("cpu ({}; {why})", crate::memory::describe_host_memory());
    #[cfg(feature = "cuda")]
    {
        use crate::backend::cuda;
        match cuda::device_count().and_then(|n| cuda::probe_device(local_rank % n)) {
            Ok(p) => p.to_string(),
            Err(why) => cpu(&why),
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = local_rank;
        cpu(&"built without the cuda feature")
    }
}

pub fn run(args: InfoArgs) -> Result<()> {
    let comm = crate::comm::start(CommConfig::from_options(&args.comm.into())?)?;
    let w = comm.world().clone();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let line = format!(
        "rank {:>3}  host {}  local rank {}/{}  {} core(s)  {}",
        w.rank,
        w.hostname,
        w.local_rank,
        w.local_size,
        cores,
        device_line(w.local_rank)
    );
    let lines = comm.gather_bytes(line.into_bytes())?;
    if let Some(lines) = lines {
        println!("{}: {} rank(s) on {} host(s)", crate::version::PROGRAM, w.size, w.host_count());
        println!("MPI: {} (thread level {})", w.mpi_library, w.thread_level);
        for l in lines {
            println!("{}", String::from_utf8_lossy(&l));
        }
    }
    comm.shutdown()
}
