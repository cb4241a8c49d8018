//! Scaling beyond the machines at hand: the cost model of the allreduce algorithms, the
//! `ping-pong` that measures its constants on real links, and `simulate-scaling`, which
//! replays a run's recorded step against the model at any node count.

pub mod comm_cpu;
pub mod compare;
pub mod core_share;
pub mod cost;
pub mod links;
pub mod pingpong;
pub mod prediction_table;
pub mod program;
pub mod replay;
pub mod run_info;
pub mod simulate;
pub mod speed_fit;
pub mod two_level;
