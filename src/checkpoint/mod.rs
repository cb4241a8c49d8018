//! Checkpoints: G and D weights as PyTorch-loadable safetensors, the optimizer state and the
//! training progress in a third file, written atomically so a crash never leaves a run
//! without a complete checkpoint.
//!
//! Layout: `<run>/checkpoints/step-<N>/{G,D,optimizer}.safetensors` and
//! `<run>/checkpoints/latest` naming the newest complete one. A new checkpoint is written to
//! a temporary directory, fsynced and renamed; only then does `latest` move (tmp + fsync +
//! rename) and the previous checkpoint get removed.
//!
//! Every file carries its tensors' digests (`digest.rs`), checked whenever a file is read;
//! `find.rs` picks the checkpoint a path names and falls back past a broken `latest`.

pub mod best;
pub mod block;
pub mod digest;
pub mod find;
mod save_id;
pub mod tensors;

use crate::nn::params::{ParamLayout, TensorInfo};
use anyhow::{Context, Result, bail};
pub use find::{Corrupt, Located, locate, run_dir_of, set_aside};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
pub use tensors::NetTensors;

/// Where training stands, and what it needs to continue exactly as an uninterrupted run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Steps completed.
    pub step: u64,
    /// The epoch the next step belongs to, and how many of its batches are done.
    pub epoch: u64,
    pub batch_in_epoch: u64,
    pub seed: u64,
    pub ranks: usize,
    pub batch_per_rank: usize,
    pub image_size: usize,
    /// G's width (`--ngf`), which `sample` and `evaluate` build it with; the paper's 64 in
    /// checkpoints that predate it.
    #[serde(default = "paper_ngf")]
    pub ngf: usize,
    /// The data order: epoch e's permutation is a ChaCha8 shuffle keyed by (seed, e), so the
    /// epoch and position above restore it. The noise of step s is keyed by (seed, s) and
    /// the global sample index, so `step` restores the random state too.
    pub rng: String,
    /// The options of the run (a resume must not change what training computes).
    pub config: serde_json::Value,
    /// `--sync-every`: the step was a block's last and its sync has not started (a
    /// checkpoint or a stop there is saved before it, so that a resume starts it as the run
    /// would have and goes on exactly).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub block_sync_due: bool,
}

fn paper_ngf() -> usize {
    64
}

impl Progress {
    /// `--sync-every` on several ranks: how many steps into a block of how many the
    /// checkpoint falls, where the ranks' models differ (its G and D are rank 0's own, not
    /// their average). None where they are one model: no blocks, one rank, the solo steps of
    /// `--distributed-after`, or a block's end synced before the save.
    pub fn inside_a_block(&self) -> Option<(u64, u64)> {
        let every = self.config.get("sync_every")?.as_u64().filter(|&k| k > 0)?;
        let from = self.config.get("distributed_after").and_then(serde_json::Value::as_u64).unwrap_or(0);
        if self.ranks < 2 || self.step <= from {
            return None;
        }
        match ((self.step - from) % every, self.block_sync_due) {
            (0, false) => None,
            (0, true) => Some((every, every)),
            (into, _) => Some((into, every)),
        }
    }

    /// The run's recorded option (or record, such as a fingerprint) `key`, where it is a
    /// string.
    pub fn recorded(&self, key: &str) -> Option<&str> {
        self.config.get(key)?.as_str()
    }
}

/// Adam's moments of one network, in its layout's flat order (`[param_len]` each).
#[derive(Clone, Debug, PartialEq)]
pub struct Moments {
    pub exp_avg: Vec<f32>,
    pub exp_avg_sq: Vec<f32>,
    pub steps: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub g: NetTensors,
    pub d: NetTensors,
    /// `--g-ema`: the averaged generator (`G_ema.safetensors`).
    pub g_ema: Option<AveragedGenerator>,
    pub g_adam: Moments,
    pub d_adam: Moments,
    pub progress: Progress,
    /// Running statistics (G's, D's) of ranks 1.. (rank 0's are in G and D): without
    /// --sync-bn they differ between epoch ends, and an exact resume needs each rank's own.
    pub rank_states: Vec<[Vec<f32>; 2]>,
    /// `--wire 1bit`: every rank's error feedback, rank 0 first (empty before any gradient
    /// travelled 1-bit), so that a resume continues exactly.
    pub residuals: Vec<RankResiduals>,
    /// `--sync-every`: block momentum's state and the other ranks' own models.
    pub block: Option<block::BlockCheckpoint>,
}

/// `--g-ema`'s average of G: its weights with their own running statistics, and the images of
/// the updates it has taken in (its ramp goes on from them).
#[derive(Clone, Debug, PartialEq)]
pub struct AveragedGenerator {
    pub net: NetTensors,
    pub images_seen: u64,
}

/// One rank's 1-bit residuals: `[G, D]` x `[its own, its stripe's]`, each `[param_len]` of that
/// network in its layout's flat order.
pub type RankResiduals = [[Vec<f32>; 2]; 2];

/// The tensor names of a rank's residuals, as `RankResiduals` orders them.
fn residual_names(rank: usize) -> [[String; 2]; 2] {
    ["G", "D"].map(|net| ["residual", "stripe_residual"].map(|part| format!("rank{rank}.{net}.{part}")))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    f.sync_all().with_context(|| format!("cannot fsync {}", path.display()))?;
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("cannot fsync directory {}", dir.display()))
}

fn meta(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn rank_state_name(rank: usize, net: &str) -> String {
    format!("rank{rank}.{net}.running_stats")
}

/// The flat tensor `name` of `len` floats, which the checkpoint must hold.
fn read_flat(st: &safetensors::SafeTensors<'_>, what: &str, name: &str, len: usize) -> Result<Vec<f32>> {
    if st.tensor(name).is_err() {
        bail!("{what} has no {name}: the checkpoint is incomplete");
    }
    let mut out = vec![0.0; len];
    tensors::read_f32(st, &flat_info(name.to_string(), len), what, &mut out)?;
    Ok(out)
}

fn flat_info(name: String, len: usize) -> TensorInfo {
    TensorInfo { name, shape: vec![len], range: 0..len, init: crate::nn::params::Init::Constant(0.0) }
}

/// The optimizer file: Adam's moments, and the per-rank and per-run state an exact resume
/// needs beside the weights.
fn encode_optimizer(layouts: (&ParamLayout, &ParamLayout), ck: &Checkpoint, id: &str) -> Result<Vec<u8>> {
    let (g, d) = ((layouts.0, &ck.g_adam), (layouts.1, &ck.d_adam));
    let (progress, rank_states) = (&ck.progress, &ck.rank_states);
    let mut infos = Vec::new();
    if let Some(b) = &ck.block {
        block::push_infos(b, &mut infos);
    }
    for (rank, nets) in ck.residuals.iter().enumerate() {
        for (names, parts) in residual_names(rank).iter().zip(nets) {
            for (name, v) in names.iter().zip(parts) {
                infos.push((flat_info(name.clone(), v.len()), &v[..]));
            }
        }
    }
    for (i, states) in rank_states.iter().enumerate() {
        for (net, st) in ["G", "D"].iter().zip(states) {
            infos.push((flat_info(rank_state_name(i + 1, net), st.len()), &st[..]));
        }
    }
    for (net, (layout, m)) in [("G", g), ("D", d)] {
        for p in &layout.params {
            for (suffix, data) in [("exp_avg", &m.exp_avg), ("exp_avg_sq", &m.exp_avg_sq)] {
                let mut info = p.clone();
                info.name = moment_name(net, &p.name, suffix);
                infos.push((info, &data[p.range.clone()]));
            }
        }
    }
    let f32s: Vec<_> = infos.iter().map(|(i, d)| (i, *d)).collect();
    let steps = [("G.step".to_string(), g.1.steps as i64), ("D.step".to_string(), d.1.steps as i64)];
    let metadata = meta(&[
        ("format", tensors::FORMAT.into()),
        ("progress", serde_json::to_string(progress)?),
        (save_id::KEY, id.into()),
    ]);
    tensors::encode(&f32s, &steps, metadata)
}

/// Write a checkpoint under `<run>/checkpoints/` and make it the latest; returns its path.
pub fn save(run: &Path, layouts: (&ParamLayout, &ParamLayout), ck: &Checkpoint, keep: Keep) -> Result<PathBuf> {
    let root = run.join("checkpoints");
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let name = fresh_name(&root, ck.progress.step);
    let tmp = root.join(format!(".tmp-{name}"));
    remove_unfinished(&root);
    std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let (size, ngf) = (ck.progress.image_size.to_string(), ck.progress.ngf.to_string());
    // G's first weight is ConvTranspose2d [nz, C, k, k].
    let nz = layouts.0.params.first().map_or(0, |p| p.shape[0]).to_string();
    // Every file of this save records its id: files of two saves are not one checkpoint.
    let id = save_id::fresh();
    for (net, layout, t) in [("G", layouts.0, &ck.g), ("D", layouts.1, &ck.d)] {
        let m = meta(&[
            ("net", net.into()),
            ("image_size", size.clone()),
            ("ngf", ngf.clone()),
            ("nz", nz.clone()),
            (save_id::KEY, id.clone()),
        ]);
        let bytes = tensors::encode_net(layout, t, m)?;
        write_synced(&tmp.join(format!("{net}.safetensors")), &bytes)?;
    }
    if let Some(a) = &ck.g_ema {
        let seen = a.images_seen.to_string();
        let m = meta(&[
            ("net", "G_ema".into()),
            ("image_size", size.clone()),
            ("ngf", ngf.clone()),
            ("nz", nz.clone()),
            ("images_seen", seen),
            (save_id::KEY, id.clone()),
        ]);
        write_synced(&tmp.join(find::AVERAGED_G), &tensors::encode_net(layouts.0, &a.net, m)?)?;
    }
    let opt = encode_optimizer(layouts, ck, &id)?;
    write_synced(&tmp.join("optimizer.safetensors"), &opt)?;
    sync_dir(&tmp)?;
    let dir = root.join(&name);
    std::fs::rename(&tmp, &dir).with_context(|| format!("cannot rename {} to {}", tmp.display(), dir.display()))?;
    sync_dir(&root)?;
    write_latest(&root, &name)?;
    // Only now are the older checkpoints no longer needed.
    prune(&root, keep, &name);
    Ok(dir)
}

/// Remove what saves that never finished left under `root` (`.tmp-*`: a crash, a full disk):
/// one process writes a run's checkpoints, so none of them is being written now.
fn remove_unfinished(root: &Path) {
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Make `name` the checkpoint `root/latest` names (a temporary file, synced and renamed, so a
/// crash leaves the old name or the new one).
fn write_latest(root: &Path, name: &str) -> Result<()> {
    let latest_tmp = root.join(".latest.tmp");
    write_synced(&latest_tmp, format!("{name}\n").as_bytes())?;
    std::fs::rename(&latest_tmp, root.join("latest")).context("cannot update checkpoints/latest")?;
    sync_dir(root)
}

/// Make the checkpoint `dir` its run's latest and set the run's later checkpoints aside (as
/// `<name>.abandoned`): a run resumed from an older checkpoint than its last leaves the
/// continuation after it behind, which `--resume RUN` must not go back to and which must not
/// count among the checkpoints a save keeps. `latest` moves first, so a crash between the two
/// leaves a run that resumes from `dir` and sets them aside then. Returns the paths they were
/// moved to.
pub fn go_on_from(dir: &Path) -> Result<Vec<PathBuf>> {
    let (Some(root), Some(key)) = (dir.parent(), dir.file_name().and_then(|n| find::order_key(&n.to_string_lossy())))
    else {
        return Ok(Vec::new());
    };
    let name = dir.file_name().expect("a checkpoint's name").to_string_lossy().to_string();
    let latest = std::fs::read_to_string(root.join("latest")).unwrap_or_default();
    if latest.trim() != name {
        write_latest(root, &name)?;
    }
    // Oldest first, as the note that lists them reads.
    let later = find::checkpoint_names(root).into_iter().rev().filter(|(k, _)| *k > key);
    let aside = later.map(|(_, n)| set_aside(&root.join(n), "abandoned")).collect::<Result<Vec<_>>>()?;
    best::go_back_to(root, key)?;
    Ok(aside)
}

/// Remove the checkpoints in `root` that `keep` no longer asks for, oldest first by (step,
/// K): `newest` (the one just written) stays whatever its name, and so does the one the
/// best-checkpoint marker names.
pub fn prune(root: &Path, keep: Keep, newest: &str) {
    let best = best::read(root).map(|b| b.checkpoint);
    let mut older: Vec<String> =
        find::checkpoint_names(root).into_iter().map(|(_, n)| n).filter(|n| n != newest).collect();
    older.reverse();
    let kept = match keep {
        Keep::Latest(k) => k.saturating_sub(1),
        Keep::All => older.len(),
    };
    for n in &older[..older.len().saturating_sub(kept)] {
        if best.as_deref() != Some(n.as_str()) {
            let _ = std::fs::remove_dir_all(root.join(n));
        }
    }
}

/// Which checkpoints a save leaves: the newest `k` (at least the one just written), or all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    Latest(usize),
    All,
}

impl Keep {
    /// `--keep-checkpoints N`: 0 keeps every checkpoint.
    pub fn from_option(n: usize) -> Keep {
        if n == 0 { Keep::All } else { Keep::Latest(n) }
    }
}

/// The name of a new checkpoint of `step` under `root`: `step-NNNNNNNN`, or where that exists
/// (the same step saved again, say at an epoch's end after `--checkpoint-every`) the first
/// free `step-NNNNNNNN.K`. A checkpoint never replaces a directory in place: between removing
/// it and renaming the new one there, `latest` would name nothing, and a crash then would
/// leave no checkpoint at all. The old one goes with the others once `latest` has moved.
fn fresh_name(root: &Path, step: u64) -> String {
    let base = format!("step-{step:08}");
    std::iter::once(base.clone())
        .chain((2..).map(|k| format!("{base}.{k}")))
        .find(|n| !root.join(n).exists())
        .expect("an unused name")
}

/// The checkpoint directory `path` refers to: a checkpoint itself (or one of its files), or a
/// run directory or its `checkpoints/` folder (then the one `latest` names, or the newest
/// intact one beside it). Every file of it that is there has passed its digests.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    Ok(locate(path, "checkpoint")?.dir)
}

/// The bytes of a checkpoint file, checked against its digests; a corrupt, missing or
/// unreadable one is refused naming the file (and the tensor) and what to use instead.
fn read(path: &Path) -> Result<Vec<u8>> {
    find::read_checked(path).map(|(bytes, _)| bytes).map_err(|e| {
        let dir = path.parent().unwrap_or(Path::new("."));
        anyhow::anyhow!("{e:#}: {}", find::instead_of(dir))
    })
}

/// The image size a checkpoint's generator was trained for.
pub fn image_size_of(dir: &Path) -> Result<usize> {
    Ok(generator_shape_of(dir)?.0)
}

/// The image size and width (`--ngf`) of a checkpoint's generator; a checkpoint that predates
/// the width's record holds the paper's 64.
pub fn generator_shape_of(dir: &Path) -> Result<(usize, usize)> {
    let path = dir.join("G.safetensors");
    let bytes = read(&path)?;
    let (_, m) = tensors::parse(&bytes, &path.display().to_string())?;
    let size = m
        .get("image_size")
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{} has no image_size in its metadata", path.display()))?;
    let ngf = match m.get("ngf") {
        None => paper_ngf(),
        Some(s) => s.parse().ok().with_context(|| format!("{} holds a width (ngf) of '{s}'", path.display()))?,
    };
    Ok((size, ngf))
}

/// Only the generator (for `sample`): `averaged`, the one `--g-ema` kept (G_ema.safetensors).
pub fn load_generator(dir: &Path, layout: &ParamLayout, averaged: bool) -> Result<NetTensors> {
    let path = dir.join(if averaged { find::AVERAGED_G } else { find::FILES[0] });
    Ok(tensors::decode_net(&read(&path)?, layout, &path.display().to_string())?.0)
}

/// Whether the checkpoint in `dir` holds `--g-ema`'s averaged generator.
pub fn has_averaged_generator(dir: &Path) -> bool {
    dir.join(find::AVERAGED_G).is_file()
}

/// The training progress of the checkpoint in `dir` alone (the optimizer file's metadata).
pub fn load_progress(dir: &Path) -> Result<Progress> {
    let op = dir.join("optimizer.safetensors");
    let bytes = read(&op)?;
    let what = op.display().to_string();
    let (_, m) = tensors::parse(&bytes, &what)?;
    progress_of(&m, &what)
}

fn progress_of(meta: &std::collections::HashMap<String, String>, what: &str) -> Result<Progress> {
    serde_json::from_str(meta.get("progress").map(String::as_str).unwrap_or(""))
        .with_context(|| format!("{what} has no readable training progress in its metadata"))
}

/// Everything, for `--resume`.
pub fn load(dir: &Path, layouts: (&ParamLayout, &ParamLayout)) -> Result<Checkpoint> {
    let gp = dir.join("G.safetensors");
    let dp = dir.join("D.safetensors");
    let op = dir.join("optimizer.safetensors");
    let (g, g_meta) = tensors::decode_net(&read(&gp)?, layouts.0, &gp.display().to_string())?;
    let (d, d_meta) = tensors::decode_net(&read(&dp)?, layouts.1, &dp.display().to_string())?;
    let opt_bytes = read(&op)?;
    let what = op.display().to_string();
    let (st, m) = tensors::parse(&opt_bytes, &what)?;
    let (g_ema, ema_meta) = load_averaged(dir, layouts.0)?.unzip();
    // The optimizer's file first: it holds the progress, so a tie trusts its save.
    let mut files = vec![("optimizer.safetensors", &m), ("G.safetensors", &g_meta), ("D.safetensors", &d_meta)];
    files.extend(ema_meta.as_ref().map(|e| (find::AVERAGED_G, e)));
    save_id::check_one_save(dir, &files)?;
    let progress = progress_of(&m, &what)?;
    let mut moments = Vec::new();
    for (net, layout) in [("G", layouts.0), ("D", layouts.1)] {
        let mut mo = Moments {
            exp_avg: vec![0.0; layout.param_len()],
            exp_avg_sq: vec![0.0; layout.param_len()],
            steps: tensors::read_i64(&st, &format!("{net}.step"), &what)?.max(0) as u64,
        };
        for p in &layout.params {
            for (suffix, out) in [("exp_avg", &mut mo.exp_avg), ("exp_avg_sq", &mut mo.exp_avg_sq)] {
                let mut info = p.clone();
                info.name = moment_name(net, &p.name, suffix);
                tensors::read_f32(&st, &info, &what, &mut out[p.range.clone()])?;
            }
        }
        moments.push(mo);
    }
    let d_adam = moments.pop().expect("two networks");
    let g_adam = moments.pop().expect("two networks");
    let mut rank_states = Vec::new();
    for rank in 1..progress.ranks {
        let mut pair = [Vec::new(), Vec::new()];
        for (net, (layout, out)) in ["G", "D"].iter().zip([layouts.0, layouts.1].iter().zip(pair.iter_mut())) {
            *out = read_flat(&st, &what, &rank_state_name(rank, net), layout.state_len())?;
        }
        rank_states.push(pair);
    }
    let lens = [layouts.0.param_len(), layouts.1.param_len()];
    let residuals = read_residuals(&st, &what, progress.ranks, lens)?;
    let block = block::read(&st, &what, progress.ranks, lens)?;
    Ok(Checkpoint { g, d, g_ema, g_adam, d_adam, progress, rank_states, residuals, block })
}

/// `--g-ema`'s averaged generator of the checkpoint in `dir`, where it has one.
fn load_averaged(dir: &Path, layout: &ParamLayout) -> Result<Option<(AveragedGenerator, HashMap<String, String>)>> {
    let path = dir.join(find::AVERAGED_G);
    if !path.is_file() {
        return Ok(None);
    }
    let what = path.display().to_string();
    let (net, m) = tensors::decode_net(&read(&path)?, layout, &what)?;
    let images_seen = m
        .get("images_seen")
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{what} has no images_seen in its metadata"))?;
    Ok(Some((AveragedGenerator { net, images_seen }, m)))
}

/// Every rank's 1-bit residuals, or none where the checkpoint has none (rank 0's decides).
fn read_residuals(
    st: &safetensors::SafeTensors<'_>,
    what: &str,
    ranks: usize,
    lens: [usize; 2],
) -> Result<Vec<RankResiduals>> {
    if st.tensor(&residual_names(0)[0][0]).is_err() {
        return Ok(Vec::new());
    }
    let mut all = Vec::new();
    for rank in 0..ranks {
        let mut nets: RankResiduals = Default::default();
        for ((names, parts), len) in residual_names(rank).iter().zip(nets.iter_mut()).zip(lens) {
            for (name, out) in names.iter().zip(parts.iter_mut()) {
                *out = read_flat(st, what, name, len)?;
            }
        }
        all.push(nets);
    }
    Ok(all)
}

/// The optimizer file's name for one Adam moment (`exp_avg`, `exp_avg_sq`) of a parameter:
/// saving and loading must agree on it.
fn moment_name(net: &str, param: &str, moment: &str) -> String {
    format!("{net}.{param}.{moment}")
}
