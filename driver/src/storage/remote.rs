//! Experiments on S3 or an S3-compatible store: `storage_path = "s3://bucket/prefix"` (Ray's
//! `RunConfig(storage_path="s3://...")`).
//!
//! [`Remote`] is a folder in a store and what moves objects in and out of it: files up (a large
//! one in parts, the files of a folder side by side, `run.store.connections` requests at once)
//! and down (in ranges, as many at once). The driver works in a local staging copy of the
//! experiment (see [`staging`](super::staging): readers bring it up to date, checkpoints as
//! stubs) that [`Syncer`](super::sync::Syncer) mirrors to the store.
//!
//! Credentials, region and endpoint come from the standard `AWS_*` environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL` for an
//! S3-compatible server; plain `http://` endpoints are allowed).
//!
//! A checkpoint goes up from the rank that commits it ([`Remote::upload_folder`], before its
//! report, or in the background with `CheckpointUpload::Async`), and the mirror leaves it be.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio_stream::StreamExt;

use crate::config::StoreSettings;
use crate::error::{Error, IoContext, Result};
use crate::setting::Setting;

pub(crate) use crate::config::STORE_SCHEME as SCHEME;

/// The most parts S3 takes for one object.
const MAX_PARTS: u64 = 10_000;

/// The smallest part S3 takes (but the last).
const MIN_PART_BYTES: u64 = 5 << 20;

/// Parts are at most this large while S3's part count allows: a file spreads over the
/// connections, and fewer, larger requests beyond that gain nothing.
const PART_BYTES: u64 = 16 << 20;

/// Requests in flight at once for one transfer (a checkpoint's files, a file's parts) when the
/// run's settings do not say (`run.store.connections`).
pub(crate) const DEFAULT_CONNECTIONS: usize = 16;

/// The size of the parts a file of `size` bytes goes up and comes down in, `connections` at a
/// time: small enough that the file keeps every connection busy (16 MiB at most, 5 MiB at
/// least: S3's smallest), and large enough for S3's 10,000 parts to hold it (whole MiB).
pub(crate) fn part_bytes(size: u64, connections: usize) -> u64 {
    let spread = size.div_ceil(connections.max(1) as u64).clamp(MIN_PART_BYTES, PART_BYTES);
    size.div_ceil(MAX_PARTS).max(spread).next_multiple_of(1 << 20)
}

/// One transfer's requests in flight: each holds a permit.
type Permits = Arc<tokio::sync::Semaphore>;

type RangeTask = (u64, object_store::Result<prost::bytes::Bytes>);

/// What an upload given up for a sibling's failure returns (that failure is the one said).
fn cancelled() -> Error {
    Error::Storage("an upload given up: another file of its folder failed".into())
}

/// Writes a fetched range into `file` at its offset.
fn write_range(
    joined: std::result::Result<RangeTask, tokio::task::JoinError>,
    file: &std::fs::File,
) -> Result<()> {
    use std::os::unix::fs::FileExt;
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
    /// The run's settings it was made with (a stub checkpoint keeps them to fetch itself).
    settings: StoreSettings,
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

    /// This folder with `n` requests in flight per transfer (`run.store.connections`).
    pub fn with_connections(mut self, n: usize) -> Remote {
        self.settings.connections = Some(n);
        self
    }

    /// The run's settings this one was made with.
    pub(crate) fn settings(&self) -> &StoreSettings {
        &self.settings
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
        let mut remote = Remote::build(url, &settings, retry)?;
        remote.settings = store.clone();
        Ok(remote)
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
            settings: StoreSettings::default(),
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
    pub(crate) fn at(&self, url: &str) -> Result<Remote> {
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
    /// driver's lease) stay in the store. ([`staging::download_lazy`](super::staging) leaves
    /// checkpoints in the store.)
    pub async fn download(&self, local: &Path) -> Result<usize> {
        self.download_where(local, |_| true).await
    }

    /// [`download`](Self::download) of the objects `wanted` picks by their path (asked only of
    /// those this folder lacks or holds older copies of), side by side.
    pub(crate) async fn download_where(
        &self,
        local: &Path,
        mut wanted: impl FnMut(&str) -> bool,
    ) -> Result<usize> {
        let permits = self.permits();
        let mut fetches = tokio::task::JoinSet::new();
        for (relative, (size, written)) in self.list().await? {
            let target = local.join(&relative);
            if relative.split('/').any(|part| part.starts_with('.'))
                || is_current(&target, written)
                || !wanted(&relative)
            {
                continue;
            }
            let (folder, permits) = (self.clone(), permits.clone());
            fetches.spawn(
                async move { folder.fetch_within(&relative, size, &target, &permits).await },
            );
        }
        let mut fetched = 0;
        while let Some(done) = fetches.join_next().await {
            done.map_err(|e| Error::Storage(format!("a download: {e}")))??;
            fetched += 1;
        }
        Ok(fetched)
    }

    /// The size of the object `relative` in this folder and when it was written (milliseconds
    /// since the epoch); None when there is none.
    pub(crate) async fn head(&self, relative: &str) -> Result<Option<(u64, i64)>> {
        match self.store.head(&self.key(relative)).await {
            Ok(meta) => Ok(Some((meta.size, meta.last_modified.timestamp_millis()))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed("head", e)),
        }
    }

    /// Whether this folder holds the object `relative`.
    pub(crate) async fn holds(&self, relative: &str) -> Result<bool> {
        Ok(self.head(relative).await?.is_some())
    }

    /// Deletes every object under this folder (rtune's own too).
    pub(crate) async fn delete_all(&self) -> Result<()> {
        for relative in self.list().await?.into_keys() {
            self.delete(&relative).await?;
        }
        Ok(())
    }

    /// The size of object `relative` in this folder.
    pub(crate) async fn size(&self, relative: &str) -> Result<u64> {
        let meta =
            self.store.head(&self.key(relative)).await.map_err(|e| self.failed("head", e))?;
        Ok(meta.size)
    }

    /// Requests one transfer has in flight at once: `run.store.connections`.
    fn connections(&self) -> usize {
        self.settings.connections.unwrap_or(DEFAULT_CONNECTIONS).max(1)
    }

    /// Permits for one transfer: its connections.
    fn permits(&self) -> Permits {
        Arc::new(tokio::sync::Semaphore::new(self.connections()))
    }

    /// Writes byte ranges `ranges` of object `relative` into `file` at their own offsets (the
    /// rest of the file is left as it is), in parts (see [`part_bytes`]), as many at once as
    /// the settings' connections.
    pub(crate) async fn fetch_ranges(
        &self,
        relative: &str,
        ranges: impl IntoIterator<Item = std::ops::Range<u64>>,
        file: &std::fs::File,
    ) -> Result<()> {
        self.fetch_ranges_within(relative, ranges, file, &self.permits()).await
    }

    async fn fetch_ranges_within(
        &self,
        relative: &str,
        ranges: impl IntoIterator<Item = std::ops::Range<u64>>,
        file: &std::fs::File,
        permits: &Permits,
    ) -> Result<()> {
        let key = self.key(relative);
        let mut tasks = tokio::task::JoinSet::new();
        for range in ranges {
            let mut start = range.start;
            let part = part_bytes(range.end - range.start, self.connections());
            while start < range.end {
                let permit = permits.clone().acquire_owned().await.expect("never closed");
                while let Some(done) = tasks.try_join_next() {
                    write_range(done, file)?;
                }
                let end = (start + part).min(range.end);
                let (store, key) = (self.store.clone(), key.clone());
                tasks.spawn(async move {
                    let got = store.get_range(&key, start..end).await;
                    drop(permit);
                    (start, got)
                });
                start = end;
            }
        }
        while let Some(done) = tasks.join_next().await {
            write_range(done, file)?;
        }
        Ok(())
    }

    /// Fetches object `relative` of `size` bytes into `target` (its folder made if missing),
    /// replaced whole at the end: a large one in ranges, several at once.
    pub(crate) async fn fetch(&self, relative: &str, size: u64, target: &Path) -> Result<()> {
        self.fetch_within(relative, size, target, &self.permits()).await
    }

    async fn fetch_within(
        &self,
        relative: &str,
        size: u64,
        target: &Path,
        permits: &Permits,
    ) -> Result<()> {
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = target.with_file_name(format!(".tmp_fetch_{name}_{}", std::process::id()));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).at(parent)?;
        }
        let file = std::fs::File::create(&tmp).at(&tmp)?;
        let fetched = async {
            // (An empty object is an empty file: nothing to fetch.)
            self.fetch_ranges_within(relative, std::iter::once(0..size), &file, permits).await?;
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
    pub(crate) async fn upload(&self, relative: &str, file: &Path) -> Result<()> {
        self.upload_within(relative, file, &self.permits()).await
    }

    /// Uploads `file` as `relative`, each request holding one of `permits` (which the files of
    /// one folder share): one put when it fits in a part, else a multipart upload whose parts
    /// are read from the file as permits free up (in memory: a part per permit at most), S3's
    /// 10,000 parts at most (see [`part_bytes`]). Every request carries its body's SHA-256
    /// (signed payloads), which the store checks.
    async fn upload_within(&self, relative: &str, file: &Path, permits: &Permits) -> Result<()> {
        let size = std::fs::metadata(file).at(file)?.len();
        let part = part_bytes(size, self.connections());
        let key = self.key(relative);
        let failed = |e| self.failed("upload", e);
        if size <= part {
            let _permit = permits.acquire().await.map_err(|_| cancelled())?;
            let bytes = read_part(file, 0, size).await?;
            self.store.put(&key, bytes.into()).await.map_err(failed)?;
            return Ok(());
        }
        let mut upload = self.store.put_multipart(&key).await.map_err(failed)?;
        let mut parts = tokio::task::JoinSet::new();
        let check =
            |done: std::result::Result<object_store::Result<()>, tokio::task::JoinError>| {
                done.map_err(|e| Error::Storage(format!("a part's upload: {e}")))?.map_err(failed)
            };
        let sent = async {
            for offset in (0..size).step_by(part as usize) {
                // Closed when a sibling file's upload failed: this one is given up too.
                let permit = permits.clone().acquire_owned().await.map_err(|_| cancelled())?;
                // A part that failed ends the upload before more are read.
                while let Some(done) = parts.try_join_next() {
                    check(done)?;
                }
                let bytes = read_part(file, offset, part.min(size - offset)).await?;
                let put = upload.put_part(bytes.into());
                parts.spawn(async move {
                    let put = put.await;
                    drop(permit);
                    put
                });
            }
            while let Some(done) = parts.join_next().await {
                check(done)?;
            }
            upload.complete().await.map_err(failed)
        }
        .await;
        if sent.is_err() {
            parts.abort_all();
            let _ = upload.abort().await;
        }
        sent.map(drop)
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
        let (last, first): (Vec<_>, Vec<_>) =
            files.into_iter().map(|(relative, ..)| relative).partition(|r| r == "metadata.json");
        let permits = self.permits();
        blocking(async {
            let mut uploads = tokio::task::JoinSet::new();
            for relative in first {
                let (folder, file, permits) = (self.clone(), dir.join(&relative), permits.clone());
                uploads
                    .spawn(async move { folder.upload_within(&relative, &file, &permits).await });
            }
            // The first failure closes the permits: the other files' uploads stop at their
            // next request and abort their multipart uploads, so the store keeps no parts.
            let mut failure = None;
            while let Some(done) = uploads.join_next().await {
                let done = done.map_err(|e| Error::Storage(format!("an upload: {e}"))).flatten();
                if let (Err(e), None) = (done, &failure) {
                    permits.close();
                    failure = Some(e);
                }
            }
            if let Some(e) = failure {
                return Err(e);
            }
            for relative in last {
                self.upload_within(&relative, &dir.join(&relative), &permits).await?;
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
    pub(crate) async fn delete(&self, relative: &str) -> Result<()> {
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

/// Whether the file `target` is as new as an object written at `written` (milliseconds since
/// the epoch).
pub(crate) fn is_current(target: &Path, written: i64) -> bool {
    std::fs::metadata(target)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .is_some_and(|d| d.as_millis() as i64 >= written)
}

/// For a path inside a checkpoint folder (`T_1/checkpoint_000002/model.safetensors`, or a
/// trial's exploited checkpoint), the folder and the path in it.
pub(crate) fn split_checkpoint(relative: &str) -> Option<(&str, &str)> {
    let mut at = 0;
    for part in relative.split('/') {
        at += part.len();
        if part.starts_with("checkpoint_") || part == super::checkpoint::EXPLOITED_DIR {
            return relative
                .get(at + 1..)
                .filter(|rest| !rest.is_empty())
                .map(|rest| (&relative[..at], rest));
        }
        at += 1;
    }
    None
}

/// `len` bytes of `file` from `offset`.
async fn read_part(file: &Path, offset: u64, len: u64) -> Result<Vec<u8>> {
    let file = file.to_owned();
    let read = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0; len as usize];
        std::fs::File::open(&file).and_then(|f| f.read_exact_at(&mut bytes, offset)).at(&file)?;
        Ok(bytes)
    });
    read.await.map_err(|e| Error::Storage(format!("reading a part: {e}")))?
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

/// A file to mirror: its path relative to the top, size, modification time, and whether its
/// folder was uploaded whole by the rank that wrote it.
pub(crate) type Found = (String, u64, SystemTime, bool);

/// Every file under `dir` but rtune's own (a name starting with a dot, files or folders).
pub(crate) fn walk(dir: &Path, prefix: &str, out: &mut Vec<Found>) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever an object's size up to S3's largest (5 TiB) and the connections, its parts are
    /// 5 MiB to 5 GiB and at most 10,000 of them; a 5 GiB checkpoint file goes in 320 parts of
    /// 16 MiB, a 64 MiB one in 13 of 5 MiB over 16 connections (4 of 16 MiB over 4).
    #[test]
    fn parts_fit_s3s_limits() {
        let sizes = [0, 1, 16 << 20, (16 << 20) + 1, 64 << 20, 5 << 30, 157 << 30, 5 << 40];
        for (size, connections) in sizes.into_iter().flat_map(|s| [(s, 1), (s, 16), (s, 256)]) {
            let part = part_bytes(size, connections);
            assert!(size.div_ceil(part) <= MAX_PARTS, "{size}: {part}");
            assert!((5 << 20..=5 << 30).contains(&part), "{size}: {part}");
        }
        let parts = |size: u64, connections| size.div_ceil(part_bytes(size, connections));
        assert_eq!((part_bytes(5 << 30, 16), parts(5 << 30, 16)), (16 << 20, 320));
        assert_eq!(parts(200 << 30, 16), 9_753);
        assert_eq!((parts(64 << 20, 16), parts(64 << 20, 4)), (13, 4));
        assert_eq!(parts(256 << 20, 16), 16);
    }

    #[test]
    fn checkpoint_files_are_told_by_their_folder() {
        let cases = [
            (
                "T_1/checkpoint_000002/model.safetensors",
                Some(("T_1/checkpoint_000002", "model.safetensors")),
            ),
            (
                "T_1/checkpoint_000002/zero/0.safetensors",
                Some(("T_1/checkpoint_000002", "zero/0.safetensors")),
            ),
            (
                "T_1/exploited_checkpoint/metadata.json",
                Some(("T_1/exploited_checkpoint", "metadata.json")),
            ),
            ("T_1/checkpoint_000002", None),
            ("T_1/result.json", None),
            ("tuner.json", None),
        ];
        for (path, split) in cases {
            assert_eq!(split_checkpoint(path), split, "{path}");
        }
    }

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
}
