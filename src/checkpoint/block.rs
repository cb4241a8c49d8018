//! Block momentum's state in a checkpoint (`--sync-every`): the global model and the momentum,
//! and, because a checkpoint may fall inside a block where the ranks' models differ, every
//! other rank's own weights and Adam moments (rank 0's are the checkpoint's G and D).

use super::{flat_info, read_flat};
use crate::nn::params::TensorInfo;
use anyhow::Result;
use safetensors::SafeTensors;

#[derive(Clone, Debug, PartialEq)]
pub struct BlockCheckpoint {
    /// `[G, D]`: the global model the block started from, `[param_len]` each.
    pub global: [Vec<f32>; 2],
    /// `[G, D]`: the block momentum, `[param_len]` each.
    pub velocity: [Vec<f32>; 2],
    /// Ranks 1..: `[G, D]` x `[weights, exp_avg, exp_avg_sq]`, `[param_len]` each.
    pub ranks: Vec<[[Vec<f32>; 3]; 2]>,
}

const NETS: [&str; 2] = ["G", "D"];
const RANK_PARTS: [&str; 3] = ["weights", "exp_avg", "exp_avg_sq"];

fn rank_name(rank: usize, net: &str, part: &str) -> String {
    format!("rank{rank}.{net}.{part}")
}

/// The tensors of `b`, for the optimizer file.
pub(super) fn push_infos<'a>(b: &'a BlockCheckpoint, infos: &mut Vec<(TensorInfo, &'a [f32])>) {
    for (k, net) in NETS.iter().enumerate() {
        infos.push((flat_info(format!("block.{net}.global"), b.global[k].len()), &b.global[k][..]));
        infos.push((flat_info(format!("block.{net}.velocity"), b.velocity[k].len()), &b.velocity[k][..]));
    }
    for (i, nets) in b.ranks.iter().enumerate() {
        for (net, parts) in NETS.iter().zip(nets) {
            for (part, v) in RANK_PARTS.iter().zip(parts) {
                infos.push((flat_info(rank_name(i + 1, net, part), v.len()), &v[..]));
            }
        }
    }
}

/// The block state of a checkpoint of `ranks` ranks whose networks have `lens` parameters;
/// None where it has none (a run without --sync-every).
pub(super) fn read(
    st: &SafeTensors<'_>,
    what: &str,
    ranks: usize,
    lens: [usize; 2],
) -> Result<Option<BlockCheckpoint>> {
    if st.tensor("block.G.global").is_err() {
        return Ok(None);
    }
    let get = |name: String, len: usize| read_flat(st, what, &name, len);
    let global = [get("block.G.global".into(), lens[0])?, get("block.D.global".into(), lens[1])?];
    let velocity = [get("block.G.velocity".into(), lens[0])?, get("block.D.velocity".into(), lens[1])?];
    let mut others = Vec::new();
    for rank in 1..ranks {
        let mut nets: [[Vec<f32>; 3]; 2] = Default::default();
        for ((net, parts), len) in NETS.iter().zip(nets.iter_mut()).zip(lens) {
            for (part, out) in RANK_PARTS.iter().zip(parts.iter_mut()) {
                *out = get(rank_name(rank, net, part), len)?;
            }
        }
        others.push(nets);
    }
    Ok(Some(BlockCheckpoint { global, velocity, ranks: others }))
}
