//! Real data shipped with rtune, and the sharding helper a data-parallel train loop uses.
//!
//! `Digits` is the 8x8 handwritten digits set (data/digits.csv.gz, see data/README.md for its
//! source and license), embedded in the library so examples and tests need no download. Splits
//! and shuffles use a small splitmix64 generator of our own so a seed means the same split in
//! every rtune version, whatever the rand crate does.

use std::io::Read;

use tch::{Kind, Tensor};

use crate::error::{Error, Result};

const DIGITS_CSV_GZ: &[u8] = include_bytes!("../data/digits.csv.gz");

/// Pixels per image and number of classes.
pub const DIGIT_FEATURES: usize = 64;
pub const DIGIT_CLASSES: usize = 10;

/// Images scaled to [0, 1] (row-major, 64 a row) and their labels.
#[derive(Debug, Clone, Default)]
pub struct Digits {
    pub features: Vec<f32>,
    pub labels: Vec<i64>,
}

/// The fixed train / validation / test split of a seed (70% / 15% / 15%).
#[derive(Debug, Clone)]
pub struct DigitsSplit {
    pub train: Digits,
    pub validation: Digits,
    pub test: Digits,
}

impl Digits {
    /// All 1,797 images.
    pub fn load() -> Result<Digits> {
        let mut text = String::new();
        flate2::read::GzDecoder::new(DIGITS_CSV_GZ)
            .read_to_string(&mut text)
            .map_err(|e| Error::io("data/digits.csv.gz (embedded)", e))?;
        let mut digits = Digits::default();
        for (n, line) in text.lines().enumerate() {
            let bad = |what: &str| Error::Worker(format!("digits.csv line {}: {what}", n + 1));
            let values: Vec<&str> = line.split(',').collect();
            if values.len() != DIGIT_FEATURES + 1 {
                return Err(bad("expected 65 comma-separated values"));
            }
            for v in &values[..DIGIT_FEATURES] {
                let pixel: f32 = v.trim().parse().map_err(|_| bad("pixel is not a number"))?;
                digits.features.push(pixel / 16.0);
            }
            digits.labels.push(values[DIGIT_FEATURES].trim().parse().map_err(|_| bad("label"))?);
        }
        Ok(digits)
    }

    /// The train / validation / test split for `seed`: the same seed always gives the same split.
    pub fn split(seed: u64) -> Result<DigitsSplit> {
        let all = Digits::load()?;
        let mut order: Vec<usize> = (0..all.len()).collect();
        shuffle(&mut order, seed);
        let n_train = all.len() * 70 / 100;
        let n_val = all.len() * 15 / 100;
        Ok(DigitsSplit {
            train: all.select(&order[..n_train]),
            validation: all.select(&order[n_train..n_train + n_val]),
            test: all.select(&order[n_train + n_val..]),
        })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The rows at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Digits {
        let mut out = Digits {
            features: Vec::with_capacity(indices.len() * DIGIT_FEATURES),
            labels: Vec::with_capacity(indices.len()),
        };
        for &i in indices {
            out.features.extend_from_slice(&self.features[i * DIGIT_FEATURES..][..DIGIT_FEATURES]);
            out.labels.push(self.labels[i]);
        }
        out
    }

    /// Features as an `[n, 64]` float tensor and labels as an `[n]` int64 tensor, on the CPU.
    pub fn tensors(&self) -> (Tensor, Tensor) {
        let x = Tensor::from_slice(&self.features).view([self.len() as i64, DIGIT_FEATURES as i64]);
        (x.to_kind(Kind::Float), Tensor::from_slice(&self.labels))
    }
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

/// Fisher–Yates with splitmix64: stable across platforms and crate versions.
fn shuffle(items: &mut [usize], seed: u64) {
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
    fn digits_load_and_split_fixed() {
        let all = Digits::load().unwrap();
        assert_eq!(all.len(), 1797);
        assert!(all.features.iter().all(|&p| (0.0..=1.0).contains(&p)));
        assert!(all.labels.iter().all(|&l| (0..10).contains(&l)));
        let a = Digits::split(0).unwrap();
        let b = Digits::split(0).unwrap();
        assert_eq!((a.train.len(), a.validation.len(), a.test.len()), (1257, 269, 271));
        assert_eq!(a.test.labels, b.test.labels);
        assert_ne!(a.test.labels, Digits::split(1).unwrap().test.labels);
    }

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
