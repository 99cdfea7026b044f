//! A worker's part of a dataset (`TrainContext::dataset_shard`) and its batches.
//!
//! Sharding: the `n` rows are cut into `world_size` contiguous ranges, rank `r` taking rows
//! `r·n/W .. (r+1)·n/W`, so shards differ by at most one row and, together, hold every row
//! once. Each worker reads only its range (whole parquet row groups around it), preprocesses
//! it with the fitted preprocessor, and keeps it as tensors.
//!
//! Equal batch counts: a collective inside the batch loop (the gradient all-reduce) hangs when
//! one rank runs a batch more than another, so before batching every rank brings its epoch to
//! the same number of rows, by [`Balance`]: `Pad` (the default, like PyTorch's
//! `DistributedSampler`) repeats the first rows of its epoch order up to the longest shard's
//! length; `Drop` leaves out the last rows of its epoch order down to the shortest shard's; `Uneven`
//! keeps the shard as it is, for loops with no per-batch collective (an evaluation that
//! all-reduces totals at the end).
//!
//! Shuffling: with a seed, each epoch's order is a permutation of the shard drawn from
//! (seed, epoch, rank): the same in every run, different from one epoch to the next. A shard
//! starts at the epoch `ctx.iteration()` (so a loop that reports once per epoch, resumed from a
//! checkpoint, goes on with the orders it would have had) and each `iter_batches` moves to the
//! next epoch; `set_epoch` sets it.
//!
//! Elastic groups (`ScalingConfig::elastic`): every rank holds the whole dataset, and each
//! epoch's order is one permutation of all rows drawn from (seed, epoch). Step t's global batch
//! is the order's rows `t·B .. (t+1)·B`, and each rank takes its contiguous part of it for the
//! group as it is at that step (`r·b/W .. (r+1)·b/W` of its b rows): the samples of a step are
//! the same whatever the group's size, and `DistributedModel` weighs each rank's gradient by its
//! rows, so the step's mean gradient is too. `B` is `batch_size` for a [`BatchSpec::global`]
//! spec, else `batch_size` times the group's size when the epoch begins. After a rank is lost
//! mid-step the batches give that step again, cut for the smaller group.
//!
//! Device: batches land on the worker's device (`ctx.device()`), as Ray's
//! `prepare_data_loader` moves them. On a GPU a shard of up to [`RESIDENT_BYTES`] is moved to
//! the device once, when it is loaded, and its batches are slices and gathers there, with no
//! copy per batch (the digits' shards are 0.1 MB). A larger shard stays in pinned host memory
//! and each batch is copied to the device without blocking (PyTorch's `DataLoader` with
//! `pin_memory=True` and `.to(device, non_blocking=True)`), so the copy overlaps the GPU's work.

//!
//! ```no_run
//! use rtune::data::{Columns, Dataset, StandardScaler};
//! use rtune::worker::BatchSpec;
//! use rtune::{TorchTrainer, TrainContext};
//!
//! fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
//!     let mut shard = ctx.dataset_shard("train")?;
//!     let spec = BatchSpec::new(64).shuffle(7);
//!     for _epoch in ctx.iteration()..10 {
//!         for (x, y) in shard.iter_batches(&spec)? {
//!             // forward, backward, step...
//!             # let _ = (x, y);
//!         }
//!         ctx.report([("epoch_done", 1.0)])?;
//!     }
//!     Ok(())
//! }
//!
//! let trainer = TorchTrainer::new(train)
//!     .datasets([("train", Dataset::parquet("train.parquet")), ("valid", Dataset::csv("valid.csv"))])
//!     .columns(Columns::new().label("target"))
//!     .preprocessor(StandardScaler::new());
//! ```

use tch::{Device, Tensor};

use crate::worker::context::SharedGroup;
use rtune_driver::data::{DataPlan, read_rows, shard_range};
use rtune_driver::error::{Error, Result};

/// How ranks with shards of unequal length get the same number of batches (module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Balance {
    /// Repeat rows up to the longest shard's length (no row left out).
    #[default]
    Pad,
    /// Leave rows out down to the shortest shard's length (no row twice in an epoch).
    Drop,
    /// No balancing: only for loops without a collective per batch.
    Uneven,
}

/// How to cut an epoch into batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSpec {
    /// Rows per batch on this worker (or of each step's global batch, with `global`).
    pub batch_size: usize,
    /// `batch_size` is the global batch of each step, shared by the ranks.
    pub global: bool,
    /// Shuffle each epoch with this seed; None keeps the file's order.
    pub shuffle_seed: Option<u64>,
    /// Leave out a last batch shorter than `batch_size`.
    pub drop_last: bool,
    pub balance: Balance,
}

impl BatchSpec {
    /// Batches of `batch_size` rows in the file's order, the last one possibly shorter, padded
    /// to equal counts across ranks.
    pub fn new(batch_size: usize) -> Self {
        BatchSpec {
            batch_size,
            global: false,
            shuffle_seed: None,
            drop_last: false,
            balance: Balance::Pad,
        }
    }

    /// Steps of `batch_size` rows in all, shared by the ranks: each takes `batch_size / world`
    /// rows (at least 1) of its shard, or in an elastic group its part of the step's global
    /// batch (module docs), so a step's samples do not depend on the group's size.
    pub fn global(batch_size: usize) -> Self {
        BatchSpec { global: true, ..BatchSpec::new(batch_size) }
    }

    pub fn shuffle(mut self, seed: u64) -> Self {
        self.shuffle_seed = Some(seed);
        self
    }

    pub fn drop_last(mut self, on: bool) -> Self {
        self.drop_last = on;
        self
    }

    pub fn balance(mut self, balance: Balance) -> Self {
        self.balance = balance;
        self
    }
}

/// A GPU worker's shard of up to this many bytes (features and labels) lives on the device
/// (module docs); a larger one in pinned host memory.
pub const RESIDENT_BYTES: usize = 1 << 30;

/// This worker's rows of a dataset, preprocessed, as tensors.
pub struct DatasetShard {
    name: String,
    features: Tensor,
    labels: Option<Tensor>,
    /// Where batches are copied to, when the shard's tensors are in pinned host memory.
    copy_to: Option<Device>,
    rows: usize,
    total_rows: usize,
    rank: usize,
    world: usize,
    epoch: u64,
    /// An elastic group's shard (the whole dataset): its batches follow the group's shape.
    elastic: Option<SharedGroup>,
}

impl std::fmt::Debug for DatasetShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatasetShard")
            .field("name", &self.name)
            .field("rows", &self.rows)
            .field("total_rows", &self.total_rows)
            .field("rank", &self.rank)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl DatasetShard {
    /// Reads rank `rank`'s part of dataset `name` for a worker on `device` (see the module
    /// docs).
    pub(crate) fn load(
        plan: &DataPlan,
        name: &str,
        rank: usize,
        world: usize,
        epoch: u64,
        device: Device,
    ) -> Result<DatasetShard> {
        let Some(dataset) = plan.datasets.get(name) else {
            let names: Vec<&str> = plan.datasets.keys().map(String::as_str).collect();
            return Err(Error::Data(format!(
                "no dataset named `{name}` (this run has: {})",
                names.join(", ")
            )));
        };
        let what = format!("dataset `{name}`");
        if dataset.rows < world {
            return Err(Error::Data(format!(
                "{what} has {} rows for {world} workers: every worker needs at least one",
                dataset.rows
            )));
        }
        let range = shard_range(dataset.rows, rank, world);
        let schema = &plan.schema;
        let mut columns = schema.features.clone();
        columns.extend(schema.label.clone());
        let frame = read_rows(&dataset.path, Some(&columns), range.clone(), &what)?;
        if frame.height() != range.len() {
            return Err(Error::Data(format!(
                "{what}: {} holds {} rows where {} were expected in rows {range:?}; was it \
                 changed since the run started?",
                dataset.path.display(),
                frame.height(),
                range.len()
            )));
        }
        let table = schema.table(&frame, true, &what)?;
        drop(frame);
        let features = crate::torch::inputs(schema, &table, &what)?;
        let labels = match schema.label {
            Some(_) => Some(crate::torch::labels(schema, &table, &what)?),
            None => None,
        };
        let (features, labels, copy_to) = place(features, labels, device).map_err(|e| {
            Error::Data(format!("{what}: cannot place the shard on {device:?}: {e}"))
        })?;
        Ok(DatasetShard {
            name: name.to_owned(),
            features,
            labels,
            copy_to,
            rows: range.len(),
            total_rows: dataset.rows,
            rank,
            world,
            epoch,
            elastic: None,
        })
    }

    /// The whole dataset, loaded for an elastic group's rank: its batches are cut for
    /// `group` as it is at each step (module docs).
    pub(crate) fn following(mut self, group: SharedGroup) -> DatasetShard {
        self.elastic = Some(group);
        self
    }

    /// Rows in this shard.
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Rows in the whole dataset (every shard).
    pub fn total_rows(&self) -> usize {
        self.total_rows
    }

    /// The whole shard's model inputs, `[rows, inputs]` float (after preprocessing): on the
    /// worker's device, except a GPU worker's shard larger than [`RESIDENT_BYTES`], which stays
    /// in pinned host memory (its batches are on the device).
    pub fn features(&self) -> &Tensor {
        &self.features
    }

    /// The whole shard's labels: int64 class indices or float values; None without a label.
    /// Where they are: as [`features`](Self::features).
    pub fn labels(&self) -> Option<&Tensor> {
        self.labels.as_ref()
    }

    /// The device this shard's batches are on (the worker's).
    pub fn device(&self) -> Device {
        self.copy_to.unwrap_or_else(|| self.features.device())
    }

    /// The epoch the next `iter_batches` orders rows for.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// The order of this shard's rows in `epoch`, balanced (module docs).
    pub fn epoch_order(&self, epoch: u64, spec: &BatchSpec) -> Vec<usize> {
        epoch_order(self.rows, self.total_rows, self.world, self.rank, epoch, spec)
    }

    /// Batches per epoch under `spec`: the same on every rank unless `Balance::Uneven`.
    pub fn batches_per_epoch(&self, spec: &BatchSpec) -> usize {
        let rows = self.epoch_order(self.epoch, spec).len();
        batch_count(rows, spec)
    }

    /// This epoch's batches of `(features, labels)`, then moves to the next epoch.
    pub fn iter_batches(&mut self, spec: &BatchSpec) -> Result<Batches<'_>> {
        if spec.batch_size == 0 {
            return Err(Error::Data(format!(
                "dataset `{}`: batch_size 0; use at least 1",
                self.name
            )));
        }
        let Some(labels) = &self.labels else {
            return Err(Error::Data(format!(
                "dataset `{}` has no label: name one with Columns::label, or use features()",
                self.name
            )));
        };
        let epoch = self.epoch;
        self.epoch += 1;
        let (order, batch_size, elastic) = match &self.elastic {
            None => {
                let mut spec = spec.clone();
                if spec.global {
                    spec.batch_size = (spec.batch_size / self.world.max(1)).max(1);
                }
                (self.epoch_order(epoch, &spec), spec.batch_size, None)
            }
            Some(group) => {
                let global = match spec.global {
                    true => spec.batch_size,
                    false => spec.batch_size * group.shape().world,
                };
                // One order of every row: the balance of shards does not apply.
                let whole = BatchSpec { balance: Balance::Uneven, ..spec.clone() };
                let order = epoch_order(self.rows, self.rows, 1, 0, epoch, &whole);
                (order, global, Some((group.clone(), group.batches_made())))
            }
        };
        let count = batch_count(order.len(), &BatchSpec { batch_size, ..spec.clone() });
        Ok(Batches {
            features: &self.features,
            labels,
            copy_to: self.copy_to,
            order,
            batch_size,
            next: 0,
            count,
            elastic,
        })
    }
}

/// The shard's tensors where a worker on `device` keeps them (module docs), and the device its
/// batches are copied to when they stay on the host.
fn place(
    features: Tensor,
    labels: Option<Tensor>,
    device: Device,
) -> std::result::Result<(Tensor, Option<Tensor>, Option<Device>), tch::TchError> {
    if !device.is_cuda() {
        return Ok((features, labels, None));
    }
    let bytes = |t: &Tensor| t.numel() * t.kind().elt_size_in_bytes();
    let total = bytes(&features) + labels.as_ref().map_or(0, bytes);
    if total <= RESIDENT_BYTES {
        let labels = labels.map(|l| l.f_to_device(device)).transpose()?;
        return Ok((features.f_to_device(device)?, labels, None));
    }
    let labels = labels.map(|l| l.f_pin_memory(device)).transpose()?;
    Ok((features.f_pin_memory(device)?, labels, Some(device)))
}

fn batch_count(rows: usize, spec: &BatchSpec) -> usize {
    if spec.drop_last { rows / spec.batch_size } else { rows.div_ceil(spec.batch_size) }
}

/// Rank `rank`'s order of its `rows` (of `total` among `world` ranks) in `epoch`.
fn epoch_order(
    rows: usize,
    total: usize,
    world: usize,
    rank: usize,
    epoch: u64,
    spec: &BatchSpec,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rows).collect();
    if let Some(seed) = spec.shuffle_seed {
        let mixed = seed
            ^ epoch.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (rank as u64).wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03);
        rtune_driver::data::shuffle(&mut order, mixed);
    }
    match spec.balance {
        Balance::Pad if rows > 0 => {
            let longest = total.div_ceil(world.max(1));
            let mut i = 0;
            while order.len() < longest {
                order.push(order[i % rows]);
                i += 1;
            }
        }
        Balance::Drop => order.truncate(total / world.max(1)),
        Balance::Pad | Balance::Uneven => {}
    }
    order
}

/// One epoch's batches of a shard: `(features [b, inputs], labels [b])`, on the worker's
/// device.
pub struct Batches<'a> {
    features: &'a Tensor,
    labels: &'a Tensor,
    /// Set when the shard is in pinned host memory: each batch is copied there.
    copy_to: Option<Device>,
    order: Vec<usize>,
    batch_size: usize,
    next: usize,
    count: usize,
    /// An elastic group's batches: the group, and these batches' id in it.
    elastic: Option<(SharedGroup, u64)>,
}

impl Batches<'_> {
    /// The rows of each batch in this epoch (indices into the shard), for inspection.
    pub fn order(&self) -> &[usize] {
        &self.order
    }
}

impl Iterator for Batches<'_> {
    type Item = (Tensor, Tensor);

    /// Its time counts as the rank's wait for data (`time_data_s`).
    fn next(&mut self) -> Option<(Tensor, Tensor)> {
        super::timing::data(|| self.next_batch())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count - self.next;
        (left, Some(left))
    }
}

impl Batches<'_> {
    fn next_batch(&mut self) -> Option<(Tensor, Tensor)> {
        if let Some((group, id)) = &self.elastic
            && group.redo(*id)
        {
            // The group went on in place without a lost rank: the step it dropped again.
            self.next = self.next.saturating_sub(1);
        }
        if self.next >= self.count {
            return None;
        }
        let start = self.next * self.batch_size;
        let mut rows = &self.order[start..(start + self.batch_size).min(self.order.len())];
        self.next += 1;
        if let Some((group, id)) = &self.elastic {
            let (shape, global) = (group.shape(), rows.len());
            rows = &rows[shard_range(global, shape.rank, shape.world)];
            group.gave(*id, rows.len(), global);
        }
        // Consecutive rows (an unshuffled epoch) are a view; others are gathered.
        let first = rows.first().copied().unwrap_or(0);
        let (features, labels) = if rows.iter().enumerate().all(|(i, &r)| r == first + i) {
            let (at, len) = (first as i64, rows.len() as i64);
            (self.features.narrow(0, at, len), self.labels.narrow(0, at, len))
        } else {
            let index: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
            let index = Tensor::from_slice(&index).to_device(self.features.device());
            (self.features.index_select(0, &index), self.labels.index_select(0, &index))
        };
        Some(match self.copy_to {
            None => (features, labels),
            Some(device) => (to_device_async(&features, device), to_device_async(&labels, device)),
        })
    }
}

impl ExactSizeIterator for Batches<'_> {}

/// A copy of a host batch on `device` that does not block the host: from pinned memory (a
/// gathered batch is pinned first; a slice of the pinned shard already is).
fn to_device_async(batch: &Tensor, device: Device) -> Tensor {
    let pinned =
        if batch.is_pinned(device) { batch.shallow_clone() } else { batch.pin_memory(device) };
    pinned.to_device_(device, pinned.kind(), true, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_rows() {
        for n in [1, 7, 10, 64] {
            for world in 1..=4.min(n) {
                let ranges: Vec<std::ops::Range<usize>> =
                    (0..world).map(|r| shard_range(n, r, world)).collect();
                let rows: Vec<usize> = ranges.iter().flat_map(Clone::clone).collect();
                assert_eq!(rows, (0..n).collect::<Vec<_>>(), "n={n} world={world}");
                let lens: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
                assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1);
            }
        }
    }

    #[test]
    fn every_balance_gives_equal_counts_or_says_it_does_not() {
        let (n, world) = (10, 3); // shards of 3, 3, 4
        for balance in [Balance::Pad, Balance::Drop] {
            for drop_last in [false, true] {
                let spec = BatchSpec::new(2).shuffle(5).drop_last(drop_last).balance(balance);
                let counts: Vec<usize> = (0..world)
                    .map(|r| {
                        let rows = shard_range(n, r, world).len();
                        batch_count(epoch_order(rows, n, world, r, 0, &spec).len(), &spec)
                    })
                    .collect();
                assert!(counts.iter().all(|&c| c == counts[0]), "{balance:?} {counts:?}");
            }
        }
        let pad = epoch_order(3, 10, 3, 0, 0, &BatchSpec::new(2).shuffle(5));
        assert_eq!(pad.len(), 4);
        assert_eq!(pad[3], pad[0], "padding repeats the epoch's first row");
        let drop = epoch_order(4, 10, 3, 2, 0, &BatchSpec::new(2).balance(Balance::Drop));
        assert_eq!(drop, [0, 1, 2]);
        let uneven = epoch_order(4, 10, 3, 2, 0, &BatchSpec::new(2).balance(Balance::Uneven));
        assert_eq!(uneven.len(), 4);
    }

    #[test]
    fn shuffles_are_seeded_per_epoch_and_rank() {
        let spec = BatchSpec::new(4).shuffle(9);
        let order = |epoch, rank| epoch_order(50, 100, 2, rank, epoch, &spec);
        assert_eq!(order(3, 0), order(3, 0));
        assert_ne!(order(3, 0), order(4, 0));
        assert_ne!(order(3, 0), order(3, 1));
        let mut sorted = order(3, 0);
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_eq!(epoch_order(5, 5, 1, 0, 0, &BatchSpec::new(2)), [0, 1, 2, 3, 4]);
    }
}
