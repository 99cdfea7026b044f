//! Staging copies: an experiment on a store is read and run in a copy on this machine
//! (`$RTUNE_STAGING`, else `~/.cache/rtune/staging`, then the bucket and the prefix).
//!
//! A reader ([`local_copy`]: `rtune show/ls/export/resume s3://..`, `ResultGrid::from_path`,
//! `Tuner::restore`) brings the copy up to date with the store's small files and, of each
//! checkpoint, its `metadata.json` only: the checkpoint is a *stub* here (`.stub`, beside
//! `.uploaded` naming where it is whole), and [`fetch_stub`] brings the rest down when
//! something reads its files (a resumed rank, an export, a predictor, PBT's exploit outside the
//! store). The driver records the checkpoints that ranks working away from its files uploaded
//! the same way. The mirror ([`Syncer`](super::sync::Syncer)) neither uploads a stub nor
//! deletes the store's files of one.
//!
//! The copies are a cache: [`prune`] keeps them within a budget, least recently used first,
//! finished experiments' before the rest, never one a live driver holds.

use std::path::{Path, PathBuf};

use crate::config::StoreSettings;
use crate::error::{Error, IoContext, Result};

use super::checkpoint::METADATA_FILE;
use super::remote::{
    Remote, SCHEME, blocking, is_current, is_url, mark_uploaded, split_checkpoint, uploaded_to,
};

/// In a checkpoint folder: only its `metadata.json` is here, the rest is in the store where
/// `.uploaded` says; the file holds the run's store settings, to fetch it with.
const STUB: &str = ".stub";

/// Beside a stub (`.<name>.fetch.lock`), locked while it is fetched, so that the ranks of one
/// machine fetch it once (outside it: an export copies the checkpoint's folder whole).
const FETCH_LOCK: &str = ".fetch.lock";

/// In a staging copy: the URL of the experiment it mirrors (a dot name: never uploaded).
pub(crate) const MARK: &str = ".rtune_remote";

/// Notes in the staging copy `local` that it mirrors `remote`.
pub(crate) fn mark(local: &Path, remote: &Remote) -> Result<()> {
    std::fs::create_dir_all(local).at(local)?;
    crate::storage::atomic_write(&local.join(MARK), remote.url().as_bytes())
}

/// The experiment on a store that the staging copy `local` mirrors, if it is one.
pub(crate) fn marked(local: &Path) -> Option<Result<Remote>> {
    let url = std::fs::read_to_string(local.join(MARK)).ok()?;
    Some(Remote::parse(url.trim()))
}

/// The folder to read `path` from: itself, or, for an `s3://` URL, its staging copy brought up
/// to date from the store first, its checkpoints as stubs.
pub fn local_copy(path: &Path) -> Result<PathBuf> {
    let Some(url) = path.to_str().filter(|_| is_url(path)) else {
        return Ok(crate::config::expand_home(path));
    };
    let remote = Remote::parse(url)?;
    let local = remote.staging();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Storage(format!("tokio runtime: {e}")))?;
    let fetched = runtime.block_on(async {
        remote.check().await?;
        download_lazy(&remote, &local).await
    })?;
    if fetched == 0 && !local.exists() {
        return Err(Error::Storage(format!("{url} holds nothing (see `rtune ls` of its parent)")));
    }
    mark(&local, &remote)?;
    Ok(local)
}

/// [`Remote::download`], but of each checkpoint only its `metadata.json`: one that lacks the
/// rest here (or holds older copies) is left a stub. Returns how many files were fetched.
pub(crate) async fn download_lazy(remote: &Remote, local: &Path) -> Result<usize> {
    let mut stubs = std::collections::BTreeSet::new();
    let fetched = remote
        .download_where(local, |relative| match split_checkpoint(relative) {
            Some((folder, file)) if file != METADATA_FILE => {
                stubs.insert(folder.to_owned());
                false
            }
            _ => true,
        })
        .await?;
    for folder in stubs {
        let dir = local.join(&folder);
        if dir.join(METADATA_FILE).is_file() {
            make_stub(&dir, &remote.join(&folder))?;
        }
    }
    Ok(fetched)
}

/// Brings the checkpoint `remote` down into `local` (a folder not here yet) as a stub: its
/// `metadata.json`, the rest fetched when something reads it. Blocks.
pub(crate) fn download_stub(remote: &Remote, local: &Path) -> Result<()> {
    std::fs::create_dir_all(local).at(local)?;
    // Marked first: a folder with its metadata never looks whole when it is not.
    make_stub(local, remote)?;
    blocking(async {
        let size = remote.size(METADATA_FILE).await?;
        remote.fetch(METADATA_FILE, size, &local.join(METADATA_FILE)).await
    })
}

/// Makes the checkpoint folder `dir` (its `metadata.json` here) a stub of `remote`'s.
pub(crate) fn make_stub(dir: &Path, remote: &Remote) -> Result<()> {
    let settings = serde_json::to_vec(remote.settings()).expect("settings serialise");
    crate::storage::atomic_write(&dir.join(STUB), &settings)?;
    mark_uploaded(dir, remote.url())
}

/// Whether the checkpoint folder `dir` is a stub (its files but `metadata.json` in the store).
pub(crate) fn is_stub(dir: &Path) -> bool {
    dir.join(STUB).exists()
}

/// Brings the files of the stub checkpoint `dir` down from the store (nothing to do for a
/// whole one); the ranks of one machine reading it at once fetch it once.
pub(crate) fn fetch_stub(dir: &Path) -> Result<()> {
    fetch_stub_files(dir, true)
}

/// [`fetch_stub`], of every file (`all`: the folder is whole then) or of those prediction
/// needs (not the optimizer's state, `checkpoint::is_training_state`): it stays a stub, and
/// a later fetch of every file brings only what is missing.
fn fetch_stub_files(dir: &Path, all: bool) -> Result<()> {
    if !is_stub(dir) {
        return Ok(());
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let lock = dir.with_file_name(format!(".{name}{FETCH_LOCK}"));
    crate::storage::locked(&lock, || {
        let Ok(settings) = std::fs::read(dir.join(STUB)) else {
            return Ok(()); // fetched by another process meanwhile
        };
        let settings: StoreSettings = serde_json::from_slice(&settings).unwrap_or_default();
        let url = uploaded_to(dir).ok_or_else(|| Error::Checkpoint {
            path: dir.to_owned(),
            message: "a stub that names no place in a store".into(),
        })?;
        let remote = Remote::with_settings(&url, &settings)?;
        if !all {
            let wanted = |relative: &str| !super::checkpoint::is_training_state(relative);
            return blocking(remote.download_where(dir, wanted)).map(|_| ());
        }
        blocking(remote.download(dir))?;
        let stub = dir.join(STUB);
        std::fs::remove_file(&stub).at(&stub)
    })
}

impl crate::outcome::Checkpoint {
    /// The checkpoint's folder with all its files here: a stub's come down from the store
    /// first (see [`fetch_stub`]). What reads a checkpoint's files calls it.
    pub fn files(&self) -> Result<&Path> {
        fetch_stub(self.path())?;
        Ok(self.path())
    }

    /// The checkpoint's folder with what prediction needs here: a stub's files but the
    /// optimizer's state come down from the store first (an export's, which leaves it out).
    pub fn model_files(&self) -> Result<&Path> {
        fetch_stub_files(self.path(), false)?;
        Ok(self.path())
    }
}

/// One object (a file) on a store: the folder that holds it, and its name there.
fn split_object(url: &str) -> Result<(Remote, String)> {
    match url.rsplit_once('/') {
        Some((folder, name)) if !name.is_empty() && folder.len() > SCHEME.len() => {
            Ok((Remote::parse(folder)?, name.to_owned()))
        }
        _ => {
            Err(Error::config("store URL", format!("{url} names no file (s3://bucket/path/file)")))
        }
    }
}

/// The file `path` on this machine: itself, or, for an `s3://` URL of one object, its staging
/// copy, fetched unless the copy is as new as the object (another process of this machine may
/// have fetched it first: each writes its own temporary file and renames it).
pub fn staged_file(path: &Path) -> Result<PathBuf> {
    let Some(url) = path.to_str().filter(|_| is_url(path)) else {
        return Ok(crate::config::expand_home(path));
    };
    let (folder, name) = split_object(url)?;
    let local = folder.staging().join(&name);
    blocking(async {
        let Some((size, written)) = folder.head(&name).await? else {
            return Err(Error::Data(format!("{url} does not exist")));
        };
        match is_current(&local, written) {
            true => Ok(()),
            false => folder.fetch(&name, size, &local).await,
        }
    })?;
    Ok(local)
}

/// Where the object at `url` is staged on this machine.
pub fn staged_object_path(url: &str) -> Result<PathBuf> {
    let (folder, name) = split_object(url)?;
    Ok(folder.staging().join(name))
}

/// Whether the object at `url` exists.
pub fn object_exists(url: &str) -> Result<bool> {
    let (folder, name) = split_object(url)?;
    blocking(folder.holds(&name))
}

/// Uploads the file `file` as the object at `url`.
pub fn put_object(url: &str, file: &Path) -> Result<()> {
    let (folder, name) = split_object(url)?;
    blocking(folder.upload(&name, file))
}

/// Where staging copies live on this machine.
pub(crate) fn staging_root() -> PathBuf {
    crate::config::staging_for("", "")
}

/// How many bytes of staging copies this machine keeps (`RTUNE_STAGING_BUDGET_MB`, default
/// 20 GiB), beyond those live drivers hold.
pub(crate) fn budget() -> u64 {
    std::env::var("RTUNE_STAGING_BUDGET_MB")
        .ok()
        .and_then(|mb| mb.trim().parse::<f64>().ok())
        .filter(|mb| mb.is_finite() && *mb >= 0.0)
        .map_or(20 << 30, |mb| (mb * 1e6) as u64)
}

/// A staging copy as [`prune`] weighs it.
struct Copy {
    dir: PathBuf,
    bytes: u64,
    /// Ended: it holds its results table (its store holds everything it had).
    finished: bool,
    /// When it was last used (its mark written).
    used: std::time::SystemTime,
}

/// Keeps the staging copies under `root` within `budget` bytes: removes finished experiments'
/// copies first, then the others, least recently used first, until the rest fit; never `keep`
/// nor a copy `held` says a live driver holds. Everything a copy holds is in its store (a
/// driver mirrors it there before it lets go of its lease), so a removed copy comes back from
/// there when it is read again. Returns the bytes freed.
pub(crate) fn prune(root: &Path, budget: u64, keep: &Path, held: impl Fn(&Path) -> bool) -> u64 {
    let mut copies = Vec::new();
    find_copies(root, &mut copies);
    let total: u64 = copies.iter().map(|c| c.bytes).sum();
    if total <= budget {
        return 0;
    }
    // Removed first: finished ones, then the least recently used.
    copies.sort_by_key(|c| (!c.finished, c.used));
    let mut freed = 0;
    for copy in copies {
        if total - freed <= budget {
            break;
        }
        if copy.dir == keep || held(&copy.dir) {
            continue;
        }
        if std::fs::remove_dir_all(&copy.dir).is_ok() {
            let dir = copy.dir.display();
            tracing::info!("removed the staging copy {dir} (staging copies over their budget)");
            freed += copy.bytes;
        }
    }
    freed
}

/// The staging copies (folders with a mark) under `dir`.
fn find_copies(dir: &Path, out: &mut Vec<Copy>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        match std::fs::metadata(path.join(MARK)).and_then(|m| m.modified()) {
            Ok(used) => out.push(Copy {
                bytes: super::checkpoint::folder_bytes(&path),
                finished: path.join(crate::storage::RESULTS_PARQUET).exists(),
                used,
                dir: path,
            }),
            Err(_) => find_copies(&path, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A staging copy at `root/name` of `bytes` bytes, used `age` seconds ago.
    fn copy(root: &Path, name: &str, bytes: usize, age: u64, finished: bool) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("T_1")).unwrap();
        std::fs::write(dir.join("T_1/result.json"), vec![b'x'; bytes]).unwrap();
        if finished {
            std::fs::write(dir.join(crate::storage::RESULTS_PARQUET), b"").unwrap();
        }
        let mark = std::fs::File::create(dir.join(MARK)).unwrap();
        let used = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
        mark.set_modified(used).unwrap();
        dir
    }

    /// Over the budget, finished copies go first, then the least recently used; the copy being
    /// read and those a live driver holds stay, whatever their age.
    #[test]
    fn the_staging_cache_keeps_within_its_budget() {
        let root = tempfile::tempdir().unwrap();
        let bucket = root.path().join("bucket");
        let old = copy(&bucket, "old", 1000, 300, false);
        let finished = copy(&bucket, "team/finished", 1000, 10, true);
        let held = copy(&bucket, "held", 1000, 900, false);
        let recent = copy(&bucket, "recent", 1000, 20, false);
        let reading = copy(&root.path().join("other"), "reading", 1000, 1000, true);
        // A single staged object (a dataset) is no copy: it stays.
        std::fs::write(bucket.join("data.csv"), vec![b'y'; 5000]).unwrap();
        let is_held = |dir: &Path| dir == held;
        assert_eq!(prune(root.path(), 10_000, &reading, is_held), 0, "within the budget");
        // 5 copies of 1 KB: 3.5 KB left means two go: the finished one, then the oldest.
        assert_eq!(prune(root.path(), 3500, &reading, is_held), 2000);
        assert!(!finished.exists() && !old.exists());
        assert!(recent.exists() && held.exists() && reading.exists());
        assert!(bucket.join("data.csv").exists());
        // Nothing left to spare but what is held or read.
        assert_eq!(prune(root.path(), 0, &reading, is_held), 1000);
        assert!(!recent.exists() && held.exists() && reading.exists());
    }

    /// A stub names where it is whole and the settings to fetch it with; a whole checkpoint
    /// has nothing to fetch.
    #[test]
    fn stubs_name_their_place_in_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("T_1").join("checkpoint_000003");
        std::fs::create_dir_all(&ck).unwrap();
        let remote = Remote::parse("s3://bucket/exp/T_1/checkpoint_000003").unwrap();
        make_stub(&ck, &remote).unwrap();
        assert!(is_stub(&ck));
        assert_eq!(uploaded_to(&ck).as_deref(), Some("s3://bucket/exp/T_1/checkpoint_000003"));
        let whole = dir.path().join("whole");
        std::fs::create_dir_all(&whole).unwrap();
        fetch_stub(&whole).unwrap();
    }
}
