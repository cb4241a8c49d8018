//! Keeping the ranks' copies of the model the same: rank 0's weights at start, averaged
//! batch-norm running statistics at epoch ends, and the `--check-consistency` comparison.
//! Also the host snapshots of a network that checkpoints are made of.

use crate::backend::{Backend, DeviceBuf, View, ViewMut};
use crate::checkpoint::{Moments, NetTensors};
use crate::model::net::Net;
use crate::nn::params::ParamStore;
use crate::train::job::Job;
use anyhow::{Result, anyhow};

/// A device buffer's values on the host.
pub fn download<B: Backend>(be: &B, buf: &B::Buf) -> Vec<f32> {
    let mut v = vec![0.0; buf.len()];
    be.download(View::whole(buf), &mut v);
    v
}

/// Every rank takes rank 0's values and running statistics (and Adam state when
/// `optimizer`: a resumed run).
pub fn broadcast_from_root<B: Backend>(job: &Job, be: &B, store: &mut ParamStore<B>, optimizer: bool) -> Result<()> {
    if job.world.size == 1 {
        return Ok(());
    }
    let mut bufs = vec![&mut store.value, &mut store.state];
    if optimizer {
        bufs.push(&mut store.m);
        bufs.push(&mut store.v);
    }
    for buf in bufs {
        broadcast_buf_from_root(job, be, buf)?;
    }
    let mine: Vec<u8> = [store.adam_steps, store.bn_batches_tracked].iter().flat_map(|c| c.to_le_bytes()).collect();
    let root = job.comm.broadcast_bytes(0, mine)?;
    if optimizer {
        let word = |i: usize| u64::from_le_bytes(root[8 * i..8 * i + 8].try_into().expect("two counters"));
        (store.adam_steps, store.bn_batches_tracked) = (word(0), word(1));
    }
    Ok(())
}

/// Every rank takes rank 0's values of `buf`. Collective.
pub fn broadcast_buf_from_root<B: Backend>(job: &Job, be: &B, buf: &mut B::Buf) -> Result<()> {
    if job.world.size > 1 {
        let root = job.comm.broadcast_f32(0, download(be, buf))?;
        be.upload(&root, ViewMut::whole(buf));
    }
    Ok(())
}

/// Without `--sync-bn` each rank's running statistics follow its own data; averaging them
/// makes evaluation (the sample grids) the same on every rank.
pub fn average_running_stats<B: Backend>(job: &Job, be: &B, store: &mut ParamStore<B>) -> Result<()> {
    if job.world.size == 1 || store.state.is_empty() {
        return Ok(());
    }
    let avg = job.comm.allreduce_mean(download(be, &store.state))?;
    be.upload(&avg, ViewMut::whole(&mut store.state));
    Ok(())
}

/// FNV-1a over the bits of each trained tensor, in layout order. (Running statistics are
/// per rank between epoch ends unless --sync-bn, so they are not compared.)
fn tensor_hashes<B: Backend>(be: &B, store: &ParamStore<B>) -> Vec<(String, u64)> {
    let (values, _) = store.download_values(be);
    let hash = |v: &[f32]| {
        v.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| (h ^ x.to_bits() as u64).wrapping_mul(0x100_0000_01b3))
    };
    store.layout.params.iter().map(|t| (t.name.clone(), hash(&values[t.range.clone()]))).collect()
}

/// Compare every rank's parameters with rank 0's; every rank fails if any differs, and a
/// differing rank names the first tensor that does.
/// `exchanging`: whether gradients are averaged at all (without, the drift is expected).
pub fn check_consistency<B: Backend>(job: &Job, be: &B, nets: [&Net<B>; 2], step: u64, exchanging: bool) -> Result<()> {
    let mut mine = Vec::new();
    for net in nets {
        for (name, h) in tensor_hashes(be, &net.store) {
            mine.push((format!("{} {name}", net.name), h));
        }
    }
    let bytes: Vec<u8> = mine.iter().flat_map(|(_, h)| h.to_le_bytes()).collect();
    let root = job.comm.broadcast_bytes(0, bytes)?;
    let first_diff = mine.iter().zip(root.chunks_exact(8)).find(|((_, h), r)| h.to_le_bytes() != **r);
    // Every rank must reach the agreement, the differing ones too.
    let why = match exchanging {
        true => "a rank computed differently (nondeterministic hardware or a bug); rerun to see whether it repeats",
        false => "as expected with --no-exchange, whose ranks never average their gradients",
    };
    let result = match first_diff {
        Some(((name, _), _)) => Err(anyhow!(
            "--check-consistency: after step {step}, rank {} holds other parameters than rank 0, first in {name}: {why}",
            job.world.rank
        )),
        None => Ok(()),
    };
    job.agree(result)
}

/// A network's tensors and Adam state on the host (for a checkpoint).
pub fn snapshot<B: Backend>(be: &B, store: &ParamStore<B>) -> (NetTensors, Moments) {
    let (values, state) = store.download_values(be);
    let t = NetTensors { values, state, batches_tracked: store.bn_batches_tracked };
    let m = Moments { exp_avg: download(be, &store.m), exp_avg_sq: download(be, &store.v), steps: store.adam_steps };
    (t, m)
}

/// Put a checkpoint's tensors and Adam state on the device.
pub fn restore<B: Backend>(be: &B, store: &mut ParamStore<B>, t: &NetTensors, m: &Moments) {
    be.upload(&t.values, ViewMut::whole(&mut store.value));
    be.upload(&t.state, ViewMut::whole(&mut store.state));
    be.upload(&m.exp_avg, ViewMut::whole(&mut store.m));
    be.upload(&m.exp_avg_sq, ViewMut::whole(&mut store.v));
    store.adam_steps = m.steps;
    store.bn_batches_tracked = t.batches_tracked;
}

/// Every rank's `mine` on rank 0 (index = rank), None on the other ranks: what a checkpoint
/// keeps of each rank's own state. Collective.
pub fn gather_f32(job: &Job, mine: &[f32]) -> Result<Option<Vec<Vec<f32>>>> {
    let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let Some(parts) = job.comm.gather_bytes(bytes)? else { return Ok(None) };
    let floats = |b: &Vec<u8>| b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
    Ok(Some(parts.iter().map(floats).collect()))
}

/// Rank 0 receives the running statistics (G's, D's) of ranks 1.. for a checkpoint; the
/// other ranks get None. Collective.
pub fn gather_rank_states<B: Backend>(
    job: &Job,
    be: &B,
    stores: [&ParamStore<B>; 2],
) -> Result<Option<Vec<[Vec<f32>; 2]>>> {
    if job.world.size == 1 {
        return Ok(Some(Vec::new()));
    }
    let mine: Vec<f32> = stores.iter().flat_map(|s| download(be, &s.state)).collect();
    let Some(parts) = gather_f32(job, &mine)? else {
        return Ok(None);
    };
    let g_len = stores[0].state.len();
    Ok(Some(parts[1..].iter().map(|v| [v[..g_len].to_vec(), v[g_len..].to_vec()]).collect()))
}

/// Every rank r > 0 takes its own running statistics from a checkpoint rank 0 read
/// (`states` on rank 0, ignored elsewhere). Collective.
pub fn scatter_rank_states<B: Backend>(
    job: &Job,
    be: &B,
    stores: [&mut ParamStore<B>; 2],
    states: Option<&[[Vec<f32>; 2]]>,
) -> Result<()> {
    if job.world.size == 1 {
        return Ok(());
    }
    let flat: Vec<f32> =
        states.map(|s| s.iter().flat_map(|[g, d]| g.iter().chain(d).copied()).collect()).unwrap_or_default();
    let all = job.comm.broadcast_f32(0, flat)?;
    if job.world.rank > 0 {
        let per_rank = stores[0].state.len() + stores[1].state.len();
        let mine = &all[(job.world.rank - 1) * per_rank..job.world.rank * per_rank];
        let g_len = stores[0].state.len();
        let [g, d] = stores;
        be.upload(&mine[..g_len], ViewMut::whole(&mut g.state));
        be.upload(&mine[g_len..], ViewMut::whole(&mut d.state));
    }
    Ok(())
}
