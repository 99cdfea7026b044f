//! The mirror: a staging copy's files go up to the experiment's folder in the store as they
//! change ([`Syncer`]), on a period while a sweep runs ([`Periodic`]), what names others after
//! what it names, so the store never names a checkpoint it does not hold whole.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::error::Result;

use super::remote::{Remote, split_checkpoint, walk};
use super::staging::is_stub;

/// Mirrors a local folder to a store's: files that changed since the last sync go up (the
/// experiment's state files last), files gone here are deleted there.
pub(crate) struct Syncer {
    remote: Remote,
    local: PathBuf,
    /// Each file uploaded: its size and modification time then.
    sent: HashMap<String, (u64, SystemTime)>,
}

/// Files that say what the others hold: uploaded after everything they may name.
const LAST: [&str; 3] = ["tuner.json", "experiment_state.json", super::RESULTS_PARQUET];

/// When a file goes up in a pass: a checkpoint's files first (its `metadata.json`, which
/// makes it whole, after the rest), then the rows that name checkpoints, then the experiment's
/// state: the store never names a checkpoint it does not hold whole.
fn upload_order(relative: &str) -> u8 {
    let in_checkpoint = split_checkpoint(relative).is_some();
    match relative.rsplit('/').next() {
        _ if LAST.contains(&relative) => 3,
        Some("metadata.json") if in_checkpoint => 1,
        _ if in_checkpoint => 0,
        _ => 2,
    }
}

impl Syncer {
    pub fn new(remote: Remote, local: PathBuf) -> Syncer {
        Syncer { remote, local, sent: HashMap::new() }
    }

    /// One pass; returns the number of files uploaded and deleted.
    pub async fn sync(&mut self) -> Result<usize> {
        let mut files = Vec::new();
        walk(&self.local, "", &mut files)?;
        files.sort_by_key(|(relative, ..)| upload_order(relative));
        let mut changed = 0;
        let mut here = std::collections::HashSet::new();
        for (relative, size, modified, uploaded) in files {
            here.insert(relative.clone());
            if self.sent.get(&relative) == Some(&(size, modified)) {
                continue;
            }
            if !uploaded {
                self.remote.upload(&relative, &self.local.join(&relative)).await?;
            }
            self.sent.insert(relative, (size, modified));
            changed += 1;
        }
        let mut gone: Vec<String> =
            self.sent.keys().filter(|k| !here.contains(*k)).cloned().collect();
        // Checkpoints their ranks uploaded and the run pruned before a pass saw them (looked
        // for here again now: one committed since the walk is not gone).
        for relative in self.remote.list().await?.into_keys() {
            // (A stub's files are in the store only: they stay.)
            let Some((folder, _)) = split_checkpoint(&relative) else { continue };
            let stub = is_stub(&self.local.join(folder));
            if !stub && !self.local.join(&relative).exists() && !gone.contains(&relative) {
                gone.push(relative);
            }
        }
        for relative in gone {
            if self.local.join(&relative).exists() {
                continue;
            }
            self.remote.delete(&relative).await?;
            self.sent.remove(&relative);
            changed += 1;
        }
        Ok(changed)
    }
}

/// A `Syncer`'s passes every `period` on a task of their own, until [`Periodic::stop`].
pub(crate) struct Periodic {
    stop: tokio::sync::watch::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Periodic {
    pub(crate) fn start(syncer: Arc<tokio::sync::Mutex<Syncer>>, period: Duration) -> Periodic {
        let (stop, mut stopping) = tokio::sync::watch::channel(());
        let task = tokio::spawn(async move {
            while tokio::select! { _ = tokio::time::sleep(period) => true, _ = stopping.changed() => false }
            {
                if let Err(e) = syncer.lock().await.sync().await {
                    tracing::warn!("{e}; the next sync tries again");
                }
            }
        });
        Periodic { stop, task }
    }

    /// Ends the passes; one in flight ends first (cut off mid-upload, its request could land
    /// at the store after a later pass's, leaving the older file there).
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_go_up_before_what_names_them() {
        let mut files = [
            "experiment_state.json",
            "T_1/result.json",
            "T_1/checkpoint_000002/metadata.json",
            "tuner.json",
            "T_1/checkpoint_000002/model.safetensors",
            "driver.log",
        ];
        files.sort_by_key(|f| upload_order(f));
        assert_eq!(files[0], "T_1/checkpoint_000002/model.safetensors");
        assert_eq!(files[1], "T_1/checkpoint_000002/metadata.json");
        assert_eq!(&files[4..], ["experiment_state.json", "tuner.json"]);
    }
}
