//! Checkpoints: a folder holding the model (`model.safetensors`), `metadata.json` and any files
//! the train function adds.
//!
//! A checkpoint is built in a hidden temporary folder of the run directory and committed by
//! fsyncing every file and renaming the folder to `checkpoint_NNNNNN` (then fsyncing the run
//! directory). A crash mid-write leaves only a `.tmp_checkpoint_*` folder, which never looks
//! complete and is swept away before the next attempt starts.
//!
//! Only rank 0's checkpoint is kept (Ray Train keeps one checkpoint per report): on other ranks
//! `TrainContext::new_checkpoint` (in `rtune`) gives a writer that
//! saves no model, so the I/O does not grow with the world size.
//!
//! A sharded model's optimizer state is the exception: every rank writes its shard
//! (`ShardedModel::save_optimizer`) into one staging folder the ranks share, named alike on
//! every rank (`.tmp_checkpoint_zero_<attempt>_<seq>`); the report waits on a barrier that each
//! rank passes once its shard is durable, then rank 0 moves the folder into its checkpoint as
//! [`SHARDS_DIR`] and commits. A rank that dies first fails the barrier: no checkpoint is
//! recorded without every shard. (Ranks working in their node's scratch folder upload their
//! shard to the store's checkpoint instead, before the barrier.)
//!
//! Stale writers. A worker of a failed attempt may outlive its attempt for a while (a node cut
//! off from the driver, a process slow to die, an upload still in flight) and try to commit or
//! upload. Checkpoint names carry the attempt after the first ([`checkpoint_name`]:
//! `checkpoint_000012_a1`), so what a straggler writes, here or in a store, never lands on a
//! later attempt's checkpoint. The run directory also holds an attempt fence (`.rtune_attempt`,
//! written by the driver before each attempt and closed when the run ends), and every
//! checkpoint records the attempt that wrote it: a commit is refused when its attempt is not the
//! fence's, and a committed checkpoint is replaced only by a newer attempt; a recorded
//! checkpoint is therefore never overwritten.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::metrics::Metrics;
use crate::outcome::Checkpoint;
use crate::storage;

pub const MODEL_FILE: &str = "model.safetensors";
pub const METADATA_FILE: &str = "metadata.json";
/// A `ModelOptimizer`'s state in a checkpoint, and its index.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
pub const OPTIMIZER_INDEX: &str = "optimizer.json";
/// The folder of a checkpoint holding a sharded model's optimizer state: one file per rank and
/// an index (see `ShardedModel::save_optimizer`).
pub const SHARDS_DIR: &str = "zero";
pub const TMP_PREFIX: &str = ".tmp_checkpoint_";

/// What an export says of its checkpoint beyond the checkpoint's own files, its model card's
/// parts: one description for `rtune export` and `ExportCheckpoint::export`. A part left out
/// is read from the checkpoint and its run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExportCard {
    /// What the model was trained with (default: its run's `params.json`).
    pub params: Option<rtune_searchers::Params>,
    /// The metrics reported with it (default: its `metadata.json`'s).
    pub metrics: Option<serde_json::Map<String, serde_json::Value>>,
    /// The metric it was chosen by, and which way is better: shown first in the card.
    pub metric: Option<(String, rtune_searchers::Mode)>,
    /// The card's heading (default: the checkpoint's and its run's names).
    pub title: Option<String>,
}

/// Whether `relative`, a path in a checkpoint folder, is what training needs to go on and
/// prediction does not: an optimizer's state (`ModelOptimizer`'s, a sharded model's). An
/// export leaves it out, and does not fetch it from a store.
pub fn is_training_state(relative: &str) -> bool {
    [OPTIMIZER_FILE, OPTIMIZER_INDEX].contains(&relative)
        || relative.split('/').next() == Some(SHARDS_DIR)
}

/// What `metadata.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub training_iteration: u64,
    /// Seconds since the Unix epoch when the checkpoint was committed.
    pub timestamp: f64,
    /// The metrics reported with it (NaN/infinities as strings, like result.json).
    pub metrics: serde_json::Map<String, serde_json::Value>,
    /// Whatever the train function attached with `CheckpointWriter::metadata`.
    #[serde(default)]
    pub user: serde_json::Value,
    pub rtune_version: String,
    /// The attempt of the run that wrote it (0 for the first).
    #[serde(default)]
    pub attempt: u32,
}

impl Checkpoint {
    /// Opens a committed checkpoint (one with `metadata.json`).
    pub fn from_directory(path: impl Into<PathBuf>) -> Result<Checkpoint> {
        let path = path.into();
        if !path.join(METADATA_FILE).is_file() {
            return Err(Error::Checkpoint {
                path,
                message: format!("no {METADATA_FILE}: not a committed rtune checkpoint"),
            });
        }
        Ok(Checkpoint { path })
    }

    pub fn metadata(&self) -> Result<CheckpointMetadata> {
        let path = self.path.join(METADATA_FILE);
        let text = fs::read_to_string(&path).at(&path)?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Checkpoint { path, message: format!("bad metadata: {e}") })
    }

    /// The training iteration the checkpoint was reported with: a resumed run continues after it.
    pub fn iteration(&self) -> Result<u64> {
        Ok(self.metadata()?.training_iteration)
    }

    /// Whether it holds a `ModelOptimizer`'s state (`ModelOptimizer::save`).
    pub fn holds_optimizer(&self) -> bool {
        self.path.join(OPTIMIZER_INDEX).is_file()
    }

    /// Whether it holds a sharded model's optimizer state (`ShardedModel::save_optimizer`).
    pub fn holds_optimizer_shards(&self) -> bool {
        self.path.join(SHARDS_DIR).is_dir()
    }
}

/// Where a trial that exploits another (PBT) keeps the checkpoint it took over, in its own
/// run directory; it goes on from it unless it has recorded a later checkpoint of its own.
pub(crate) const EXPLOITED_DIR: &str = "exploited_checkpoint";

/// PBT's exploit on disk: `source` (another trial's checkpoint) becomes `run_dir`'s exploited
/// checkpoint, replacing an earlier one, and the run's own checkpoints after its iteration go
/// (the run goes on from the source's state, so they are no longer its past).
pub(crate) fn exploit_into(source: &Checkpoint, run_dir: &Path) -> Result<Checkpoint> {
    let from = source.iteration()?;
    let tmp = run_dir.join(format!("{TMP_PREFIX}exploit"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).at(&tmp)?;
    }
    copy_dir(source.path(), &tmp)?;
    storage::fsync_tree(&tmp)?;
    let dest = run_dir.join(EXPLOITED_DIR);
    if dest.exists() {
        fs::remove_dir_all(&dest).at(&dest)?;
    }
    fs::rename(&tmp, &dest).at(&dest)?;
    for entry in fs::read_dir(run_dir).at(run_dir)? {
        let path = entry.at(run_dir)?.path();
        let own = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("checkpoint_"));
        if own
            && Checkpoint::from_directory(&path).and_then(|c| c.iteration()).is_ok_and(|i| i > from)
        {
            fs::remove_dir_all(&path).at(&path)?;
        }
    }
    storage::fsync_dir(run_dir)?;
    Checkpoint::from_directory(dest)
}

/// Copies the folder `from` (files and subfolders) into `to`, made if missing.
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    copy_dir_where(from, to, &|_| true)
}

/// [`copy_dir`] of the files and folders `wanted` picks by their path relative to `from`
/// (`zero/optimizer.json`): a folder it refuses is not entered.
pub fn copy_dir_where(from: &Path, to: &Path, wanted: &dyn Fn(&str) -> bool) -> Result<()> {
    fn copy(from: &Path, to: &Path, at: &str, wanted: &dyn Fn(&str) -> bool) -> Result<()> {
        fs::create_dir_all(to).at(to)?;
        for entry in fs::read_dir(from).at(from)? {
            let entry = entry.at(from)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = if at.is_empty() { name } else { format!("{at}/{name}") };
            if !wanted(&relative) {
                continue;
            }
            let target = to.join(entry.file_name());
            if entry.path().is_dir() {
                copy(&entry.path(), &target, &relative, wanted)?;
            } else {
                fs::copy(entry.path(), &target).at(&target)?;
            }
        }
        Ok(())
    }
    copy(from, to, "", wanted)
}

/// A checkpoint being written: save the model, add files under `path()`, then pass it to
/// `TrainContext::report`, which commits it. Dropped without reporting, it leaves nothing.
#[derive(Debug)]
pub struct CheckpointWriter {
    tmp: PathBuf,
    user: serde_json::Value,
    kept: bool,
    /// Where this rank's part of a sharded checkpoint goes (see [`SHARDS_DIR`]), and whether
    /// any went there.
    shards: PathBuf,
    sharded: bool,
    /// The files the ranks write there together, which rank 0 checks for before committing.
    shard_files: Vec<String>,
    /// When it was started: its time to commit is the train function's time saving into it.
    created: std::time::Instant,
}

impl CheckpointWriter {
    /// A writer for `rank`'s next report; kept (committed by `report`) on rank 0 only.
    pub fn create(run_dir: &Path, rank: usize, seq: u64) -> Result<CheckpointWriter> {
        let tmp = run_dir.join(format!("{TMP_PREFIX}{}_{rank}_{seq}", std::process::id()));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).at(&tmp)?;
        }
        fs::create_dir_all(&tmp).at(&tmp)?;
        let shards = tmp.join(SHARDS_DIR);
        Ok(CheckpointWriter {
            tmp,
            user: serde_json::Value::Null,
            kept: rank == 0,
            shards,
            sharded: false,
            created: std::time::Instant::now(),
            shard_files: Vec::new(),
        })
    }

    /// Every rank's shards go into `folder`, which all the ranks of the run share (one
    /// machine, or a shared file system), instead of this writer's own folder: rank 0 moves it
    /// into its checkpoint when every rank has written (see [`take_shards`](Self::take_shards)).
    pub fn share_shards(&mut self, folder: PathBuf) {
        self.shards = folder;
    }

    /// The folder this rank writes its part of a sharded checkpoint into (made if missing),
    /// `files` being what all the ranks write there together: the checkpoint is sharded from
    /// then on, and its report waits for every rank's part.
    pub fn shard_folder(&mut self, files: Vec<String>) -> Result<&Path> {
        fs::create_dir_all(&self.shards).at(&self.shards)?;
        self.sharded = true;
        self.shard_files = files;
        Ok(&self.shards)
    }

    /// Where this rank's part of a sharded checkpoint goes.
    pub fn shards(&self) -> &Path {
        &self.shards
    }

    /// Whether a part of a sharded checkpoint was written (see `shard_folder`).
    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// On rank 0, once every rank has written its part: makes the shared shard folder this
    /// checkpoint's [`SHARDS_DIR`] and checks that it holds every rank's files. (Unshared, the
    /// other ranks' parts went to the object store, not here.)
    pub fn take_shards(&mut self) -> Result<()> {
        let inside = self.tmp.join(SHARDS_DIR);
        if self.shards == inside {
            return Ok(());
        }
        fs::rename(&self.shards, &inside).at(&self.shards)?;
        self.shards = inside;
        match self.shard_files.iter().find(|file| !self.shards.join(file).is_file()) {
            Some(missing) => Err(Error::Checkpoint {
                path: self.shards.clone(),
                message: format!(
                    "{missing} is missing: every rank writes its shard into the run's folder, \
                     which the ranks must share (one machine, or a shared file system)"
                ),
            }),
            None => Ok(()),
        }
    }

    /// The folder to write extra files into. On ranks whose checkpoint is not kept (see
    /// [`is_kept`](Self::is_kept)) it is a scratch folder, removed at the report.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Whether this checkpoint will be kept: only rank 0's is. Guard expensive extra files
    /// with it; `save_var_store` (`rtune::SaveVarStore`) already does.
    pub fn is_kept(&self) -> bool {
        self.kept
    }

    /// Attaches user metadata (e.g. the epoch or the optimizer settings), kept in metadata.json.
    pub fn metadata(mut self, user: serde_json::Value) -> Self {
        self.user = user;
        self
    }

    /// Writes metadata.json, fsyncs everything and renames the folder to `run_dir/name`, as
    /// `attempt` of the run. Refused (nothing committed) when that attempt is over, or when
    /// `name` was committed by the same or a newer attempt (see the module docs).
    /// When it was started (`TrainContext::new_checkpoint`).
    pub fn created(&self) -> std::time::Instant {
        self.created
    }

    pub fn commit(
        self,
        run_dir: &Path,
        name: &str,
        iteration: u64,
        attempt: u32,
        metrics: &Metrics,
    ) -> Result<Checkpoint> {
        let dest = run_dir.join(name);
        let refuse = |message: String| Err(Error::Checkpoint { path: dest.clone(), message });
        match read_fence(run_dir)? {
            Fence::Open(current) if current != attempt => {
                return refuse(format!(
                    "not committed: attempt {attempt} of this run is over (attempt {current} \
                     owns the run directory now)"
                ));
            }
            Fence::Closed => return refuse("not committed: the run has ended".into()),
            Fence::Open(_) | Fence::Unset => {}
        }
        let metadata = CheckpointMetadata {
            training_iteration: iteration,
            timestamp: crate::storage::unix_time(),
            metrics: crate::metrics::to_json(metrics),
            user: self.user.clone(),
            rtune_version: env!("CARGO_PKG_VERSION").to_owned(),
            attempt,
        };
        let json = serde_json::to_vec_pretty(&metadata).expect("metadata serialises");
        let meta_path = self.tmp.join(METADATA_FILE);
        fs::write(&meta_path, json).at(&meta_path)?;
        storage::fsync_tree(&self.tmp)?;
        // rename(2) never replaces a non-empty folder, so a committed checkpoint (it holds
        // metadata.json) stays unless it is moved aside here, which only a newer attempt does.
        if let Err(e) = fs::rename(&self.tmp, &dest) {
            if !dest.exists() {
                return Err(Error::io(&dest, e));
            }
            let by = Checkpoint { path: dest.clone() }.metadata().map(|m| m.attempt).ok();
            match by {
                Some(by) if by >= attempt => {
                    return refuse(format!(
                        "not committed: already committed by attempt {by}, and a committed \
                         checkpoint is never replaced (this is attempt {attempt})"
                    ));
                }
                // Left by an older attempt that failed after committing it, or half there.
                _ => {
                    let aside = run_dir.join(format!("{TMP_PREFIX}stale_{name}_{attempt}"));
                    fs::rename(&dest, &aside).at(&dest)?;
                    fs::remove_dir_all(&aside).at(&aside)?;
                    fs::rename(&self.tmp, &dest).at(&dest)?;
                }
            }
        }
        storage::fsync_dir(run_dir)?;
        let committed = Checkpoint { path: dest };
        std::mem::forget(self);
        Ok(committed)
    }
}

impl Drop for CheckpointWriter {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.tmp);
    }
}

/// The attempt fence of a run directory (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fence {
    /// No fence: a directory that no driver fenced (commits are not checked).
    Unset,
    /// This attempt may commit.
    Open(u32),
    /// The run has ended: nothing may commit.
    Closed,
}

const FENCE_FILE: &str = ".rtune_attempt";

/// Sets the fence (atomically): the driver calls this before each attempt and at the end. Not
/// made durable: the fence orders live processes, and after an OS crash none is left (a
/// driver going on from there takes an attempt number above the fence's and its checkpoints').
pub(crate) fn set_fence(run_dir: &Path, fence: Fence) -> Result<()> {
    let text = match fence {
        Fence::Unset => {
            let path = run_dir.join(FENCE_FILE);
            return match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&path, e)),
                _ => Ok(()),
            };
        }
        Fence::Open(attempt) => attempt.to_string(),
        Fence::Closed => "closed".to_owned(),
    };
    storage::replace_file(&run_dir.join(FENCE_FILE), text.as_bytes())
}

pub(crate) fn read_fence(run_dir: &Path) -> Result<Fence> {
    let path = run_dir.join(FENCE_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Fence::Unset),
        Err(e) => return Err(Error::io(&path, e)),
    };
    match text.trim() {
        "closed" => Ok(Fence::Closed),
        // What an OS crash may leave of a fence that was never made durable.
        "" => Ok(Fence::Unset),
        n => n.parse().map(Fence::Open).map_err(|_| Error::Checkpoint {
            path: path.clone(),
            message: format!("unreadable attempt fence {n:?}"),
        }),
    }
}

/// The name of the checkpoint of iteration 12 by attempt 0: `checkpoint_000012` (Ray's
/// naming), and by a later attempt, `checkpoint_000012_a2`: a name of its own, so that no
/// straggler of an earlier attempt writes over it, in the run directory or in a store (where a
/// partitioned worker's upload may land after the next attempt recorded its checkpoint). Names
/// still sort by iteration.
pub fn checkpoint_name(iteration: u64, attempt: u32) -> String {
    match attempt {
        0 => format!("checkpoint_{iteration:06}"),
        n => format!("checkpoint_{iteration:06}_a{n}"),
    }
}

/// The attempt a checkpoint's name says ([`checkpoint_name`]'s inverse): 0 for
/// `checkpoint_000012`, 2 for `checkpoint_000012_a2`; None for another name.
pub(crate) fn attempt_in_name(name: &str) -> Option<u32> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let rest = name.strip_prefix("checkpoint_")?;
    match rest.split_once("_a") {
        Some((iteration, attempt)) if digits(iteration) && digits(attempt) => attempt.parse().ok(),
        None if digits(rest) => Some(0),
        _ => None,
    }
}

/// Removes temporary checkpoint folders and committed checkpoints the driver never recorded
/// (`keep` are the recorded ones), so a new attempt starts from a clean run directory.
pub(crate) fn sweep_unrecorded(run_dir: &Path, keep: &[Checkpoint]) -> Result<()> {
    for entry in fs::read_dir(run_dir).at(run_dir)? {
        let path = entry.at(run_dir)?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let stray_tmp = name.starts_with(TMP_PREFIX);
        let unrecorded = name.starts_with("checkpoint_") && !keep.iter().any(|c| c.path == path);
        if path.is_dir() && (stray_tmp || unrecorded) {
            fs::remove_dir_all(&path).at(&path)?;
        }
    }
    Ok(())
}

/// The bytes of the files in `dir` and its folders (0 for what cannot be read).
pub fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => folder_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What prediction needs of a checkpoint: everything but the optimizer's state, whose
    /// folder is not entered.
    #[test]
    fn a_copy_for_prediction_leaves_the_training_state_out() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("checkpoint_000001");
        for file in
            [MODEL_FILE, METADATA_FILE, OPTIMIZER_FILE, OPTIMIZER_INDEX, "zero/rank_0", "own/notes"]
        {
            let path = from.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "x").unwrap();
        }
        let to = dir.path().join("export");
        copy_dir_where(&from, &to, &|relative| !is_training_state(relative)).unwrap();
        let mut copied = crate::sys::relative_files(&to);
        copied.sort();
        assert_eq!(copied, [METADATA_FILE, MODEL_FILE, "own/notes"]);
        assert!(!to.join(SHARDS_DIR).exists());
    }

    /// A checkpoint's name says its attempt: Ray's names attempt 0, a retry's its own.
    #[test]
    fn a_name_says_its_attempt() {
        for (iteration, attempt) in [(3, 0), (12, 2), (1_000_000, 41)] {
            assert_eq!(attempt_in_name(&checkpoint_name(iteration, attempt)), Some(attempt));
        }
        for other in ["checkpoint_", "checkpoint_0003_a", "checkpoint_x_a1", "exploited_checkpoint"]
        {
            assert_eq!(attempt_in_name(other), None, "{other}");
        }
    }

    #[test]
    fn commit_is_complete_and_drop_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let writer = CheckpointWriter::create(dir.path(), 0, 1).unwrap();
        fs::write(writer.path().join("extra.txt"), "hi").unwrap();
        let metrics = Metrics::from([("loss".to_string(), 0.5)]);
        let ck = writer
            .metadata(serde_json::json!({"epoch": 3}))
            .commit(dir.path(), &checkpoint_name(3, 0), 3, 0, &metrics)
            .unwrap();
        assert_eq!(ck.name(), "checkpoint_000003");
        assert_eq!(ck.iteration().unwrap(), 3);
        assert_eq!(ck.metadata().unwrap().user["epoch"], 3);
        assert!(ck.path().join("extra.txt").is_file());

        let abandoned = CheckpointWriter::create(dir.path(), 0, 2).unwrap();
        let tmp = abandoned.path().to_owned();
        drop(abandoned);
        assert!(!tmp.exists());
    }

    #[test]
    fn sweep_removes_half_written_and_unrecorded() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(".tmp_checkpoint_1_0_4")).unwrap();
        let metrics = Metrics::new();
        let kept = CheckpointWriter::create(dir.path(), 0, 1)
            .unwrap()
            .commit(dir.path(), "checkpoint_000001", 1, 0, &metrics)
            .unwrap();
        CheckpointWriter::create(dir.path(), 0, 2)
            .unwrap()
            .commit(dir.path(), "checkpoint_000002", 2, 0, &metrics)
            .unwrap();
        sweep_unrecorded(dir.path(), std::slice::from_ref(&kept)).unwrap();
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["checkpoint_000001".to_string()]);
    }

    fn commit_as(dir: &Path, attempt: u32, marker: &str) -> Result<Checkpoint> {
        let writer = CheckpointWriter::create(dir, 0, u64::from(attempt) + 10)?;
        fs::write(writer.path().join("marker"), marker).unwrap();
        writer.commit(dir, "checkpoint_000005", 5, attempt, &Metrics::new())
    }

    fn marker(dir: &Path) -> String {
        fs::read_to_string(dir.join("checkpoint_000005/marker")).unwrap()
    }

    /// A late writer of an older attempt can neither overwrite a checkpoint nor commit a new
    /// one once the fence has moved on; a newer attempt replaces what an older one left.
    #[test]
    fn fence_refuses_stale_attempts_and_committed_checkpoints_are_immutable() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        set_fence(dir, Fence::Open(0)).unwrap();
        commit_as(dir, 0, "attempt 0").unwrap();
        // Attempt 0 failed after committing; attempt 1 runs and writes the same name.
        set_fence(dir, Fence::Open(1)).unwrap();
        let ck = commit_as(dir, 1, "attempt 1").unwrap();
        assert_eq!((marker(dir), ck.metadata().unwrap().attempt), ("attempt 1".into(), 1));
        // A straggler of attempt 0: refused by the fence, and it leaves no temp folder behind.
        let e = commit_as(dir, 0, "late").unwrap_err().to_string();
        assert!(e.contains("attempt 0 of this run is over"), "{e}");
        assert_eq!(marker(dir), "attempt 1");
        // Even past the fence (no fence set), the same or an older attempt never replaces it.
        set_fence(dir, Fence::Unset).unwrap();
        for attempt in [0, 1] {
            let e = commit_as(dir, attempt, "again").unwrap_err().to_string();
            assert!(e.contains("never replaced"), "{e}");
            assert_eq!(marker(dir), "attempt 1");
        }
        // The run ended: nothing commits.
        set_fence(dir, Fence::Closed).unwrap();
        let e = commit_as(dir, 2, "after the end").unwrap_err().to_string();
        assert!(e.contains("the run has ended"), "{e}");
        let names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != FENCE_FILE)
            .collect();
        assert_eq!(names, vec!["checkpoint_000005".to_string()]);
    }
}
