//! Small blocking collectives over byte messages, for the comm thread's helpers and the
//! benchmark: broadcast, gather, allreduce with a caller's combine function (f64 metrics, max
//! over ranks), barrier. Binomial trees; the combining order is fixed, so every rank gets the
//! same bits.

use crate::comm::transport::{CommError, Tag, Transport};

/// Returned on the ranks that did not fail themselves: main exits non-zero without printing,
/// so the job shows one line, the failing rank's.
#[derive(Debug)]
pub struct PeerFailed;

impl std::fmt::Display for PeerFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "another rank failed (its error is printed above)")
    }
}

impl std::error::Error for PeerFailed {}

/// Broadcast `data` from `root`; on the other ranks `data` is replaced by root's bytes
/// (whatever its length was).
pub fn broadcast<T: Transport + ?Sized>(t: &mut T, root: usize, data: &mut Vec<u8>, tag: Tag) -> Result<(), CommError> {
    let (p, r) = (t.size(), t.rank());
    if root >= p {
        return Err(CommError::Protocol(format!("broadcast root {root} does not exist (the job has {p} ranks)")));
    }
    // Virtual rank: the root is 0.
    let v = (r + p - root) % p;
    let real = |v: usize| (v + root) % p;
    let mut mask = if v == 0 {
        p.next_power_of_two()
    } else {
        let low = v & v.wrapping_neg();
        *data = t.recv_vec(real(v - low), tag)?;
        low
    };
    mask >>= 1;
    while mask > 0 {
        if v + mask < p {
            t.send(real(v + mask), tag, data)?;
        }
        mask >>= 1;
    }
    Ok(())
}

/// Combine every rank's `data` with `combine(acc, other)` up a binomial tree to rank 0, then
/// broadcast rank 0's result.
pub fn allreduce_bytes<T: Transport + ?Sized>(
    t: &mut T,
    data: &mut Vec<u8>,
    tag: Tag,
    combine: &mut dyn FnMut(&mut Vec<u8>, &[u8]),
) -> Result<(), CommError> {
    let (p, r) = (t.size(), t.rank());
    let mut mask = 1;
    while mask < p {
        if r & mask != 0 {
            t.send(r - mask, tag, data)?;
            break;
        }
        if r | mask < p {
            let other = t.recv_vec(r | mask, tag)?;
            combine(data, &other);
        }
        mask <<= 1;
    }
    broadcast(t, 0, data, tag)
}

/// Every rank's bytes on rank 0 (index = rank); None elsewhere.
pub fn gather<T: Transport + ?Sized>(t: &mut T, data: Vec<u8>, tag: Tag) -> Result<Option<Vec<Vec<u8>>>, CommError> {
    if t.rank() != 0 {
        t.send(0, tag, &data)?;
        return Ok(None);
    }
    let mut all = Vec::with_capacity(t.size());
    all.push(data);
    for r in 1..t.size() {
        all.push(t.recv_vec(r, tag)?);
    }
    Ok(Some(all))
}

/// Returns on every rank once all ranks have entered it.
pub fn barrier<T: Transport + ?Sized>(t: &mut T, tag: Tag) -> Result<(), CommError> {
    allreduce_bytes(t, &mut vec![0u8], tag, &mut |_, _| {})
}

pub fn f64_to_bytes(x: &[f64]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

pub fn bytes_to_f64(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8).map(|c| f64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect()
}

/// Element-wise f64 combine of two equally long byte vectors.
fn zip_f64(acc: &mut Vec<u8>, other: &[u8], f: fn(f64, f64) -> f64) {
    let a = bytes_to_f64(acc);
    let b = bytes_to_f64(other);
    assert_eq!(a.len(), b.len(), "ranks passed vectors of different lengths");
    *acc = f64_to_bytes(&a.iter().zip(&b).map(|(x, y)| f(*x, *y)).collect::<Vec<_>>());
}

/// Element-wise sum over ranks times 1/N, in f64.
pub fn mean_f64<T: Transport + ?Sized>(t: &mut T, data: &[f64], tag: Tag) -> Result<Vec<f64>, CommError> {
    let mut bytes = f64_to_bytes(data);
    allreduce_bytes(t, &mut bytes, tag, &mut |a, b| zip_f64(a, b, |x, y| x + y))?;
    let inv = 1.0 / t.size() as f64;
    Ok(bytes_to_f64(&bytes).into_iter().map(|v| v * inv).collect())
}

/// Element-wise maximum over ranks.
pub fn max_f64<T: Transport + ?Sized>(t: &mut T, data: &[f64], tag: Tag) -> Result<Vec<f64>, CommError> {
    let mut bytes = f64_to_bytes(data);
    allreduce_bytes(t, &mut bytes, tag, &mut |a, b| zip_f64(a, b, f64::max))?;
    Ok(bytes_to_f64(&bytes))
}

/// `r` where every rank's `r` succeeded; otherwise every rank returns an error. Collective;
/// for a step that may fail on some ranks only (each host reads its own files), so that no
/// rank goes on into a collective, or into MPI_Finalize, that a failed rank never joins. The
/// failed ranks print their line (only rank 0 where it failed too: the others' error is
/// almost always the same), then all wait for each other, because mpiexec ends the job at the
/// first non-zero exit and could cut those lines off; then every rank returns `PeerFailed`,
/// which is not printed again.
pub fn agree<T: Transport + ?Sized, R>(t: &mut T, r: anyhow::Result<R>, tag: Tag) -> anyhow::Result<R> {
    if t.size() == 1 {
        return r;
    }
    let failed = if r.is_err() { 1.0 } else { 0.0 };
    let root_failed = if t.rank() == 0 { failed } else { 0.0 };
    let any = max_f64(t, &[failed, root_failed], tag)?;
    if any[0] == 0.0 {
        return r;
    }
    if let Err(e) = &r
        && (t.rank() == 0 || any[1] == 0.0)
    {
        eprintln!("error: {e:#}");
    }
    barrier(t, tag)?;
    Err(PeerFailed.into())
}

/// Every rank was started with rank 0's options for `command` (`options`: their Debug text,
/// which names every option and value), or every rank returns an error (see `agree`).
/// Collective; for the benchmark commands, whose ranks would otherwise run different message
/// sizes or counts into each other.
pub fn same_options<T: Transport + ?Sized>(t: &mut T, command: &str, options: &str, tag: Tag) -> anyhow::Result<()> {
    let mut root = options.as_bytes().to_vec();
    broadcast(t, 0, &mut root, tag)?;
    let differs = root != options.as_bytes();
    let rank = t.rank();
    let r = match differs {
        true => Err(anyhow::anyhow!(
            "rank {rank} was started with other {command} options than rank 0: start every rank with the same command line"
        )),
        false => Ok(()),
    };
    agree(t, r, tag)
}
