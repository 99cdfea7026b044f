//! Experiments on S3 or an S3-compatible store: `storage_path = "s3://bucket/prefix"` (Ray's
//! `RunConfig(storage_path="s3://...")`).
//!
//! The driver works in a local staging copy of the experiment (`$RTUNE_STAGING`, else
//! `~/.cache/rtune/staging`, then the bucket and prefix) and [`Syncer`] mirrors it to the store
//! every `RunConfig::sync_period`, when the sweep ends, and when it is interrupted; a reader
//! ([`local_copy`]: `rtune resume/show/ls/export s3://..`, `ResultGrid::from_path`,
//! `Tuner::restore`) mirrors it back first. What is mirrored is what the experiment's files
//! hold: whole files only (rtune's own temporary names, which start with a dot, never go up),
//! the experiment's state last, so the state in the store never names a checkpoint that is not
//! there whole.
//!
//! Credentials, region and endpoint come from the standard `AWS_*` environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL` for an
//! S3-compatible server; plain `http://` endpoints are allowed).
//!
//! A checkpoint goes up from the rank that commits it ([`Remote::upload_folder`], before its
//! report, or in the background with `CheckpointUpload::Async`), and the mirror leaves it be.
//! Not yet: clusters without a shared file system (datasets, the binary and resumed
//! checkpoints are still read by path).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio_stream::StreamExt;

use crate::config::StoreSettings;
use crate::error::{Error, IoContext, Result};
use crate::setting::Setting;

pub use crate::config::STORE_SCHEME as SCHEME;

/// Files larger than this go up (and come down) in parts of this size, `PARALLEL` at once.
const PART_BYTES: usize = 16 << 20;
const PARALLEL: usize = 8;

type RangeTask = (u64, object_store::Result<prost::bytes::Bytes>);

/// Writes the next fetched range into `file` at its offset.
async fn join_range(
    tasks: &mut tokio::task::JoinSet<RangeTask>,
    file: &std::fs::File,
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let joined = tasks.join_next().await.expect("a task is running");
    let (offset, bytes) = joined.map_err(|e| Error::Storage(format!("a range task: {e}")))?;
    let bytes = bytes.map_err(|e| Error::Storage(first_line(&e.to_string()).to_owned()))?;
    file.write_all_at(&bytes, offset).map_err(|e| Error::Storage(e.to_string()))
}

/// Whether `path` names a place on an object store (`s3://..`).
pub fn is_url(path: &Path) -> bool {
    path.to_str().is_some_and(|p| p.starts_with(SCHEME))
}

/// A folder on an object store: a bucket and a prefix in it.
#[derive(Clone)]
pub struct Remote {
    url: String,
    bucket: String,
    prefix: String,
    store: Arc<dyn ObjectStore>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

impl Remote {
    /// `s3://bucket/prefix`, with the credentials, region and endpoint of the environment.
    pub fn parse(url: &str) -> Result<Remote> {
        Remote::parse_with(url, &[])
    }

    /// `parse`, with a run's settings over the environment's.
    pub fn with_settings(url: &str, store: &StoreSettings) -> Result<Remote> {
        let mut settings = Vec::new();
        if let Some(endpoint) = &store.endpoint {
            settings.push(("aws_endpoint", endpoint.as_str()));
        }
        if let Some(region) = &store.region {
            settings.push(("aws_region", region.as_str()));
        }
        let retry = store
            .retry_timeout
            .map(|retry_timeout| object_store::RetryConfig { retry_timeout, ..Default::default() });
        Remote::build(url, &settings, retry)
    }

    /// `parse`, with settings of object_store's S3 builder by name over the environment's
    /// (`("aws_endpoint", "http://127.0.0.1:9000")`, `("aws_access_key_id", ..)`).
    pub fn parse_with(url: &str, settings: &[(&str, &str)]) -> Result<Remote> {
        Remote::build(url, settings, None)
    }

    fn build(
        url: &str,
        settings: &[(&str, &str)],
        retry: Option<object_store::RetryConfig>,
    ) -> Result<Remote> {
        let invalid = |why: String| Error::config(Setting::StoragePath, why);
        let (bucket, prefix) = crate::config::split_store_url(url).map_err(invalid)?;
        let mut builder = Remote::builder_for(bucket, settings).map_err(invalid)?;
        if let Some(retry) = retry {
            builder = builder.with_retry(retry);
        }
        let store = builder.build().map_err(|e| invalid(format!("{url:?} cannot be used: {e}")))?;
        Ok(Remote {
            url: format!(
                "{SCHEME}{bucket}{}",
                if prefix.is_empty() { String::new() } else { format!("/{prefix}") }
            ),
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            store: Arc::new(store),
        })
    }

    /// The S3 client builder for `bucket`: the environment, then `settings` over it.
    fn builder_for(
        bucket: &str,
        settings: &[(&str, &str)],
    ) -> std::result::Result<AmazonS3Builder, String> {
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        for (key, value) in settings {
            let key = key.parse().map_err(|e| format!("storage setting {key}: {e}"))?;
            builder = builder.with_config(key, *value);
        }
        let given = settings.iter().find(|(k, _)| *k == "aws_endpoint").map(|(_, v)| v.to_string());
        let endpoint = given.or_else(|| {
            ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
                .iter()
                .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        });
        if let Some(endpoint) = &endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"))
                // An S3-compatible server takes the bucket in the path, not the host name.
                .with_virtual_hosted_style_request(false);
        }
        let region_given = settings.iter().any(|(k, _)| *k == "aws_region");
        if !region_given
            && std::env::var("AWS_REGION").is_err()
            && std::env::var("AWS_DEFAULT_REGION").is_err()
        {
            builder = builder.with_region("us-east-1");
        }
        Ok(builder)
    }

    /// The folder at `url` in the same bucket, through this one's client (its settings);
    /// another bucket is reached with the environment's settings.
    pub fn at(&self, url: &str) -> Result<Remote> {
        let (bucket, prefix) =
            crate::config::split_store_url(url).map_err(|why| Error::config("store URL", why))?;
        if bucket != self.bucket {
            return Remote::parse(url);
        }
        let root =
            Remote { url: format!("{SCHEME}{bucket}"), prefix: String::new(), ..self.clone() };
        Ok(if prefix.is_empty() { root } else { root.join(prefix) })
    }

    /// The URL: `s3://bucket/prefix`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The folder `name` in this one.
    pub fn join(&self, name: &str) -> Remote {
        let prefix = if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}/{name}", self.prefix)
        };
        Remote { url: format!("{}/{name}", self.url), prefix, ..self.clone() }
    }

    /// Where this folder is staged on this machine.
    pub fn staging(&self) -> PathBuf {
        crate::config::staging_for(&self.bucket, &self.prefix)
    }

    /// The object store `run`'s storage path names, if it names one.
    pub(crate) fn of_run(run: &crate::config::RunConfig) -> Option<Result<Remote>> {
        run.store_url().map(|url| Remote::with_settings(url, &run.store))
    }

    fn key(&self, relative: &str) -> Key {
        Key::from(if self.prefix.is_empty() {
            relative.to_owned()
        } else {
            format!("{}/{relative}", self.prefix)
        })
    }

    /// Whether the store answers for this folder with these credentials: one listing. Its
    /// error names the URL and what to check.
    pub async fn check(&self) -> Result<()> {
        let prefix = Key::from(self.prefix.as_str());
        self.store.list_with_delimiter(Some(&prefix)).await.map(drop).map_err(|e| {
            Error::config(
                Setting::StoragePath,
                format!(
                    "{} cannot be listed: {}; check the bucket's name, the credentials \
                     (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and, for an S3-compatible \
                     server, AWS_ENDPOINT_URL",
                    self.url,
                    first_line(&e.to_string())
                ),
            )
        })
    }

    /// Every object under this folder: its path relative to the folder, its size, and when it
    /// was written (milliseconds since the epoch).
    pub async fn list(&self) -> Result<BTreeMap<String, (u64, i64)>> {
        let prefix = Key::from(self.prefix.as_str());
        let strip =
            if self.prefix.is_empty() { String::new() } else { format!("{}/", self.prefix) };
        let mut objects = BTreeMap::new();
        let mut listing = self.store.list(Some(&prefix));
        while let Some(object) = listing.next().await {
            let object = object.map_err(|e| self.failed("list", e))?;
            if let Some(relative) = object.location.as_ref().strip_prefix(&strip) {
                let modified = object.last_modified.timestamp_millis();
                objects.insert(relative.to_owned(), (object.size, modified));
            }
        }
        Ok(objects)
    }

    /// Copies the objects under this folder into `local` that it lacks or holds older copies
    /// of (a staging copy ahead of the store, a killed driver's on this machine, is kept);
    /// returns how many were fetched. rtune's own objects (a name starting with a dot: the
    /// driver's lease) stay in the store.
    pub async fn download(&self, local: &Path) -> Result<usize> {
        let mut fetched = 0;
        for (relative, (size, written)) in self.list().await? {
            if relative.split('/').any(|part| part.starts_with('.')) {
                continue;
            }
            if self.fetch_if_newer(&relative, size, written, &local.join(&relative)).await? {
                fetched += 1;
            }
        }
        Ok(fetched)
    }

    /// The size of object `relative` in this folder.
    pub async fn size(&self, relative: &str) -> Result<u64> {
        let meta =
            self.store.head(&self.key(relative)).await.map_err(|e| self.failed("head", e))?;
        Ok(meta.size)
    }

    /// Writes byte ranges `ranges` of object `relative` into `file` at their own offsets (the
    /// rest of the file is left as it is), in parts of at most `PART_BYTES`, `PARALLEL` at once.
    pub(crate) async fn fetch_ranges(
        &self,
        relative: &str,
        ranges: impl IntoIterator<Item = std::ops::Range<u64>>,
        file: &std::fs::File,
    ) -> Result<()> {
        let key = self.key(relative);
        let mut tasks = tokio::task::JoinSet::new();
        for range in ranges {
            let mut start = range.start;
            while start < range.end {
                while tasks.len() >= PARALLEL {
                    join_range(&mut tasks, file).await?;
                }
                let end = (start + PART_BYTES as u64).min(range.end);
                let (store, key) = (self.store.clone(), key.clone());
                tasks.spawn(async move { (start, store.get_range(&key, start..end).await) });
                start = end;
            }
        }
        while !tasks.is_empty() {
            join_range(&mut tasks, file).await?;
        }
        Ok(())
    }

    /// Fetches object `relative` of `size` bytes, written at `written` (milliseconds since the
    /// epoch), into `target`, unless the file there is as new; whether it fetched.
    async fn fetch_if_newer(
        &self,
        relative: &str,
        size: u64,
        written: i64,
        target: &Path,
    ) -> Result<bool> {
        let local_ms = std::fs::metadata(target)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64);
        if local_ms.is_some_and(|ms| ms >= written) {
            return Ok(false);
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).at(parent)?;
        }
        self.fetch(relative, size, target).await?;
        Ok(true)
    }

    /// Fetches object `relative` of `size` bytes into `target`, replaced whole at the end: a
    /// large one in ranges of `PART_BYTES`, `PARALLEL` at once.
    async fn fetch(&self, relative: &str, size: u64, target: &Path) -> Result<()> {
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = target.with_file_name(format!(".tmp_fetch_{name}_{}", std::process::id()));
        let file = std::fs::File::create(&tmp).at(&tmp)?;
        let fetched = async {
            // (An empty object is an empty file: nothing to fetch.)
            self.fetch_ranges(relative, std::iter::once(0..size), &file).await?;
            file.sync_all().at(&tmp)
        }
        .await
        .map_err(|e| match e {
            Error::Storage(why) => {
                Error::Storage(format!("download of {relative} in {}: {why}", self.url))
            }
            other => other,
        });
        if let Err(e) = fetched {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, target).at(target)
    }

    /// Uploads the file `file` as `relative` in this folder (in parts when it is large).
    pub async fn upload(&self, relative: &str, file: &Path) -> Result<()> {
        let bytes = std::fs::read(file).at(file)?;
        let key = self.key(relative);
        if bytes.len() <= PART_BYTES {
            self.store
                .put(&key, PutPayload::from(bytes))
                .await
                .map_err(|e| self.failed("upload", e))?;
            return Ok(());
        }
        let upload = self.store.put_multipart(&key).await.map_err(|e| self.failed("upload", e))?;
        let mut parts = object_store::WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        for chunk in bytes.chunks(PART_BYTES) {
            parts.wait_for_capacity(PARALLEL).await.map_err(|e| self.failed("upload", e))?;
            parts.write(chunk);
        }
        parts.finish().await.map_err(|e| self.failed("upload", e))?;
        Ok(())
    }

    /// Uploads the folder `dir` (a committed checkpoint) as `name` in this one, its files in
    /// `upload_order` (`metadata.json` last), and marks it uploaded (`Syncer` leaves it be).
    /// Blocks: the rank that wrote the checkpoint calls it before reporting it.
    pub fn upload_folder(&self, dir: &Path, name: &str) -> Result<()> {
        let folder = self.join(name);
        folder.put_files(dir)?;
        mark_uploaded(dir, folder.url())
    }

    /// Uploads every file of `dir` (rtune's dot names aside) into this folder, whole files,
    /// `metadata.json` last (it makes a checkpoint or an export whole). Blocks.
    pub fn put_files(&self, dir: &Path) -> Result<()> {
        let mut files = Vec::new();
        walk(dir, "", &mut files)?;
        files.sort_by_key(|(relative, ..)| relative == "metadata.json");
        blocking(async {
            for (relative, ..) in &files {
                self.upload(relative, &dir.join(relative)).await?;
            }
            Ok::<_, Error>(())
        })
    }

    /// Brings this folder (a checkpoint) down into `local`, whole: fetched into a temporary
    /// sibling and renamed into place, replacing what was there. Blocks (see [`blocking`]); the
    /// folder must hold something.
    pub fn download_folder(&self, local: &Path) -> Result<()> {
        let parent = local.parent().unwrap_or(Path::new("."));
        let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = parent.join(format!(".tmp_folder_{name}_{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).at(&tmp)?;
        }
        std::fs::create_dir_all(&tmp).at(&tmp)?;
        let fetched = blocking(self.download(&tmp));
        let fetched = match fetched {
            Ok(0) => Err(Error::Storage(format!("{} holds nothing", self.url))),
            other => other,
        };
        if let Err(e) = fetched {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        // Fetched from its place in the store: the mirror need not send it back.
        mark_uploaded(&tmp, &self.url)?;
        if local.exists() {
            std::fs::remove_dir_all(local).at(local)?;
        }
        std::fs::rename(&tmp, local).at(local)
    }

    /// Copies the folder `from` (anywhere in this store) to `name` in this one, object by object
    /// inside the store (nothing comes down), `metadata.json` last; returns the copy's URL.
    pub(crate) async fn copy_folder(&self, from: &Remote, name: &str) -> Result<Remote> {
        let to = self.join(name);
        let mut objects: Vec<String> = from.list().await?.into_keys().collect();
        objects.sort_by_key(|relative| relative == "metadata.json");
        for relative in objects {
            self.store
                .copy(&from.key(&relative), &to.key(&relative))
                .await
                .map_err(|e| self.failed("copy", e))?;
        }
        Ok(to)
    }

    /// The small object `relative` in this folder and its version (for a conditional
    /// [`put_small`](Remote::put_small)); None when there is none.
    pub(crate) async fn get_small(&self, relative: &str) -> Result<Option<(Vec<u8>, Version)>> {
        let got = match self.store.get(&self.key(relative)).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.failed("read", e)),
        };
        let version = Version(object_store::UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        });
        let bytes = got.bytes().await.map_err(|e| self.failed("read", e))?;
        Ok(Some((bytes.to_vec(), version)))
    }

    /// Writes the small object `relative` in this folder if `when` holds (atomically, where the
    /// store checks conditions: see [`Put`]); the version written.
    pub(crate) async fn put_small(
        &self,
        relative: &str,
        bytes: Vec<u8>,
        when: When,
    ) -> Result<Put> {
        use object_store::{PutMode, PutOptions};
        let mode = match when {
            When::Absent => PutMode::Create,
            When::Is(version) => PutMode::Update(version.0),
            When::Always => PutMode::Overwrite,
        };
        let options = PutOptions { mode, ..Default::default() };
        match self.store.put_opts(&self.key(relative), PutPayload::from(bytes), options).await {
            Ok(put) => Ok(Put::Done(Version(object_store::UpdateVersion {
                e_tag: put.e_tag,
                version: put.version,
            }))),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(Put::Refused),
            Err(object_store::Error::NotImplemented { .. }) => Ok(Put::Unsupported),
            Err(e) => Err(self.failed("upload", e)),
        }
    }

    /// Deletes object `relative` in this folder (one that is not there is no error).
    pub async fn delete(&self, relative: &str) -> Result<()> {
        match self.store.delete(&self.key(relative)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.failed("delete", e)),
        }
    }

    fn failed(&self, what: &str, e: object_store::Error) -> Error {
        Error::Storage(format!("{what} in {}: {}", self.url, first_line(&e.to_string())))
    }
}

/// A version of an object, as its store tells it (an ETag, a version id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(object_store::UpdateVersion);

/// When [`Remote::put_small`] writes.
#[derive(Debug, Clone)]
pub enum When {
    /// Only if there is no such object.
    Absent,
    /// Only if the object is still at this version.
    Is(Version),
    /// Whatever is there.
    Always,
}

/// What [`Remote::put_small`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Put {
    Done(Version),
    /// The condition did not hold (the store checked it): nothing was written.
    Refused,
    /// The store checks no conditions: nothing was written (write `When::Always` and read it
    /// back instead).
    Unsupported,
}

/// Runs `work` (store I/O) to its end from sync code, inside an async runtime or not: on a
/// thread of its own (a runtime thread it blocks is let go first), with the process's store
/// runtime driving its connections. That runtime lives as long as the process: a store
/// client's pooled connections are driven by the runtime that opened them, so transfers that
/// overlap (background uploads) must not each bring a runtime that ends under the other's.
pub fn blocking<T: Send>(work: impl Future<Output = Result<T>> + Send) -> Result<T> {
    static RUNTIME: std::sync::OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    let runtime = RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("rtune-store")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Storage(format!("tokio runtime: {e}")))?;
    let run = || {
        std::thread::scope(|s| {
            s.spawn(|| runtime.handle().block_on(work))
                .join()
                .map_err(|_| Error::Storage("a store transfer panicked".into()))?
        })
    };
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
        _ => run(),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

/// Mirrors a local folder to a store's: files that changed since the last sync go up (the
/// experiment's state files last), files gone here are deleted there.
pub(crate) struct Syncer {
    remote: Remote,
    local: PathBuf,
    /// Each file uploaded: its size and modification time then.
    sent: HashMap<String, (u64, SystemTime)>,
}

/// Files that say what the others hold: uploaded after everything they may name.
const LAST: [&str; 3] = ["tuner.json", "experiment_state.json", "results.parquet"];

/// When a file goes up in a pass: a checkpoint's files first (its `metadata.json`, which
/// makes it whole, after the rest), then the rows that name checkpoints, then the experiment's
/// state: the store never names a checkpoint it does not hold whole.
fn upload_order(relative: &str) -> u8 {
    let in_checkpoint = relative.split('/').any(|s| s.starts_with("checkpoint_"));
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
            let in_checkpoint = relative.split('/').any(|s| s.starts_with("checkpoint_"));
            if in_checkpoint && !self.local.join(&relative).exists() && !gone.contains(&relative) {
                gone.push(relative);
            }
        }
        for relative in gone {
            if self.local.join(&relative).exists() {
                continue;
            }
            match self.remote.store.delete(&self.remote.key(&relative)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.remote.failed("delete", e)),
            }
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

/// A file to mirror: its path relative to the top, size, modification time, and whether its
/// folder was uploaded whole by the rank that wrote it.
type Found = (String, u64, SystemTime, bool);

/// Every file under `dir` but rtune's own (a name starting with a dot, files or folders).
fn walk(dir: &Path, prefix: &str, out: &mut Vec<Found>) -> Result<()> {
    let uploaded = dir.join(UPLOADED).exists();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let relative = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
        // A file may go (a pruned checkpoint) while the walk runs: what is gone is skipped.
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            walk(&entry.path(), &relative, out)?;
        } else if meta.is_file() {
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            out.push((relative, meta.len(), modified, uploaded));
        }
    }
    Ok(())
}

/// In a checkpoint folder: it is whole in the store, at the URL this file holds (its rank
/// uploaded it there, or it came down from there); a dot name: never uploaded.
const UPLOADED: &str = ".uploaded";

/// Where the checkpoint folder `dir` is whole in a store, if it is. (A mark written before
/// marks named the checkpoint holds its run's URL: not an answer.)
pub(crate) fn uploaded_to(dir: &Path) -> Option<String> {
    let url = std::fs::read_to_string(dir.join(UPLOADED)).ok()?;
    let run = dir.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
    let url = url.trim();
    let names_run = run.is_some_and(|run| url.rsplit('/').next() == Some(run.as_str()));
    (url.starts_with(SCHEME) && !names_run).then(|| url.to_owned())
}

/// Marks the checkpoint folder `dir` as whole in the store at `url` (the mirror leaves it be).
pub(crate) fn mark_uploaded(dir: &Path, url: &str) -> Result<()> {
    crate::storage::atomic_write(&dir.join(UPLOADED), url.as_bytes())
}

/// In a staging copy: the URL of the experiment it mirrors (a dot name: never uploaded).
const MARK: &str = ".rtune_remote";

/// Notes in the staging copy `local` that it mirrors `remote`.
pub fn mark(local: &Path, remote: &Remote) -> Result<()> {
    std::fs::create_dir_all(local).at(local)?;
    crate::storage::atomic_write(&local.join(MARK), remote.url.as_bytes())
}

/// The experiment on a store that the staging copy `local` mirrors, if it is one.
pub fn marked(local: &Path) -> Option<Result<Remote>> {
    let url = std::fs::read_to_string(local.join(MARK)).ok()?;
    Some(Remote::parse(url.trim()))
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
        let meta = folder.store.head(&folder.key(&name)).await.map_err(|e| match e {
            object_store::Error::NotFound { .. } => Error::Data(format!("{url} does not exist")),
            e => folder.failed("head", e),
        })?;
        let written = meta.last_modified.timestamp_millis();
        folder.fetch_if_newer(&name, meta.size, written, &local).await.map(drop)
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
    blocking(async {
        match folder.store.head(&folder.key(&name)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(folder.failed("head", e)),
        }
    })
}

/// Uploads the file `file` as the object at `url`.
pub fn put_object(url: &str, file: &Path) -> Result<()> {
    let (folder, name) = split_object(url)?;
    blocking(folder.upload(&name, file))
}

/// The folder to read `path` from: itself, or, for an `s3://` URL, its staging copy brought up
/// to date from the store first.
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
        remote.download(&local).await
    })?;
    if fetched == 0 && !local.exists() {
        return Err(Error::Storage(format!("{url} holds nothing (see `rtune ls` of its parent)")));
    }
    mark(&local, &remote)?;
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mark names where its checkpoint is; one that names its run (written before marks
    /// named checkpoints) or no store is no answer.
    #[test]
    fn upload_marks_name_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("T_1").join("checkpoint_000002");
        std::fs::create_dir_all(&ck).unwrap();
        assert_eq!(uploaded_to(&ck), None);
        mark_uploaded(&ck, "s3://b/exp/T_1/checkpoint_000002").unwrap();
        assert_eq!(uploaded_to(&ck).as_deref(), Some("s3://b/exp/T_1/checkpoint_000002"));
        mark_uploaded(&ck, "s3://b/exp/T_1").unwrap();
        assert_eq!(uploaded_to(&ck), None);
        mark_uploaded(&ck, "/local/exp/T_1/checkpoint_000002").unwrap();
        assert_eq!(uploaded_to(&ck), None);
    }

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
