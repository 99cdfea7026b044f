//! One live driver per experiment: its lease.
//!
//! A driver takes the experiment's lease before it touches any file of it (`Tuner::fit` of a
//! new sweep as it makes the directory, `Tuner::restore` before it reads anything back, and so
//! `rtune run`, `resume` and `slurm`), renews it while the sweep runs and gives it back when
//! the sweep ends. Another driver is refused with [`Error::Held`], which names the holder. A
//! lease whose holder is dead is taken over without asking:
//!
//! * a holder on this machine (the same host name and boot) is alive while its pid names a
//!   running process that started when the holder did: a pid the kernel gave to another
//!   process since does not keep the lease;
//! * a holder elsewhere (a file system shared between hosts, an object store) is alive while it
//!   renews the lease: one not renewed for [`EXPIRES_AFTER_S`] is dead (the hosts' clocks must
//!   agree to well within that).
//!
//! Locally the lease is `.driver_lease.json` in the experiment directory, read and replaced
//! under an exclusive `flock` of `.driver_lease.lock` (dot names: never mirrored to a store).
//! For an experiment on an object store, its staging copy on this machine has that lease, and
//! the experiment's folder in the store has the object `.driver_lease.json`, written on a
//! condition (created if absent, replaced if unchanged since it was read) where the store
//! checks conditions, else written and read back. A driver that finds its lease taken while
//! it runs (it was thought dead: a node cut off from the store) interrupts its sweep, which
//! ends with [`Error::LeaseLost`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::control::Control;
use crate::error::{Error, IoContext, Result};
use crate::storage::remote::{self, Put, Remote, Version, When};
use crate::sys::{hostname, process_start, unix_time};

/// The lease in the experiment directory, and the object in its folder on a store.
pub const LEASE_FILE: &str = ".driver_lease.json";

/// What is locked while the local lease is read and replaced.
const LOCK_FILE: &str = ".driver_lease.lock";

/// How often a driver renews its lease.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(10);

/// A lease held from another machine is dead after this many seconds without a renewal.
pub(crate) const EXPIRES_AFTER_S: f64 = 60.0;

/// Who holds a lease: the driver's process, when it took the lease and last renewed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    /// The boot of `host` the process runs in (`/proc/sys/kernel/random/boot_id`).
    pub(crate) boot_id: String,
    pub pid: u32,
    /// When the process started (clock ticks after boot: `/proc/PID/stat`'s starttime).
    pub(crate) pid_start: u64,
    /// Seconds since the Unix epoch: taken, and last renewed.
    pub since: f64,
    pub(crate) renewed: f64,
    pub(crate) expires_after_s: f64,
    /// This holding's own mark: a lease that no longer has it was taken over.
    pub token: String,
}

impl Holder {
    /// This process, holding a lease from now.
    fn this_process() -> Holder {
        let pid = std::process::id();
        let now = unix_time();
        Holder {
            host: hostname(),
            boot_id: boot_id(),
            pid,
            pid_start: process_start(pid).unwrap_or_default(),
            since: now,
            renewed: now,
            expires_after_s: EXPIRES_AFTER_S,
            token: format!("{:032x}", rand::random::<u128>()),
        }
    }

    /// Whether the driver holding the lease is alive (see the module's docs).
    pub(crate) fn is_alive(&self) -> bool {
        self.alive_at(unix_time())
    }

    fn alive_at(&self, now: f64) -> bool {
        if self.on_this_machine() {
            return process_start(self.pid) == Some(self.pid_start);
        }
        now < self.renewed + self.expires_after_s
    }

    fn on_this_machine(&self) -> bool {
        self.host == hostname() && self.boot_id == boot_id()
    }
}

/// `host vm1, pid 4242, since 2026-11-28 10:01:02 UTC`, and for a holder on another machine
/// when it last renewed.
impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [y, mo, d, h, mi, s] = crate::sys::utc_fields(self.since);
        write!(
            f,
            "host {}, pid {}, since {y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC",
            self.host, self.pid
        )?;
        if !self.on_this_machine() {
            let ago = (unix_time() - self.renewed).max(0.0);
            write!(
                f,
                "; renewed {ago:.0} s ago, taken over once not renewed for {:.0} s",
                self.expires_after_s
            )?;
        }
        Ok(())
    }
}

/// This boot of this machine ("" where the kernel does not say).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}

/// The live driver holding the lease of the experiment in the local directory (or staging
/// copy) `dir`, if one does.
pub fn live_holder(dir: &Path) -> Option<Holder> {
    read_local(dir).filter(Holder::is_alive)
}

/// Refuses ([`Error::Held`]) an experiment at `path` (a directory, or an `s3://` URL: its
/// staging copy's lease and the store's) that a live driver holds; takes nothing. What a
/// command checks before it writes anything, the lease itself being taken later.
pub fn check_free(path: &Path) -> Result<()> {
    let (dir, store) = places(path)?;
    let shown = path.display().to_string();
    if let Some(holder) = live_holder(&dir) {
        return Err(held(&shown, &holder));
    }
    match store {
        Some(store) => match remote::blocking(read_store(&store))? {
            Some((Some(holder), _)) if holder.is_alive() => Err(held(&shown, &holder)),
            _ => Ok(()),
        },
        None => Ok(()),
    }
}

/// Where the lease of the experiment at `path` is: its directory (for an `s3://` URL, its
/// staging copy here) and, for one on a store, the store's folder too.
fn places(path: &Path) -> Result<(PathBuf, Option<Remote>)> {
    match path.to_str().filter(|_| remote::is_url(path)) {
        Some(url) => {
            let store = Remote::parse(url)?;
            Ok((store.staging(), Some(store)))
        }
        None => {
            let dir = crate::config::expand_home(path);
            let store = crate::storage::staging::marked(&dir).transpose()?;
            Ok((dir, store))
        }
    }
}

/// The holder named in `dir`'s lease file; None when there is none, or it is unreadable (it
/// was not written by rtune: taken over).
fn read_local(dir: &Path) -> Option<Holder> {
    let text = std::fs::read(dir.join(LEASE_FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Runs `f` while holding the exclusive lock of `dir`'s lease.
fn locked<T>(dir: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    crate::storage::locked(&dir.join(LOCK_FILE), f)
}

fn held(path: &str, holder: &Holder) -> Error {
    Error::Held { path: path.to_owned(), holder: holder.to_string() }
}

fn write_local(dir: &Path, me: &Holder) -> Result<()> {
    let json = serde_json::to_vec_pretty(me).expect("a holder serialises");
    crate::storage::replace_file(&dir.join(LEASE_FILE), &json)
}

fn take_local(dir: &Path, me: &Holder) -> Result<()> {
    locked(dir, || {
        if let Some(holder) = read_local(dir) {
            if holder.is_alive() {
                return Err(held(&dir.display().to_string(), &holder));
            }
            tracing::info!(
                "{}: the driver that held it is gone ({holder}); taking it over",
                dir.display()
            );
        }
        write_local(dir, me)
    })
}

/// Renews `me`'s lease of `dir`; the holder that took it over, if one did.
fn renew_local(dir: &Path, me: &Holder) -> Result<Option<Holder>> {
    locked(dir, || match read_local(dir) {
        Some(holder) if holder.token != me.token => Ok(Some(holder)),
        // Ours, or gone (the file was removed by hand): ours again.
        _ => write_local(dir, me).map(|()| None),
    })
}

fn release_local(dir: &Path, me: &Holder) -> Result<()> {
    locked(dir, || {
        if read_local(dir).is_some_and(|h| h.token == me.token) {
            let file = dir.join(LEASE_FILE);
            std::fs::remove_file(&file).at(&file)?;
        }
        Ok(())
    })
}

/// The lease object in `store` and its version; None when there is none. An object that is
/// not a holder (not written by rtune) reads as a dead holder's.
async fn read_store(store: &Remote) -> Result<Option<(Option<Holder>, Version)>> {
    let got = store.get_small(LEASE_FILE).await?;
    Ok(got.map(|(bytes, version)| (serde_json::from_slice(&bytes).ok(), version)))
}

/// Writes `me` as the lease in `store` if `when` holds, and reads it back: whether it is
/// `me`'s now, and its version. A store that checks no conditions is written regardless; the
/// reading back (and every renewal's) tells a race lost.
async fn put_store(store: &Remote, me: &Holder, when: When) -> Result<Option<Version>> {
    let json = serde_json::to_vec_pretty(me).expect("a holder serialises");
    match store.put_small(LEASE_FILE, json.clone(), when).await? {
        Put::Refused => return Ok(None),
        Put::Done(_) => {}
        Put::Unsupported => {
            store.put_small(LEASE_FILE, json, When::Always).await?;
        }
    }
    Ok(match read_store(store).await? {
        Some((Some(holder), version)) if holder.token == me.token => Some(version),
        _ => None,
    })
}

async fn take_store(store: &Remote, me: &Holder) -> Result<Version> {
    // Each round lost to another driver writing at the same moment is looked at again.
    for _ in 0..5 {
        let when = match read_store(store).await? {
            None => When::Absent,
            Some((Some(holder), _)) if holder.token != me.token && holder.is_alive() => {
                return Err(held(store.url(), &holder));
            }
            Some((holder, version)) => {
                if let Some(holder) = holder {
                    tracing::info!(
                        "{}: the driver that held it is gone ({holder}); taking it over",
                        store.url()
                    );
                }
                When::Is(version)
            }
        };
        if let Some(version) = put_store(store, me, when).await? {
            return Ok(version);
        }
    }
    Err(Error::Storage(format!(
        "{}: the driver lease changed hands five times while this driver tried to take it",
        store.url()
    )))
}

/// Renews `me`'s lease in `store`; the holder that took it over, if one did.
async fn renew_store(store: &Remote, me: &Holder, version: &mut Version) -> Result<Option<Holder>> {
    match read_store(store).await? {
        Some((Some(holder), _)) if holder.token != me.token => return Ok(Some(holder)),
        Some((_, now)) => *version = now,
        None => {}
    }
    match put_store(store, me, When::Is(version.clone())).await? {
        Some(written) => {
            *version = written;
            Ok(None)
        }
        // Written over by another driver since it was read: that one holds it now.
        None => Ok(read_store(store)
            .await?
            .and_then(|(holder, _)| holder)
            .filter(|h| h.token != me.token)),
    }
}

async fn release_store(store: &Remote, me: &Holder) -> Result<()> {
    if let Some((Some(holder), _)) = read_store(store).await?
        && holder.token == me.token
    {
        store.delete(LEASE_FILE).await?;
    }
    Ok(())
}

/// The lease of one experiment, held by this process until dropped (given back then), renewed
/// by a thread of its own meanwhile.
pub(crate) struct Lease {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    me: Mutex<Holder>,
    /// The directory (a staging copy, for an experiment on a store) and what is shown of it.
    dir: PathBuf,
    shown: String,
    store: Option<(Remote, Mutex<Version>)>,
    /// Who took the lease over while this process held it.
    lost: Mutex<Option<String>>,
    /// The sweep interrupted when the lease is lost.
    control: Mutex<Option<Control>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lease({})", self.shared.shown)
    }
}

impl Lease {
    /// Takes the lease of the experiment at `path`: a directory, or an `s3://` URL (its staging
    /// copy's lease, then the store's). Creates nothing but the staging folder and the lease.
    pub fn take(path: &Path) -> Result<Lease> {
        let (dir, store) = places(path)?;
        if store.is_some() {
            std::fs::create_dir_all(&dir).at(&dir)?;
        }
        Lease::take_with(&dir, store.as_ref())
    }

    /// Takes the lease of the experiment in the directory `dir` (which must exist) and, when
    /// it is the staging copy of one on a store, of `store`'s.
    pub(crate) fn take_with(dir: &Path, store: Option<&Remote>) -> Result<Lease> {
        Lease::renewed_every(dir, store, RENEW_EVERY)
    }

    fn renewed_every(dir: &Path, store: Option<&Remote>, every: Duration) -> Result<Lease> {
        let me = Holder::this_process();
        take_local(dir, &me)?;
        let store = match store {
            None => None,
            Some(store) => match remote::blocking(take_store(store, &me)) {
                Ok(version) => Some((store.clone(), Mutex::new(version))),
                Err(e) => {
                    if let Err(again) = release_local(dir, &me) {
                        tracing::warn!("{again}");
                    }
                    return Err(e);
                }
            },
        };
        let shown =
            store.as_ref().map_or_else(|| dir.display().to_string(), |(s, _)| s.url().to_owned());
        let shared = Arc::new(Shared {
            me: Mutex::new(me),
            dir: dir.to_owned(),
            shown,
            store,
            lost: Mutex::new(None),
            control: Mutex::new(None),
        });
        let (stop, stopped) = mpsc::channel();
        let renewing = shared.clone();
        let renewer = std::thread::Builder::new()
            .name("rtune-lease".into())
            .spawn(move || renewing.renew_until(stopped, every))
            .map_err(|e| Error::io(dir, e))?;
        Ok(Lease { shared, stop: Some(stop), renewer: Some(renewer) })
    }

    /// Interrupts `control`'s sweep if the lease is taken over while it runs.
    pub(crate) fn guard(&self, control: Control) {
        *self.shared.control.lock().unwrap_or_else(|p| p.into_inner()) = Some(control);
    }

    /// The error a sweep ends with when another driver took its lease over.
    pub fn lost(&self) -> Option<Error> {
        let holder = self.shared.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        Some(Error::LeaseLost { path: self.shared.shown.clone(), holder })
    }
}

impl Shared {
    fn renew_until(&self, stop: mpsc::Receiver<()>, every: Duration) {
        while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(every) {
            let me = {
                let mut me = self.me.lock().unwrap_or_else(|p| p.into_inner());
                me.renewed = unix_time();
                me.clone()
            };
            let taken = renew_local(&self.dir, &me).and_then(|taken| match (taken, &self.store) {
                (Some(holder), _) => Ok(Some(holder)),
                (None, None) => Ok(None),
                (None, Some((store, version))) => {
                    let mut version = version.lock().unwrap_or_else(|p| p.into_inner());
                    remote::blocking(renew_store(store, &me, &mut version))
                }
            });
            match taken {
                Ok(None) => {}
                // Still ours for all the world knows: the next renewal tries again.
                Err(e) => tracing::warn!("cannot renew the driver lease of {}: {e}", self.shown),
                Ok(Some(holder)) => {
                    tracing::error!(
                        "another driver took over {} ({holder}): this one stops its sweep",
                        self.shown
                    );
                    *self.lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(holder.to_string());
                    if let Some(control) = &*self.control.lock().unwrap_or_else(|p| p.into_inner())
                    {
                        control.interrupt();
                    }
                    return;
                }
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        if self.shared.lost.lock().map(|l| l.is_some()).unwrap_or(true) {
            return;
        }
        let me = self.shared.me.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some((store, _)) = &self.shared.store
            && let Err(e) = remote::blocking(release_store(store, &me))
        {
            tracing::warn!("cannot give back the driver lease of {}: {e}", store.url());
        }
        if let Err(e) = release_local(&self.shared.dir, &me) {
            tracing::warn!(
                "cannot give back the driver lease of {}: {e}",
                self.shared.dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder_file(dir: &Path, holder: &Holder) {
        std::fs::write(dir.join(LEASE_FILE), serde_json::to_vec(holder).unwrap()).unwrap();
    }

    /// A second lease of one experiment is refused naming the first's holder; once the first
    /// is given back, the experiment can be taken again.
    #[test]
    fn one_holder_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = Lease::take(dir.path()).unwrap();
        let holder = live_holder(dir.path()).expect("held");
        assert_eq!(holder.pid, std::process::id());
        match Lease::take(dir.path()) {
            Err(Error::Held { holder: shown, .. }) => {
                assert!(shown.contains(&format!("pid {}", std::process::id())), "{shown}");
                assert!(shown.starts_with(&format!("host {}", hostname())), "{shown}");
            }
            other => panic!("a second lease: {other:?}"),
        }
        drop(first);
        assert!(live_holder(dir.path()).is_none());
        assert!(!dir.path().join(LEASE_FILE).exists());
        drop(Lease::take(dir.path()).unwrap());
    }

    /// A lease whose process is gone, or whose pid now names a process that started later, is
    /// taken over at once; one of an earlier boot once its renewals have expired.
    #[test]
    fn dead_holders_here_are_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let me = Holder::this_process();
        let stale = [
            Holder { pid: dead_pid, ..me.clone() },
            // This very process, but its start time is another's: the pid was reused.
            Holder { pid_start: me.pid_start + 1, ..me.clone() },
            // An earlier boot's (or another machine's of the same name): by its renewals.
            Holder {
                boot_id: "an earlier boot".into(),
                renewed: me.renewed - EXPIRES_AFTER_S - 1.0,
                ..me.clone()
            },
        ];
        for holder in stale {
            holder_file(dir.path(), &holder);
            assert!(!holder.is_alive(), "{holder:?}");
            let lease = Lease::take(dir.path()).unwrap();
            let now = live_holder(dir.path()).unwrap();
            assert_ne!(now.token, holder.token);
            drop(lease);
        }
        // Not a holder at all: taken over too.
        std::fs::write(dir.path().join(LEASE_FILE), b"{").unwrap();
        drop(Lease::take(dir.path()).unwrap());
    }

    /// A holder on another machine is alive while it renews, and dead once it has not for
    /// its expiry.
    #[test]
    fn holders_elsewhere_live_by_their_renewals() {
        let now = unix_time();
        let far =
            Holder { host: "another-host".into(), renewed: now - 10.0, ..Holder::this_process() };
        assert!(far.alive_at(now));
        assert!(!far.alive_at(now + EXPIRES_AFTER_S));
        let shown = far.to_string();
        assert!(
            shown.contains("host another-host") && shown.contains("renewed 10 s ago"),
            "{shown}"
        );
        let dir = tempfile::tempdir().unwrap();
        holder_file(dir.path(), &far);
        assert!(matches!(Lease::take(dir.path()), Err(Error::Held { .. })));
        holder_file(dir.path(), &Holder { renewed: now - EXPIRES_AFTER_S - 1.0, ..far });
        drop(Lease::take(dir.path()).unwrap());
    }

    /// A driver whose lease was taken over (it was thought dead) finds out at its next
    /// renewal, interrupts its sweep, and leaves the new holder's lease be.
    #[test]
    fn a_lease_taken_over_interrupts_the_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Lease::renewed_every(dir.path(), None, Duration::from_millis(20)).unwrap();
        let control = Control::new();
        lease.guard(control.clone());
        assert!(lease.lost().is_none());
        let other = Holder { host: "another-host".into(), ..Holder::this_process() };
        holder_file(dir.path(), &other);
        let began = std::time::Instant::now();
        while !control.is_interrupted() {
            assert!(began.elapsed() < Duration::from_secs(30), "never noticed");
            std::thread::sleep(Duration::from_millis(10));
        }
        match lease.lost() {
            Some(Error::LeaseLost { holder, .. }) => assert!(holder.contains("another-host")),
            other => panic!("{other:?}"),
        }
        drop(lease);
        assert_eq!(read_local(dir.path()), Some(other), "the new holder's lease stays");
    }
}
