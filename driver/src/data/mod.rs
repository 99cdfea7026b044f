//! Data for training, the driver's half: datasets read through polars, checked, written as
//! parquet and preprocessed, with preprocessing fitted on the training data and saved with every
//! checkpoint (Ray Train's `datasets=` and `ray.data.preprocessors`). A worker's shard and its
//! batches of tensors are `rtune::worker`'s (`DatasetShard`).
//!
//! ```text
//! Dataset::parquet / csv / frame ──driver: prepare once (columns checked, CSV and frames
//!   written as parquet, preprocessor fitted on `train`)──▶ DataPlan ──▶ every worker:
//!   ctx.dataset_shard("train") reads its rows only, preprocesses ──▶ iter_batches(&BatchSpec)
//!   ──▶ (features, labels) tensors        checkpoints carry preprocessor.json (DataSchema)
//! ```
//!
//! A train function reading its shard: `rtune::worker::DatasetShard`'s docs.
//!
//! Also here: [`shard`], the index helper for train loops that hold their data themselves, and
//! [`shard_range`], a rank's contiguous rows.

pub mod dataset;
pub mod preprocess;
pub mod table;

use std::ops::Range;

pub(crate) use dataset::DataConfig;
pub use dataset::{
    Columns, DATA_SCHEMA_FILE, DataPlan, DataSchema, Dataset, LabelKind, Labels, TRAIN_DATASET,
    read_rows,
};
pub use preprocess::{
    Chain, Fill, MinMaxScaler, OneHotEncoder, OrdinalEncoder, Preprocessor, SimpleImputer,
    StandardScaler, Strategy, UNKNOWN_CATEGORY, Unknown,
};

/// Rank `rank`'s rows of `n` among `world` ranks.
pub fn shard_range(n: usize, rank: usize, world: usize) -> Range<usize> {
    if world == 0 || rank >= world {
        return 0..0;
    }
    rank * n / world..(rank + 1) * n / world
}

/// This rank's share of `n` items for `epoch`: all items are shuffled by `(seed, epoch)` (the same
/// order on every rank), padded by wrapping around to a multiple of `world_size` so every rank
/// gets the same count (ranks must run the same number of steps, or a collective waits forever),
/// and dealt out round-robin. Like PyTorch's `DistributedSampler` with `shuffle=True`.
pub fn shard(n: usize, rank: usize, world_size: usize, epoch: u64, seed: u64) -> Vec<usize> {
    if n == 0 || world_size == 0 || rank >= world_size {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..n).collect();
    shuffle(&mut order, seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let per_rank = n.div_ceil(world_size);
    (0..per_rank).map(|i| order[(i * world_size + rank) % n]).collect()
}

/// Fisher–Yates with splitmix64 (our own generator, so a seed means the same order in every rtune
/// version, whatever the rand crate does): stable across platforms and crate versions.
pub fn shuffle(items: &mut [usize], seed: u64) {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..items.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_everything_equally_and_reshuffle_per_epoch() {
        for world in 1..5 {
            let shards: Vec<Vec<usize>> = (0..world).map(|r| shard(10, r, world, 3, 7)).collect();
            let lens: Vec<usize> = shards.iter().map(Vec::len).collect();
            assert!(lens.iter().all(|&l| l == 10usize.div_ceil(world)));
            let mut seen: Vec<usize> = shards.concat();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen, (0..10).collect::<Vec<_>>());
        }
        assert_ne!(shard(100, 0, 2, 0, 7), shard(100, 0, 2, 1, 7));
        assert_eq!(shard(100, 1, 2, 5, 7), shard(100, 1, 2, 5, 7));
    }
}
