//! Checkpoints: a folder holding the model (`model.safetensors`), `metadata.json` and any files
//! the train function adds.
//!
//! A checkpoint is built in a hidden temporary folder of the run directory and committed by
//! fsyncing every file and renaming the folder to `checkpoint_NNNNNN` (then fsyncing the run
//! directory). A crash mid-write leaves only a `.tmp_checkpoint_*` folder, which never looks
//! complete and is swept away before the next attempt starts.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tch::nn::VarStore;

use crate::error::{Error, IoContext, Result};
use crate::storage;
use crate::train::metrics::Metrics;

pub const MODEL_FILE: &str = "model.safetensors";
pub const METADATA_FILE: &str = "metadata.json";
const TMP_PREFIX: &str = ".tmp_checkpoint_";

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
}

/// A committed checkpoint folder.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Checkpoint {
    path: PathBuf,
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

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder name, e.g. `checkpoint_000012`.
    pub fn name(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
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

    /// Loads the saved model into `vs` (whose variables must have the same names and shapes).
    pub fn load_var_store(&self, vs: &mut VarStore) -> Result<()> {
        let path = self.path.join(MODEL_FILE);
        if !path.is_file() {
            return Err(Error::Checkpoint {
                path: self.path.clone(),
                message: format!("no {MODEL_FILE}: this checkpoint holds no VarStore"),
            });
        }
        vs.load(&path)
            .map_err(|e| Error::Checkpoint { path, message: format!("cannot load model: {e}") })
    }

    /// Copies the checkpoint to `dest` (which must not exist yet), atomically.
    pub fn export(&self, dest: impl AsRef<Path>) -> Result<Checkpoint> {
        let dest = dest.as_ref();
        if dest.exists() {
            return Err(Error::Checkpoint {
                path: dest.to_owned(),
                message: "already exists; choose a new folder to export to".into(),
            });
        }
        let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        fs::create_dir_all(parent).at(parent)?;
        let tmp = parent.join(format!(".tmp_export_{}", std::process::id()));
        copy_dir(&self.path, &tmp)?;
        storage::fsync_tree(&tmp)?;
        fs::rename(&tmp, dest).at(dest)?;
        storage::fsync_dir(parent)?;
        Checkpoint::from_directory(dest)
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).at(to)?;
    for entry in fs::read_dir(from).at(from)? {
        let entry = entry.at(from)?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target).at(&target)?;
        }
    }
    Ok(())
}

/// A checkpoint being written: save the model, add files under `path()`, then pass it to
/// `TrainContext::report`, which commits it. Dropped without reporting, it leaves nothing.
#[derive(Debug)]
pub struct CheckpointWriter {
    tmp: PathBuf,
    user: serde_json::Value,
}

impl CheckpointWriter {
    pub(crate) fn create(run_dir: &Path, rank: usize, seq: u64) -> Result<CheckpointWriter> {
        let tmp = run_dir.join(format!("{TMP_PREFIX}{}_{rank}_{seq}", std::process::id()));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).at(&tmp)?;
        }
        fs::create_dir_all(&tmp).at(&tmp)?;
        Ok(CheckpointWriter { tmp, user: serde_json::Value::Null })
    }

    /// The folder to write extra files into.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Saves `vs` as `model.safetensors`.
    pub fn save_var_store(&mut self, vs: &VarStore) -> Result<()> {
        vs.save(self.tmp.join(MODEL_FILE))?;
        Ok(())
    }

    /// Attaches user metadata (e.g. the epoch or the optimizer settings), kept in metadata.json.
    pub fn metadata(mut self, user: serde_json::Value) -> Self {
        self.user = user;
        self
    }

    /// Writes metadata.json, fsyncs everything and renames the folder to `run_dir/name`.
    pub(crate) fn commit(
        self,
        run_dir: &Path,
        name: &str,
        iteration: u64,
        metrics: &Metrics,
    ) -> Result<Checkpoint> {
        let metadata = CheckpointMetadata {
            training_iteration: iteration,
            timestamp: crate::train::unix_time(),
            metrics: metrics
                .iter()
                .map(|(k, &v)| (k.clone(), crate::train::metrics::number_or_tag(v)))
                .collect(),
            user: self.user.clone(),
            rtune_version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        let json = serde_json::to_vec_pretty(&metadata).expect("metadata serialises");
        let meta_path = self.tmp.join(METADATA_FILE);
        fs::write(&meta_path, json).at(&meta_path)?;
        storage::fsync_tree(&self.tmp)?;
        let dest = run_dir.join(name);
        if dest.exists() {
            // Left by an attempt that crashed after committing but before the driver saw it.
            fs::remove_dir_all(&dest).at(&dest)?;
        }
        fs::rename(&self.tmp, &dest).at(&dest)?;
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

/// `checkpoint_000012` for iteration 12 (Ray's naming).
pub fn checkpoint_name(iteration: u64) -> String {
    format!("checkpoint_{iteration:06}")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_is_complete_and_drop_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let writer = CheckpointWriter::create(dir.path(), 0, 1).unwrap();
        fs::write(writer.path().join("extra.txt"), "hi").unwrap();
        let metrics = Metrics::from([("loss".to_string(), 0.5)]);
        let ck = writer
            .metadata(serde_json::json!({"epoch": 3}))
            .commit(dir.path(), &checkpoint_name(3), 3, &metrics)
            .unwrap();
        assert_eq!(ck.name(), "checkpoint_000003");
        assert_eq!(ck.iteration().unwrap(), 3);
        assert_eq!(ck.metadata().unwrap().user["epoch"], 3);
        assert!(ck.path().join("extra.txt").is_file());

        let abandoned = CheckpointWriter::create(dir.path(), 0, 2).unwrap();
        let tmp = abandoned.path().to_owned();
        drop(abandoned);
        assert!(!tmp.exists());

        let exported = ck.export(dir.path().join("best")).unwrap();
        assert!(exported.path().join("extra.txt").is_file());
        assert!(ck.export(dir.path().join("best")).is_err());
    }

    #[test]
    fn sweep_removes_half_written_and_unrecorded() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(".tmp_checkpoint_1_0_4")).unwrap();
        let metrics = Metrics::new();
        let kept = CheckpointWriter::create(dir.path(), 0, 1)
            .unwrap()
            .commit(dir.path(), "checkpoint_000001", 1, &metrics)
            .unwrap();
        CheckpointWriter::create(dir.path(), 0, 2)
            .unwrap()
            .commit(dir.path(), "checkpoint_000002", 2, &metrics)
            .unwrap();
        sweep_unrecorded(dir.path(), std::slice::from_ref(&kept)).unwrap();
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["checkpoint_000001".to_string()]);
    }
}
