//! The driver's binary on nodes that share no file system with it: node agents run it by the
//! SHA-256 of its content, not by a path of the driver's.
//!
//! A driver that starts a worker on a node first makes sure the head holds its binary
//! ([`ensure_on_head`]: asked once, sent once per head); the agent runs its cached copy
//! (`<cache>/binaries/<sha256>`), fetching it from the head the first time ([`fetch`]). Every
//! copy is checked against the hash before it is renamed into place, so a cached file is whole
//! and is the driver's binary; a worker started from it passes the driver's build id check.
//! `<cache>` is `$RTUNE_CACHE`, else `~/.cache/rtune` (a head and an agent on one machine share
//! it: the agent then finds the file the head stored).
//!
//! Every rebuilt driver is a new binary (a debug build is a few hundred MB), so the cache is
//! kept to [`CACHE_BUDGET`]: each binary that arrives makes room by removing the binaries used
//! least recently ([`prune`]), never one used in the last [`IN_USE`] (a worker may be about to
//! start from it). Using a cached binary marks it used.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};
use tokio_stream::StreamExt;

use crate::cluster::client::{Client, status_error};
use crate::error::{Error, IoContext, Result};
use crate::proto::{BinaryChunk, BinaryId};

/// What one chunk of a binary carries over gRPC (well under tonic's 4 MiB message limit).
const CHUNK_BYTES: usize = 1 << 20;

/// How many bytes of binaries a cache keeps, beyond those in use (4 GiB: about twenty debug
/// builds).
pub(crate) const CACHE_BUDGET: u64 = 4 << 30;

/// A binary used this recently stays cached whatever the budget says.
pub(crate) const IN_USE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Where cached binaries live on this machine.
pub(crate) fn cache_dir() -> PathBuf {
    crate::config::cache_root().join("binaries")
}

/// The copy of the binary `sha256` cached in `dir`, if it is there (marked used now).
pub fn cached(dir: &Path, sha256: &str) -> Option<PathBuf> {
    let path = dir.join(checked_name(sha256).ok()?);
    let file = std::fs::File::open(&path).ok()?;
    // Marks it used; failing to is harmless (it only makes it older for `prune`).
    let _ = file.set_modified(std::time::SystemTime::now());
    file.metadata().ok()?.is_file().then_some(path)
}

/// Makes `dir` hold at most `budget` bytes of binaries: removes the least recently used ones
/// (by modification time, which [`cached`] and [`receive`] set) until the rest fit, except
/// those used within `in_use`; also removes the partial files of receptions that died more
/// than `in_use` ago. Returns how many bytes it freed. What cannot be read or removed is left.
pub(crate) fn prune(dir: &Path, budget: u64, in_use: std::time::Duration) -> u64 {
    let now = std::time::SystemTime::now();
    let age = |m: &std::fs::Metadata| {
        m.modified().ok().and_then(|t| now.duration_since(t).ok()).unwrap_or_default()
    };
    let mut binaries = Vec::new();
    let mut freed = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let (path, name) = (entry.path(), entry.file_name().to_string_lossy().into_owned());
        let Ok(meta) = entry.metadata() else { continue };
        if name.starts_with(".tmp-") && age(&meta) > in_use {
            freed += std::fs::remove_file(&path).map_or(0, |()| meta.len());
        } else if meta.is_file() && checked_name(&name).is_ok() {
            binaries.push((age(&meta), meta.len(), path));
        }
    }
    // Newest first: what comes after the budget is used up goes.
    binaries.sort_by_key(|(age, ..)| *age);
    let mut kept = 0u64;
    for (age, size, path) in binaries {
        if kept + size <= budget || age < in_use {
            kept += size;
        } else if std::fs::remove_file(&path).is_ok() {
            tracing::info!("removed the cached binary {} (not used for {age:.0?})", path.display());
            freed += size;
        }
    }
    freed
}

/// A hash as a file name: 64 hex digits, nothing else (it comes over the wire).
fn checked_name(sha256: &str) -> Result<&str> {
    match sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        true => Ok(sha256),
        false => Err(Error::Protocol(format!("{sha256:?} is not a SHA-256 in hex"))),
    }
}

/// The SHA-256 (hex) of the file at `path`.
pub(crate) fn sha256_of(path: &Path) -> Result<String> {
    let mut hasher = Sha256::new();
    read_chunks(path, "", |chunk| {
        hasher.update(&chunk.data);
        true
    })?;
    Ok(crate::sys::build_id::hex(&hasher.finalize()))
}

/// This process's executable and the SHA-256 of its content (hashed once, on first use).
pub async fn own() -> Result<(PathBuf, String)> {
    static OWN: OnceLock<(PathBuf, String)> = OnceLock::new();
    if let Some(own) = OWN.get() {
        return Ok(own.clone());
    }
    let hashed = tokio::task::spawn_blocking(|| {
        let exe = std::env::current_exe().map_err(|e| Error::io("current executable", e))?;
        let sha = sha256_of(&exe)?;
        Ok::<_, Error>((exe, sha))
    })
    .await
    .map_err(|e| Error::Protocol(format!("hashing the executable: {e}")))??;
    Ok(OWN.get_or_init(|| hashed).clone())
}

/// Makes sure the head behind `client` holds this process's binary; returns its hash. Callers
/// take turns, so ranks started together send it once.
pub(crate) async fn ensure_on_head(client: &mut Client) -> Result<String> {
    static SENDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let (exe, sha) = own().await?;
    let _turn = SENDING.lock().await;
    let id = BinaryId { sha256: sha.clone() };
    if client.has_binary(id).await.map_err(status_error)?.into_inner().has {
        return Ok(sha);
    }
    let (chunks, rx) = tokio::sync::mpsc::channel::<BinaryChunk>(4);
    let reader = {
        let (exe, sha) = (exe.clone(), sha.clone());
        tokio::task::spawn_blocking(move || {
            read_chunks(&exe, &sha, |chunk| chunks.blocking_send(chunk).is_ok())
        })
    };
    let sent = client.put_binary(tokio_stream::wrappers::ReceiverStream::new(rx)).await;
    reader.await.map_err(|e| Error::Protocol(format!("reading the executable: {e}")))??;
    sent.map_err(status_error)?;
    tracing::info!("sent this binary ({}, sha256 {sha}) to the head", exe.display());
    Ok(sha)
}

/// Reads the file at `path` as chunks in order, the first naming `sha256` and the file's size
/// (an empty file is one empty chunk), each handed to `each` until it says stop.
fn read_chunks(path: &Path, sha256: &str, mut each: impl FnMut(BinaryChunk) -> bool) -> Result<()> {
    let size = std::fs::metadata(path).at(path)?.len();
    let mut file = std::fs::File::open(path).at(path)?;
    let mut first = true;
    loop {
        let mut data = vec![0u8; CHUNK_BYTES];
        let n = file.read(&mut data).at(path)?;
        if n == 0 && !first {
            return Ok(());
        }
        data.truncate(n);
        let (sha256, size) = if first { (sha256.to_owned(), size) } else { (String::new(), 0) };
        first = false;
        if !each(BinaryChunk { sha256, size, data }) || n == 0 {
            return Ok(());
        }
    }
}

/// Writes the chunks of one binary into the cache `dir`, checked against the hash the first
/// chunk names (and its size); returns its path. What fails leaves nothing in the cache.
pub async fn receive<S, E>(dir: &Path, mut chunks: S) -> Result<PathBuf>
where
    S: tokio_stream::Stream<Item = std::result::Result<BinaryChunk, E>> + Unpin,
    E: std::fmt::Display,
{
    let next = |e: E| Error::Protocol(format!("receiving a binary: {e}"));
    let first = chunks
        .next()
        .await
        .ok_or_else(|| Error::Protocol("an empty binary stream".into()))?
        .map_err(next)?;
    let sha = checked_name(&first.sha256)?.to_owned();
    std::fs::create_dir_all(dir).at(dir)?;
    let target = dir.join(&sha);
    let tmp = dir.join(format!(".tmp-{sha}-{}-{}", std::process::id(), rand::random::<u32>()));
    let written = async {
        let mut file = std::fs::File::create(&tmp).at(&tmp)?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut chunk = Some(first.clone());
        while let Some(c) = chunk {
            hasher.update(&c.data);
            file.write_all(&c.data).at(&tmp)?;
            size += c.data.len() as u64;
            chunk = chunks.next().await.transpose().map_err(next)?;
        }
        file.sync_all().at(&tmp)?;
        let got = crate::sys::build_id::hex(&hasher.finalize());
        if got != sha || size != first.size {
            return Err(Error::Protocol(format!(
                "a binary named {sha} ({} bytes) arrived as {size} bytes with sha256 {got}",
                first.size
            )));
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).at(&tmp)?;
        std::fs::rename(&tmp, &target).at(&target)
    }
    .await;
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    prune(dir, CACHE_BUDGET, IN_USE);
    Ok(target)
}

/// The cached binary `sha256`, fetched from the head first if this machine lacks it. Callers
/// take turns, so workers started together fetch it once.
pub(crate) async fn fetch(head: &str, token: Option<&str>, sha256: &str) -> Result<PathBuf> {
    static FETCHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = FETCHING.lock().await;
    let dir = cache_dir();
    if let Some(path) = cached(&dir, sha256) {
        return Ok(path);
    }
    let mut client = crate::cluster::client::connect_head(head, token).await?;
    let id = BinaryId { sha256: checked_name(sha256)?.to_owned() };
    let stream = client.get_binary(id).await.map_err(status_error)?.into_inner();
    let path = receive(&dir, stream).await?;
    tracing::info!("fetched the driver's binary {sha256} from the head into {}", path.display());
    Ok(path)
}

/// The chunks of the binary `sha256` cached in `dir`, for a `GetBinary` stream.
pub fn send(
    dir: &Path,
    sha256: &str,
) -> Result<tokio::sync::mpsc::Receiver<std::result::Result<BinaryChunk, tonic::Status>>> {
    let path = cached(dir, sha256).ok_or_else(|| {
        Error::Protocol(format!("this head holds no binary {sha256}: a driver sends it first"))
    })?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let sha = sha256.to_owned();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = read_chunks(&path, &sha, |chunk| tx.blocking_send(Ok(chunk)).is_ok()) {
            let _ = tx.blocking_send(Err(tonic::Status::internal(e.to_string())));
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(sha256: &str, size: u64, data: &[u8]) -> std::result::Result<BinaryChunk, String> {
        Ok(BinaryChunk { sha256: sha256.into(), size, data: data.to_vec() })
    }

    /// The cache keeps the binaries used most recently within its budget, and every binary
    /// used within the in-use time whatever the budget; a stale partial file goes, a fresh one
    /// (a reception going on) and files that are not binaries stay. Using a binary renews it.
    #[test]
    fn the_cache_keeps_what_was_used_last_within_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let put = |name: &str, hours_ago: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, [0u8; 100]).unwrap();
            let then = std::time::SystemTime::now() - hour * hours_ago;
            std::fs::File::open(&path).unwrap().set_modified(then).unwrap();
        };
        let sha = |c: char| c.to_string().repeat(64);
        for (c, hours_ago) in [('a', 5), ('b', 4), ('c', 3), ('d', 2), ('e', 0)] {
            put(&sha(c), hours_ago);
        }
        put(".tmp-old", 3);
        put(".tmp-new", 0);
        put("notes.txt", 9);
        // `a` is used now: it is the newest.
        assert!(cached(dir.path(), &sha('a')).is_some());
        // 300 bytes: `a` and `e` (in use) and `d`; `b` and `c` go, with the stale partial file.
        assert_eq!(prune(dir.path(), 300, hour), 300);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".tmp-new", &sha('a'), &sha('d'), &sha('e'), "notes.txt"]);
        // Over the budget only by what is in use: nothing more goes.
        assert_eq!(prune(dir.path(), 100, 3 * hour), 0);
        assert_eq!(prune(dir.path(), 100, hour), 100, "d goes once it is out of use");
    }

    /// A binary is cached only whole and as named: a wrong hash or size leaves nothing.
    #[tokio::test]
    async fn received_binaries_are_checked_before_they_are_cached() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("binaries");
        let content = b"#!/bin/sh\necho hello\n";
        let file = dir.path().join("source");
        std::fs::write(&file, content).unwrap();
        let sha = sha256_of(&file).unwrap();
        let (a, b) = content.split_at(7);

        let wrong = tokio_stream::iter(vec![chunk(&sha, 22, a), chunk("", 0, b"tampered")]);
        assert!(receive(&cache, wrong).await.unwrap_err().to_string().contains("arrived as"));
        let short = tokio_stream::iter(vec![chunk(&sha, 99, a), chunk("", 0, b)]);
        assert!(receive(&cache, short).await.is_err());
        assert!(receive(&cache, tokio_stream::iter(vec![chunk("../x", 1, b"x")])).await.is_err());
        assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0, "nothing left behind");

        let good = tokio_stream::iter(vec![chunk(&sha, content.len() as u64, a), chunk("", 0, b)]);
        let path = receive(&cache, good).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), content);
        assert_eq!(cached(&cache, &sha), Some(path.clone()));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o755);

        // What the head sends back is the same bytes, hash first.
        let mut rx = send(&cache, &sha).unwrap();
        let mut back = Vec::new();
        let mut first = None;
        while let Some(c) = rx.recv().await {
            let c = c.unwrap();
            first.get_or_insert((c.sha256.clone(), c.size));
            back.extend(c.data);
        }
        assert_eq!(back, content);
        assert_eq!(first, Some((sha, content.len() as u64)));
    }
}
