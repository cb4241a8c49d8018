//! Explicit layers (Caffe style): each has forward, backward-data and backward-weight as
//! separate calls, so a network can order its backward to get big gradients out early.

pub mod batchnorm;
pub mod conv;
pub mod layernorm;
pub mod params;
pub mod stage;

use crate::backend::{Backend, ViewMut};

/// Sums batch-norm statistics over ranks in place (`--sync-bn`). The buffer holds
/// per-channel sums of this rank; afterwards it holds the sums over all ranks. Returns the
/// number of ranks (the factor by which the element count grew).
pub trait BnSync<B: Backend> {
    fn all_sum(&mut self, be: &B, buf: ViewMut<B>) -> usize;
}

/// Reborrow an optional `BnSync` for one call (a plain `as_deref_mut` cannot shorten the
/// trait object's lifetime inside the Option).
pub fn reborrow<'a, B: Backend>(sync: &'a mut Option<&mut dyn BnSync<B>>) -> Option<&'a mut dyn BnSync<B>> {
    match sync {
        Some(s) => Some(&mut **s),
        None => None,
    }
}
