//! Starting MPI on the comm thread and learning who this process is.

use super::{MessageCuts, Mpi};
use crate::comm::WorldInfo;
use crate::comm::status::Activity;
use crate::comm::transport::{WaitPolicy, host_numbers};
use anyhow::{anyhow, bail};
use mpi::ffi;
use mpi::topology::Communicator;
use mpi::traits::*;
use std::ffi::c_int;

impl Mpi {
    /// Initialize MPI on this thread and learn who we are. Asks for MPI_THREAD_MULTIPLE;
    /// needs at least MPI_THREAD_FUNNELED (every call comes from this thread, the one that
    /// initialized MPI).
    pub fn init() -> anyhow::Result<(Mpi, WorldInfo)> {
        let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
            .ok_or_else(|| anyhow!("MPI was already initialized in this process"))?;
        if level < mpi::Threading::Funneled {
            bail!(
                "the MPI library granted thread level {level:?}; dcgan-train needs at least \
                 Funneled (MPI calls come from the comm thread): use an MPI built with thread \
                 support"
            );
        }
        let world = universe.world();
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        let local = world.split_shared(rank as c_int);
        let (local_rank, local_size) = (local.rank() as usize, local.size() as usize);
        drop(local);
        let host = crate::comm::hostname();
        const HOST_BYTES: usize = 256;
        let mut mine = [0u8; HOST_BYTES];
        let n = host.len().min(HOST_BYTES);
        mine[..n].copy_from_slice(&host.as_bytes()[..n]);
        let mut all = vec![0u8; HOST_BYTES * size];
        world.all_gather_into(&mine[..], &mut all[..]);
        let hosts = all
            .chunks_exact(HOST_BYTES)
            .map(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect();
        let library = mpi::environment::library_version()
            .unwrap_or_else(|_| "unknown MPI".into())
            .trim_end_matches(char::from(0))
            .to_string()
            .lines()
            .next()
            .unwrap_or("unknown MPI")
            .trim()
            .to_string();
        let info = WorldInfo {
            rank,
            size,
            local_rank,
            local_size,
            hostname: host,
            hosts,
            mpi_library: library,
            thread_level: format!("{level:?}").to_lowercase(),
        };
        let cuts = MessageCuts::from_env();
        let t = Mpi {
            // SAFETY: reading an extern constant initialized by the MPI shim.
            comm: unsafe { ffi::RSMPI_COMM_WORLD },
            rank,
            size,
            hosts: host_numbers(&info.hosts),
            policy: WaitPolicy::default(),
            activity: Activity::new(),
            scratch: Vec::new(),
            chunk: cuts.chunk,
            depth: cuts.depth,
            piece: cuts.piece,
            eager_max: cuts.eager_max,
            recvs: Vec::new(),
            sends: Vec::new(),
            _universe: universe,
        };
        Ok((t, info))
    }
}
