//! Gradient buckets: a network's per-stage gradient groups fused, in the order backward
//! completes them, up to `--bucket-bytes`. Each bucket is one contiguous range of the flat
//! gradient buffer (stage groups are laid out in stage order and fuse only with neighbours).
//!
//! The stage backward completes last always travels alone. No backward is left to hide that
//! bucket's exchange, and D's update waits for it at once, so the tail should be as small as
//! the stages allow. At the default 1 MiB all three of D's stages (554 KB) would fuse into one
//! bucket that no backward hides; split as `D[3+2]` and `D[1]`, `D[3+2]` travels during D.1's
//! backward and only `D[1]` (4 KB) is left to wait for. G's update waits until the next step,
//! so G gains nothing from the rule; it applies to both networks for simplicity.

use crate::backend::Backend;
use crate::model::net::{BackwardOrder, Net};
use std::ops::Range;

#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    /// Unique over both networks; also the bucket's message tag.
    pub id: u32,
    /// e.g. `"G[1]"` or `"D[3+2]"`: the network and its stages (1-based), in completion order.
    /// Made once per run; traces refer to it every step.
    pub label: &'static str,
    /// Range in the network's flat gradient buffer.
    pub range: Range<usize>,
    /// Stage indices (0-based) whose groups make up the bucket.
    pub stages: Vec<usize>,
}

impl Bucket {
    pub fn bytes(&self) -> usize {
        self.range.len() * std::mem::size_of::<f32>()
    }
}

/// The order in which a network's backward completes its stage groups.
pub fn completion_order(order: BackwardOrder, stages: usize) -> Vec<usize> {
    match order {
        BackwardOrder::LayerByLayer => (0..stages).rev().collect(),
        BackwardOrder::DataFirst => (0..stages).collect(),
    }
}

/// Fuse `groups` (the range of every stage's parameters) visited in `order` into buckets of
/// at most `bucket_bytes` (a group larger than that is a bucket of its own); the last group
/// of `order` is never fused (see the module doc).
pub fn plan(net: &str, groups: &[Range<usize>], order: &[usize], bucket_bytes: usize, first_id: u32) -> Vec<Bucket> {
    let mut buckets: Vec<Bucket> = Vec::new();
    let mut current: Option<Bucket> = None;
    let tail = order.last().copied();
    for &s in order {
        let g = groups[s].clone();
        if let Some(b) = current.as_mut() {
            let fused = b.range.start.min(g.start)..b.range.end.max(g.end);
            let adjacent = g.end == b.range.start || g.start == b.range.end;
            if adjacent && fused.len() * 4 <= bucket_bytes && Some(s) != tail {
                b.range = fused;
                b.stages.push(s);
                continue;
            }
            buckets.push(current.take().expect("checked above"));
        }
        current = Some(Bucket { id: 0, label: "", range: g, stages: vec![s] });
    }
    buckets.extend(current);
    for (i, b) in buckets.iter_mut().enumerate() {
        b.id = first_id + i as u32;
        let stages: Vec<String> = b.stages.iter().map(|s| (s + 1).to_string()).collect();
        b.label = Box::leak(format!("{net}[{}]", stages.join("+")).into_boxed_str());
    }
    buckets
}

/// The buckets of one network.
pub fn plan_net<B: Backend>(net: &Net<B>, bucket_bytes: usize, first_id: u32) -> Vec<Bucket> {
    let groups: Vec<Range<usize>> = net.stages.iter().map(|s| s.group.clone()).collect();
    plan(net.name, &groups, &completion_order(net.order, groups.len()), bucket_bytes, first_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_respects_the_limit_order_and_contiguity() {
        // Three groups of 100, 5000 and 10 floats, completed top to bottom.
        let groups = [0..100, 100..5100, 5100..5110];
        let order = completion_order(BackwardOrder::LayerByLayer, 3);
        let b = plan("D", &groups, &order, 1 << 20, 0);
        assert_eq!(b.iter().map(|b| b.range.clone()).collect::<Vec<_>>(), vec![100..5110, 0..100]);
        assert_eq!(b.iter().map(|b| b.label).collect::<Vec<_>>(), vec!["D[3+2]", "D[1]"]);
        let b = plan("D", &groups, &order, 4 * 5000, 7);
        assert_eq!(b.iter().map(|b| b.range.clone()).collect::<Vec<_>>(), vec![5100..5110, 100..5100, 0..100]);
        assert_eq!(b.iter().map(|b| b.id).collect::<Vec<_>>(), vec![7, 8, 9]);
        let b = plan("G", &groups, &completion_order(BackwardOrder::DataFirst, 3), 0, 0);
        assert_eq!(b.iter().map(|b| b.range.clone()).collect::<Vec<_>>(), vec![0..100, 100..5100, 5100..5110]);
        // Every float belongs to exactly one bucket.
        let total: usize = b.iter().map(|b| b.range.len()).sum();
        assert_eq!(total, 5110);
    }

    #[test]
    fn the_stage_completed_last_travels_alone_in_either_order() {
        // Four small groups that all fit one bucket: only the tail is kept apart.
        let groups = [0..10, 10..20, 20..30, 30..40];
        let b = plan("D", &groups, &completion_order(BackwardOrder::LayerByLayer, 4), 1 << 20, 0);
        assert_eq!(b.iter().map(|b| b.label).collect::<Vec<_>>(), vec!["D[4+3+2]", "D[1]"]);
        assert_eq!(b.iter().map(|b| b.range.clone()).collect::<Vec<_>>(), vec![10..40, 0..10]);
        let b = plan("G", &groups, &completion_order(BackwardOrder::DataFirst, 4), 1 << 20, 0);
        assert_eq!(b.iter().map(|b| b.label).collect::<Vec<_>>(), vec!["G[1+2+3]", "G[4]"]);
        // One stage: one bucket.
        assert_eq!(plan("D", &groups[..1], &[0], 1 << 20, 0).len(), 1);
    }
}
