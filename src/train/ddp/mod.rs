//! Data parallelism: gradients planned into buckets, averaged over the ranks by the comm
//! thread while backward goes on (fragment by fragment), and the state every rank must share
//! (weights broadcast at start, running statistics averaged, consistency checks).

pub mod block_momentum;
pub mod buckets;
pub mod comm_exchange;
pub mod device_packing;
pub mod exchange;
pub mod fragment_progress;
pub mod over_ranks;
pub mod residuals;
pub mod sync;
