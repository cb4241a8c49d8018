//! The distributed sampler: which examples rank r trains on in each step of each epoch.
//!
//! Every epoch is a permutation of all examples drawn from (seed, epoch) alone, so every rank
//! computes the same one without talking to the others. Global batch i is
//! perm[i*G .. (i+1)*G] with G = per_rank * world; rank r takes positions r, r + world,
//! r + 2*world, ... of it. So 2 ranks x 32 see exactly the 64 examples that 1 rank x 64 sees,
//! split in two, and the data-parallel run computes the same global-batch gradient. The
//! examples after the last whole global batch are dropped for that epoch (a different tail
//! each epoch), so every rank runs the same number of steps.

use anyhow::{Result, bail};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

#[derive(Clone, Debug)]
pub struct Shard {
    examples: usize,
    rank: usize,
    world: usize,
    per_rank: usize,
    seed: u64,
}

/// This rank's examples for one epoch: `batches` batches of `per_rank` indices each.
#[derive(Clone, Debug)]
pub struct EpochOrder {
    /// [batches, per_rank] dataset indices.
    indices: Vec<usize>,
    per_rank: usize,
}

impl Shard {
    /// `examples` in the dataset, this rank of `world`, `per_rank` images per step.
    /// Error (naming the numbers and the flag --batch-size) if one global batch
    /// (per_rank * world) does not fit in the data.
    pub fn new(examples: usize, rank: usize, world: usize, per_rank: usize, seed: u64) -> Result<Shard> {
        if world == 0 || rank >= world {
            bail!("rank {rank} of {world} ranks: the rank must be below the number of ranks");
        }
        if per_rank == 0 {
            bail!("--batch-size must be at least 1 image per rank");
        }
        let global = per_rank.saturating_mul(world);
        if global > examples {
            bail!(
                "one global batch of {global} images ({per_rank} per rank x {world} ranks) does \
                 not fit in the {examples} training images: lower --batch-size to at most {} \
                 or use more data",
                (examples / world).max(1)
            );
        }
        Ok(Shard { examples, rank, world, per_rank, seed })
    }

    /// Steps per epoch, the same on every rank: whole global batches only.
    pub fn batches_per_epoch(&self) -> usize {
        self.examples / (self.per_rank * self.world)
    }

    /// The permutation of all examples for `epoch`, from (seed, epoch) only.
    pub fn permutation(&self, epoch: u64) -> Vec<usize> {
        let mut perm: Vec<usize> = (0..self.examples).collect();
        perm.shuffle(&mut epoch_rng(self.seed, epoch));
        perm
    }

    /// The permutation of epoch `epoch` (from (seed, epoch) only), cut into this rank's batches.
    pub fn epoch(&self, epoch: u64) -> EpochOrder {
        let perm = self.permutation(epoch);
        let global = self.per_rank * self.world;
        let batches = self.batches_per_epoch();
        let mut indices = Vec::with_capacity(batches * self.per_rank);
        for batch in perm[..batches * global].chunks_exact(global) {
            indices.extend(batch.iter().skip(self.rank).step_by(self.world));
        }
        debug_assert_eq!(indices.len(), batches * self.per_rank);
        EpochOrder { indices, per_rank: self.per_rank }
    }
}

impl EpochOrder {
    /// The dataset indices of this rank's batch `i` (per_rank of them).
    pub fn batch(&self, i: usize) -> &[usize] {
        &self.indices[i * self.per_rank..(i + 1) * self.per_rank]
    }
}

/// ChaCha8 seeded with SHA-256(seed, epoch): a stable function of the pair (not of the Rust
/// version, the platform or the rank), and unrelated streams for neighbouring epochs.
fn epoch_rng(seed: u64, epoch: u64) -> ChaCha8Rng {
    let mut hash = Sha256::new();
    hash.update(b"dcgan-train epoch order");
    hash.update(seed.to_le_bytes());
    hash.update(epoch.to_le_bytes());
    ChaCha8Rng::from_seed(hash.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn shards(examples: usize, world: usize, per_rank: usize, seed: u64) -> Vec<Shard> {
        (0..world).map(|r| Shard::new(examples, r, world, per_rank, seed).unwrap()).collect()
    }

    /// Batches in an epoch's order.
    fn batch_count(o: &EpochOrder) -> usize {
        o.indices.len() / o.per_rank
    }

    #[test]
    fn two_ranks_of_32_see_the_one_rank_batch_of_64_split_in_two() {
        let one = Shard::new(1000, 0, 1, 64, 7).unwrap().epoch(3);
        let two: Vec<EpochOrder> = shards(1000, 2, 32, 7).iter().map(|s| s.epoch(3)).collect();
        assert_eq!(batch_count(&one), 1000 / 64);
        for i in 0..batch_count(&one) {
            let whole = one.batch(i);
            let (a, b) = (two[0].batch(i), two[1].batch(i));
            // The exact rule: rank r takes positions r, r + world, ... of the global batch.
            let even: Vec<usize> = whole.iter().copied().step_by(2).collect();
            let odd: Vec<usize> = whole.iter().copied().skip(1).step_by(2).collect();
            assert_eq!(a, &even[..]);
            assert_eq!(b, &odd[..]);
        }
    }

    #[test]
    fn ranks_are_disjoint_cover_the_global_batch_and_have_equal_counts() {
        for world in [1, 3, 4, 7] {
            let per_rank = 5;
            let examples = 203; // not a multiple of any global batch here: there is a tail
            let orders: Vec<EpochOrder> = shards(examples, world, per_rank, 11).iter().map(|s| s.epoch(0)).collect();
            let batches = examples / (per_rank * world);
            let perm = Shard::new(examples, 0, world, per_rank, 11).unwrap().permutation(0);
            let mut all = HashSet::new();
            for o in &orders {
                assert_eq!(batch_count(o), batches, "world {world}");
            }
            for i in 0..batches {
                let mut union: Vec<usize> = orders.iter().flat_map(|o| o.batch(i).to_vec()).collect();
                for o in &orders {
                    assert_eq!(o.batch(i).len(), per_rank);
                    for &x in o.batch(i) {
                        assert!(all.insert(x), "index {x} used twice (world {world})");
                    }
                }
                let mut global = perm[i * per_rank * world..(i + 1) * per_rank * world].to_vec();
                union.sort();
                global.sort();
                assert_eq!(union, global, "world {world} batch {i}");
            }
            assert_eq!(all.len(), batches * per_rank * world);
        }
    }

    #[test]
    fn permutation_is_a_permutation_and_depends_on_seed_and_epoch_only() {
        let s = Shard::new(500, 0, 1, 10, 42).unwrap();
        let p0 = s.permutation(0);
        let mut sorted = p0.clone();
        sorted.sort();
        assert_eq!(sorted, (0..500).collect::<Vec<_>>());
        assert_ne!(p0, (0..500).collect::<Vec<_>>(), "not shuffled");
        // Same (seed, epoch) -> same order, whatever rank or world computes it.
        let other = Shard::new(500, 2, 5, 3, 42).unwrap();
        assert_eq!(other.permutation(0), p0);
        assert_eq!(s.epoch(0).batch(4), Shard::new(500, 0, 1, 10, 42).unwrap().epoch(0).batch(4));
        // Different epoch or seed -> different order.
        assert_ne!(s.permutation(1), p0);
        assert_ne!(Shard::new(500, 0, 1, 10, 43).unwrap().permutation(0), p0);
        assert_ne!(s.epoch(1).batch(0), s.epoch(0).batch(0));
    }

    #[test]
    fn a_global_batch_bigger_than_the_data_is_a_clear_error() {
        let msg = Shard::new(100, 0, 4, 32, 1).unwrap_err().to_string();
        assert!(msg.contains("128") && msg.contains("100") && msg.contains("--batch-size"), "{msg}");
        assert!(msg.contains("at most 25"), "{msg}");
        assert!(Shard::new(128, 3, 4, 32, 1).is_ok());
        assert!(Shard::new(128, 4, 4, 32, 1).is_err());
        assert!(Shard::new(128, 0, 4, 0, 1).is_err());
    }
}
