//! `--wire 1bit`'s error feedback in checkpoints: each rank's residuals, held by its comm
//! thread per bucket, laid out per network in the parameters' flat order (so that a resume
//! with other bucket sizes still finds each value's residual), gathered to rank 0 to be
//! written and handed back to each rank on a resume.

use super::buckets::Bucket;
use crate::checkpoint::RankResiduals;
use crate::comm::CommHandle;
use crate::comm::onebit::Residuals;
use crate::train::job::Job;
use anyhow::{Result, bail};

/// This rank's residuals of the networks whose buckets are `plans` ([G, D]), each network
/// `[param_len]` long; None while no bucket has travelled 1-bit.
pub fn collect(comm: &CommHandle, plans: [&[Bucket]; 2]) -> Result<Option<RankResiduals>> {
    let held = comm.residuals()?;
    if held.is_empty() {
        return Ok(None);
    }
    let per_net = plans.map(|plan| {
        let len = plan.iter().map(|b| b.range.end).max().unwrap_or(0);
        let mut parts = [vec![0.0f32; len], vec![0.0f32; len]];
        for b in plan {
            if let Some((_, r)) = held.iter().find(|(id, r)| *id == b.id && r.own.len() == b.range.len()) {
                parts[0][b.range.clone()].copy_from_slice(&r.own);
                parts[1][b.range.clone()].copy_from_slice(&r.stripe);
            }
        }
        parts
    });
    Ok(Some(per_net))
}

/// Give this rank's comm thread `r` (laid out as `collect` returns it), bucket by bucket.
/// Returns each bucket's sum of squares ([G's buckets, D's]), as the comm thread reports it
/// after an exchange.
pub fn install(comm: &CommHandle, plans: [&[Bucket]; 2], r: &RankResiduals) -> Result<[Vec<f64>; 2]> {
    let mut by_bucket = Vec::new();
    let mut squares: [Vec<f64>; 2] = Default::default();
    for ((plan, [own, stripe]), sq) in plans.iter().zip(r).zip(&mut squares) {
        for b in *plan {
            let range = b.range.clone();
            let res = Residuals { own: own[range.clone()].to_vec(), stripe: stripe[range].to_vec() };
            sq.push(res.sum_of_squares());
            by_bucket.push((b.id, res));
        }
    }
    comm.set_residuals(by_bucket)?;
    Ok(squares)
}

fn from_floats(v: &[f32], lens: [usize; 2]) -> RankResiduals {
    let (g, d) = v.split_at(2 * lens[0]);
    let halves = |x: &[f32], n: usize| [x[..n].to_vec(), x[n..2 * n].to_vec()];
    [halves(g, lens[0]), halves(d, lens[1])]
}

/// Every rank's residuals on rank 0, rank 0's first (empty where none has any yet); None on
/// the other ranks. Collective. `lens`: the networks' parameter counts.
pub fn gather(job: &Job, mine: Option<RankResiduals>, lens: [usize; 2]) -> Result<Option<Vec<RankResiduals>>> {
    let mine: Vec<f32> = mine.iter().flatten().flatten().flatten().copied().collect();
    let Some(parts) = super::sync::gather_f32(job, &mine)? else {
        return Ok(None);
    };
    if parts.iter().all(|p| p.is_empty()) {
        return Ok(Some(Vec::new()));
    }
    let want = 2 * (lens[0] + lens[1]);
    if let Some(r) = parts.iter().position(|p| p.len() != want) {
        bail!("rank {r} holds {} 1-bit residuals, not {want}: the ranks disagree", parts[r].len());
    }
    Ok(Some(parts.iter().map(|p| from_floats(p, lens)).collect()))
}

/// Each rank's own residuals from a checkpoint rank 0 read (`all` on rank 0, ignored
/// elsewhere); None where the checkpoint has none. Collective.
pub fn scatter(job: &Job, all: Option<&[RankResiduals]>, lens: [usize; 2]) -> Result<Option<RankResiduals>> {
    let flat: Vec<f32> = all.unwrap_or_default().iter().flat_map(|r| r.iter().flatten().flatten().copied()).collect();
    let flat = job.comm.broadcast_f32(0, flat)?;
    if flat.is_empty() {
        return Ok(None);
    }
    let per_rank = 2 * (lens[0] + lens[1]);
    if flat.len() != per_rank * job.world.size {
        bail!("the checkpoint's 1-bit residuals are for {} ranks, not {}", flat.len() / per_rank, job.world.size);
    }
    let r = job.world.rank;
    Ok(Some(from_floats(&flat[r * per_rank..(r + 1) * per_rank], lens)))
}
