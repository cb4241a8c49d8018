//! A network's tensors as safetensors, under the names, shapes and dtypes of the PyTorch
//! `state_dict()` of the equivalent `nn.Sequential` named `main`, so that
//! `G.load_state_dict(safetensors.torch.load_file("G.safetensors"))` works.

use crate::nn::params::{ParamLayout, TensorInfo};
use anyhow::{Context, Result, bail};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::{BTreeMap, HashMap};

/// Marks files written by this program (the `format` metadata key).
pub const FORMAT: &str = "dcgan-train/1";

/// Host copies of one network's tensors, in the layout's flat order.
#[derive(Clone, Debug, PartialEq)]
pub struct NetTensors {
    /// `[param_len]`: weights, gammas, betas.
    pub values: Vec<f32>,
    /// `[state_len]`: running means and variances.
    pub state: Vec<f32>,
    /// PyTorch's `num_batches_tracked` (the same for every batch-norm layer).
    pub batches_tracked: u64,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The batch-norm module prefixes ("main.1") of a layout, from its running_mean buffers.
fn bn_prefixes(layout: &ParamLayout) -> Vec<String> {
    layout.buffers.iter().filter_map(|b| b.name.strip_suffix(".running_mean").map(str::to_string)).collect()
}

/// Encode named f32 tensors `(info, data)` plus i64 scalars, with metadata and the digests of
/// both.
pub fn encode(
    f32s: &[(&TensorInfo, &[f32])],
    i64s: &[(String, i64)],
    mut metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut owned: BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> = BTreeMap::new();
    for (info, data) in f32s {
        anyhow::ensure!(
            data.len() == info.range.len(),
            "tensor {} has {} values, expected {}",
            info.name,
            data.len(),
            info.range.len()
        );
        owned.insert(info.name.clone(), (Dtype::F32, info.shape.clone(), f32_bytes(data)));
    }
    for (name, v) in i64s {
        owned.insert(name.clone(), (Dtype::I64, vec![], v.to_le_bytes().to_vec()));
    }
    super::digest::insert(&mut metadata, owned.iter().map(|(k, (_, _, bytes))| (k.as_str(), bytes.as_slice())));
    let views: Vec<(String, TensorView<'_>)> = owned
        .iter()
        .map(|(k, (dt, shape, bytes))| Ok((k.clone(), TensorView::new(*dt, shape.clone(), bytes)?)))
        .collect::<Result<_>>()?;
    Ok(safetensors::serialize(views, Some(metadata))?)
}

/// A network's weights, running statistics and `num_batches_tracked`.
pub fn encode_net(layout: &ParamLayout, t: &NetTensors, mut metadata: HashMap<String, String>) -> Result<Vec<u8>> {
    metadata.insert("format".into(), FORMAT.into());
    let mut f32s: Vec<(&TensorInfo, &[f32])> = layout.params.iter().map(|p| (p, &t.values[p.range.clone()])).collect();
    f32s.extend(layout.buffers.iter().map(|b| (b, &t.state[b.range.clone()])));
    let tracked: Vec<(String, i64)> = bn_prefixes(layout)
        .into_iter()
        .map(|p| (format!("{p}.num_batches_tracked"), t.batches_tracked as i64))
        .collect();
    encode(&f32s, &tracked, metadata)
}

/// What errors about a file that is not ours tell a user to do where it was to be a checkpoint.
pub const CHECKPOINT_FIX: &str = "pass a checkpoint directory this program wrote";

/// Parse a safetensors file, checking it is ours; `what` names it in errors.
pub fn parse<'a>(bytes: &'a [u8], what: &str) -> Result<(SafeTensors<'a>, HashMap<String, String>)> {
    parse_for(bytes, what, CHECKPOINT_FIX)
}

/// `parse`, whose errors end in `fix` (what to pass instead).
pub fn parse_for<'a>(bytes: &'a [u8], what: &str, fix: &str) -> Result<(SafeTensors<'a>, HashMap<String, String>)> {
    let st =
        SafeTensors::deserialize(bytes).with_context(|| format!("{what} is not a readable safetensors file: {fix}"))?;
    let (_, meta) = SafeTensors::read_metadata(bytes)?;
    let meta = meta.metadata().clone().unwrap_or_default();
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        bail!("{what} was not written by dcgan-train (no format \"{FORMAT}\" in its metadata): {fix}");
    }
    Ok((st, meta))
}

/// Read f32 tensor `info` (name, shape, dtype all checked) into `out`.
pub fn read_f32(st: &SafeTensors<'_>, info: &TensorInfo, what: &str, out: &mut [f32]) -> Result<()> {
    let t = st.tensor(&info.name).map_err(|_| {
        anyhow::anyhow!("{what} has no tensor {}: it holds another architecture (check --image-size)", info.name)
    })?;
    if t.dtype() != Dtype::F32 || t.shape() != info.shape.as_slice() {
        bail!(
            "{what}: tensor {} is {:?} {:?}, this model needs F32 {:?}: the checkpoint holds another architecture (check --image-size)",
            info.name,
            t.dtype(),
            t.shape(),
            info.shape
        );
    }
    for (o, c) in out.iter_mut().zip(t.data().chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    Ok(())
}

/// Read an i64 scalar.
pub fn read_i64(st: &SafeTensors<'_>, name: &str, what: &str) -> Result<i64> {
    let t = st.tensor(name).map_err(|_| anyhow::anyhow!("{what} has no tensor {name}"))?;
    if t.dtype() != Dtype::I64 || !t.shape().is_empty() {
        bail!("{what}: {name} is {:?} {:?}, expected an I64 scalar", t.dtype(), t.shape());
    }
    Ok(i64::from_le_bytes(t.data().try_into().context("an 8-byte scalar")?))
}

/// Decode what `encode_net` wrote, for a network of `layout`.
pub fn decode_net(bytes: &[u8], layout: &ParamLayout, what: &str) -> Result<(NetTensors, HashMap<String, String>)> {
    let (st, meta) = parse(bytes, what)?;
    let expected = layout.params.len() + layout.buffers.len() + bn_prefixes(layout).len();
    if st.len() != expected {
        bail!(
            "{what} holds {} tensors, this model has {expected}: the checkpoint holds another architecture (check --image-size)",
            st.len()
        );
    }
    let mut t =
        NetTensors { values: vec![0.0; layout.param_len()], state: vec![0.0; layout.state_len()], batches_tracked: 0 };
    for p in &layout.params {
        read_f32(&st, p, what, &mut t.values[p.range.clone()])?;
    }
    for b in &layout.buffers {
        read_f32(&st, b, what, &mut t.state[b.range.clone()])?;
    }
    if let Some(p) = bn_prefixes(layout).first() {
        t.batches_tracked = read_i64(&st, &format!("{p}.num_batches_tracked"), what)?.max(0) as u64;
    }
    Ok((t, meta))
}
