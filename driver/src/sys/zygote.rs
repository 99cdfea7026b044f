//! A fork server for worker processes ("zygote"): a copy of the workers' binary (the driver's
//! own; on a node agent, each driver binary it fetched), started once per process and binary,
//! that has done everything a process start costs (loading libtorch and its static
//! initialisation: about a quarter of a second of CPU here) and then forks a fresh worker for
//! each request. A forked worker is a new process: nothing of an earlier worker (environment,
//! working directory, libtorch threads or seeds, memory) can reach it, because the zygote itself
//! never runs a train function; only the cost of the start is shared.
//!
//! The zygote keeps one child forked ahead, a spare, waiting on a pipe: a request is written to
//! the spare, which becomes the worker at once, and the next spare is forked after the reply, so
//! a trial's start does not wait for the fork (4 to 6 ms for a process of libtorch's size on a
//! busy machine).
//!
//! The zygote reads requests from its stdin and answers on its stdout, one JSON line each. It is
//! single-threaded (forking a process with other threads would copy their locks, not them; it
//! refuses to serve if it finds another thread), waits for its children through a signalfd,
//! and reports their exits with the raw wait status. Workers die with the zygote
//! (`PR_SET_PDEATHSIG`), and the zygote with the driver's spawner thread, like any worker.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;
use tokio::sync::oneshot;

/// Set in the zygote's environment: `rtune::init()` turns such a process into the fork server.
pub(crate) const ZYGOTE_ENV: &str = "RTUNE_ZYGOTE";

/// Set to `0` to start every worker with a fresh exec instead.
pub(crate) const WARM_START_ENV: &str = "RTUNE_WARM_START";

#[derive(Debug, Serialize, Deserialize)]
struct Request {
    id: u64,
    env: Vec<(String, String)>,
    stdout: PathBuf,
    stderr: PathBuf,
    /// The worker ignores SIGTERM (see `cluster::node::NodeConfig::workers_ignore_sigterm`).
    #[serde(default)]
    ignore_sigterm: bool,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    Spawned {
        id: u64,
        pid: i32,
    },
    Failed {
        id: u64,
        error: String,
    },
    /// A child exited; `status` is the raw wait status.
    Exited {
        pid: i32,
        status: i32,
    },
}

// ------------------------------------------------------------------------------- zygote side

/// In the zygote process (its environment says so): serves fork requests until the driver
/// goes, then exits; each forked child runs `run_worker`, which ends the process. Returns at
/// once in any other process.
pub fn serve_if_asked(run_worker: fn() -> !) {
    if std::env::var_os(ZYGOTE_ENV).is_none() {
        return;
    }
    let code = match serve(run_worker) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rtune fork server: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn serve(run_worker: fn() -> !) -> std::io::Result<()> {
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
    let single = threads == 1;
    let sfd = block_sigchld_into_signalfd()?;
    let mut pending = Vec::<u8>::new();
    let mut out = std::io::stdout();
    let mut spare: Option<Spare> = None;
    loop {
        let mut fds = [
            libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: sfd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            drain_signalfd(&sfd);
            for (pid, status) in reap() {
                if spare.as_ref().is_some_and(|s| s.pid == pid) {
                    spare = None; // it died waiting (it asks for nothing: the driver never knew it)
                    continue;
                }
                send(&mut out, &Reply::Exited { pid, status })?;
            }
        }
        if fds[0].revents != 0 {
            let mut buf = [0u8; 65536];
            // SAFETY: reading into a buffer we own, at most its length.
            let got = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            if got <= 0 {
                // The driver is gone (or closed us): so are we; our children follow.
                return Ok(());
            }
            pending.extend_from_slice(&buf[..got as usize]);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let request: Request = serde_json::from_slice(&line)
                    .map_err(|e| std::io::Error::other(format!("bad request: {e}")))?;
                let reply = if single {
                    match spare.take().map(|s| s.start(&request)) {
                        Some(Ok(pid)) => Reply::Spawned { id: request.id, pid },
                        // A spare that could not be handed the request is gone (killed when
                        // its pipe closed): fork one now.
                        Some(Err(_)) | None => fork_worker(&request, &sfd, run_worker),
                    }
                } else {
                    Reply::Failed {
                        id: request.id,
                        error: format!("the fork server has {threads} threads, not 1"),
                    }
                };
                send(&mut out, &reply)?;
            }
            if single && spare.is_none() {
                spare = Spare::fork(&sfd, run_worker).ok();
            }
        }
    }
}

/// A child forked ahead of any request, blocked on a pipe until the zygote writes it one.
struct Spare {
    pid: i32,
    requests: std::fs::File,
}

impl Spare {
    fn fork(sfd: &OwnedFd, run_worker: fn() -> !) -> std::io::Result<Spare> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array we own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors are new and ours alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let zygote = std::process::id() as i32;
        let pid = fork()?;
        if pid > 0 {
            drop(read);
            return Ok(Spare { pid, requests: std::fs::File::from(write) });
        }
        // The child: wait for its request (none, and the zygote gone: the pipe ends), then become
        // the worker it describes.
        drop(write);
        if die_with_zygote(zygote).is_err() {
            // SAFETY: _exit ends this child at once (no destructors of the zygote's copy).
            unsafe { libc::_exit(0) }
        }
        let request = std::io::BufRead::lines(std::io::BufReader::new(std::fs::File::from(read)))
            .next()
            .and_then(|line| line.ok())
            .and_then(|line| serde_json::from_str::<Request>(&line).ok());
        let Some(request) = request else {
            // SAFETY: _exit ends this child at once (no destructors of the zygote's copy).
            unsafe { libc::_exit(0) }
        };
        run_as_worker(&request, sfd, zygote, run_worker)
    }

    /// Hands the spare `request`; its pid, now the worker's.
    fn start(mut self, request: &Request) -> std::io::Result<i32> {
        let mut line = serde_json::to_vec(request).expect("a request serialises");
        line.push(b'\n');
        self.requests.write_all(&line)?;
        Ok(self.pid)
    }
}

fn send(out: &mut std::io::Stdout, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).expect("a reply serialises");
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// SIGCHLD blocked and readable from a signalfd instead.
fn block_sigchld_into_signalfd() -> std::io::Result<OwnedFd> {
    // SAFETY: plain libc calls on a sigset we own; the fd returned is ours to own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

fn drain_signalfd(sfd: &OwnedFd) {
    let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
    // SAFETY: reads into a buffer we own; the fd is non-blocking, so this ends.
    while unsafe { libc::read(sfd.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) } > 0 {}
}

/// Every exited child, with its raw wait status.
fn reap() -> Vec<(i32, i32)> {
    let mut done = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into an int we own.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return done;
        }
        done.push((pid, status));
    }
}

/// Forks this (single-threaded) process: the child's pid, 0 in the child.
fn fork() -> std::io::Result<i32> {
    // SAFETY: this process is single-threaded (checked), so the child gets a consistent copy.
    match unsafe { libc::fork() } {
        pid if pid < 0 => Err(std::io::Error::last_os_error()),
        pid => Ok(pid),
    }
}

/// Forks a worker for `request`; in the child, never returns.
fn fork_worker(request: &Request, sfd: &OwnedFd, run_worker: fn() -> !) -> Reply {
    let zygote = std::process::id() as i32;
    match fork() {
        Err(e) => Reply::Failed { id: request.id, error: e.to_string() },
        Ok(0) => run_as_worker(request, sfd, zygote, run_worker),
        Ok(pid) => Reply::Spawned { id: request.id, pid },
    }
}

/// In a child of the zygote: becomes the worker `request` describes and runs it.
fn run_as_worker(request: &Request, sfd: &OwnedFd, zygote: i32, run_worker: fn() -> !) -> ! {
    if let Err(e) = become_worker(request, sfd, zygote) {
        eprintln!("rtune worker: cannot start from the fork server: {e}");
        // SAFETY: _exit ends this child at once (no destructors of the zygote's copy).
        unsafe { libc::_exit(2) }
    }
    run_worker()
}

/// In a child of the zygote: it dies with the zygote from now on.
fn die_with_zygote(zygote: i32) -> std::io::Result<()> {
    // SAFETY: plain libc calls in the single-threaded child.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // The zygote may have died before the prctl: then nothing would kill us later.
        if libc::getppid() != zygote {
            return Err(std::io::Error::other("the fork server is gone"));
        }
    }
    Ok(())
}

fn become_worker(request: &Request, sfd: &OwnedFd, zygote: i32) -> std::io::Result<()> {
    die_with_zygote(zygote)?;
    // SAFETY: plain libc calls in the single-threaded child.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::close(sfd.as_raw_fd());
        if request.ignore_sigterm {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        }
    }
    let open = |path: &Path| {
        std::fs::OpenOptions::new().create(true).append(true).open(path).map(OwnedFd::from)
    };
    let null = std::fs::File::open("/dev/null").map(OwnedFd::from)?;
    for (fd, target) in [(null, 0), (open(&request.stdout)?, 1), (open(&request.stderr)?, 2)] {
        // SAFETY: dup2 onto the standard descriptors of this (single-threaded) child.
        if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: the child is single-threaded, so nothing reads the environment concurrently.
    unsafe {
        std::env::remove_var(ZYGOTE_ENV);
        for (key, value) in &request.env {
            std::env::set_var(key, value);
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------- driver side

/// What the driver (or node agent) keeps of a zygote.
struct Zygote {
    /// The binary it is a copy of.
    exe: PathBuf,
    requests: Mutex<std::fs::File>,
    /// Spawn requests waiting for their reply, with what to call when the child exits.
    pending: Mutex<HashMap<u64, (PidReply, OnExit)>>,
    /// Live children → what to call when they exit.
    children: Mutex<HashMap<i32, OnExit>>,
    next_id: AtomicU64,
    /// When a worker was last asked of it.
    used: Mutex<std::time::Instant>,
    /// The zygote itself (killed when this is dropped, with its children); None once retired.
    process: Mutex<Option<crate::sys::Supervised>>,
}

type OnExit = Box<dyn FnOnce(std::io::Result<ExitStatus>) + Send>;

/// Where the pid of a forked worker (or why there is none) goes.
type PidReply = oneshot::Sender<std::io::Result<i32>>;

/// The zygote of each workers' binary, started on first use (again after it died).
static ZYGOTES: Mutex<Vec<Arc<Zygote>>> = Mutex::new(Vec::new());

/// How long a fork server without workers is kept once another binary's is needed.
const RETIRE_AFTER: Duration = Duration::from_secs(60);

/// Set when a warm start failed: exec is used from then on.
static UNUSABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether workers may start from the fork server: `RTUNE_WARM_START` is not `0`, and it has
/// not failed in this process.
pub(crate) fn warm_start_allowed() -> bool {
    !UNUSABLE.load(Ordering::Relaxed) && std::env::var(WARM_START_ENV).map_or(true, |v| v != "0")
}

/// A warm start failed: say why once, and start workers with exec from now on.
pub(crate) fn give_up(why: &std::io::Error) {
    if !UNUSABLE.swap(true, Ordering::Relaxed) {
        tracing::warn!("workers start with exec from now on: the fork server failed: {why}");
    }
}

/// How a worker forked by a zygote starts: the variables set in its environment, where its
/// stdout and stderr go (appended to, or written into a FIFO), and whether it ignores SIGTERM.
pub(crate) struct WarmStart<'a> {
    pub env: Vec<(String, String)>,
    pub stdout: &'a Path,
    pub stderr: &'a Path,
    pub ignore_sigterm: bool,
}

/// Starts a worker process of binary `exe` through its fork server, as `start` says, with
/// `on_exit` called with its exit. Like `spawn_supervised`, the returned sender kills it when
/// sent or dropped. Call inside the runtime that lives as long as the process (the driver's or
/// the node agent's): the zygote's replies are read there.
pub(crate) async fn spawn_warm(
    exe: &Path,
    start: WarmStart<'_>,
    on_exit: impl FnOnce(std::io::Result<ExitStatus>) + Send + 'static,
) -> std::io::Result<oneshot::Sender<()>> {
    let zygote = running_zygote(exe)?;
    *lock(&zygote.used) = std::time::Instant::now();
    let id = zygote.next_id.fetch_add(1, Ordering::Relaxed);
    let (reply, answer) = oneshot::channel();
    lock(&zygote.pending).insert(id, (reply, Box::new(on_exit)));
    let WarmStart { env, stdout, stderr, ignore_sigterm } = start;
    let (stdout, stderr) = (stdout.to_owned(), stderr.to_owned());
    let request = Request { id, env, stdout, stderr, ignore_sigterm };
    let mut line = serde_json::to_vec(&request).expect("a request serialises");
    line.push(b'\n');
    let written = lock(&zygote.requests).write_all(&line);
    if let Err(e) = written {
        lock(&zygote.pending).remove(&id);
        forget_zygote(&zygote);
        return Err(e);
    }
    let no_answer = || std::io::Error::other("the fork server did not answer");
    let pid = tokio::time::timeout(Duration::from_secs(30), answer)
        .await
        .map_err(|_| no_answer())?
        .map_err(|_| no_answer())??;
    let (kill, killed) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = killed.await;
        if lock(&zygote.children).contains_key(&pid) {
            // SAFETY: kill(2) on a child of our zygote that has not been reaped yet, so the
            // pid is still its own.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    Ok(kill)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn forget_zygote(zygote: &Arc<Zygote>) {
    lock(&ZYGOTES).retain(|z| !Arc::ptr_eq(z, zygote));
}

/// Ends and forgets the fork servers of `zygotes` without workers or requests that were last
/// asked for one longer than `after` ago.
fn retire_idle(zygotes: &mut Vec<Arc<Zygote>>, after: Duration) {
    zygotes.retain(|z| {
        let idle = lock(&z.children).is_empty()
            && lock(&z.pending).is_empty()
            && lock(&z.used).elapsed() > after;
        if idle {
            drop(lock(&z.process).take());
        }
        !idle
    });
}

/// The zygote of binary `exe`, started if there is none.
fn running_zygote(exe: &Path) -> std::io::Result<Arc<Zygote>> {
    let mut zygotes = lock(&ZYGOTES);
    if let Some(z) = zygotes.iter().find(|z| z.exe == exe) {
        return Ok(z.clone());
    }
    // A node agent meets a new driver binary with every build its users run: the fork servers
    // of the others that have no worker and were not asked for one in a while go (each holds a
    // libtorch of its own), before this one starts.
    retire_idle(&mut zygotes, RETIRE_AFTER);
    let mut command = std::process::Command::new(exe);
    command
        .env(ZYGOTE_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut process = crate::sys::spawn_supervised(command, |_| {})?;
    tracing::debug!("started a fork server of {} (pid {})", exe.display(), process.pid);
    let stdin = process.stdin.take().ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
    let stdout = process.stdout.take().ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
    let requests = std::fs::File::from(stdin.into_owned_fd()?);
    let zygote = Arc::new(Zygote {
        exe: exe.to_owned(),
        requests: Mutex::new(requests),
        pending: Mutex::new(HashMap::new()),
        children: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
        used: Mutex::new(std::time::Instant::now()),
        process: Mutex::new(Some(process)),
    });
    let reader = zygote.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<Reply>(&line) {
                Ok(Reply::Spawned { id, pid }) => {
                    if let Some((reply, on_exit)) = lock(&reader.pending).remove(&id) {
                        lock(&reader.children).insert(pid, on_exit);
                        let _ = reply.send(Ok(pid));
                    }
                }
                Ok(Reply::Failed { id, error }) => {
                    if let Some((reply, _)) = lock(&reader.pending).remove(&id) {
                        let _ = reply.send(Err(std::io::Error::other(error)));
                    }
                }
                Ok(Reply::Exited { pid, status }) => {
                    if let Some(on_exit) = lock(&reader.children).remove(&pid) {
                        on_exit(Ok(ExitStatus::from_raw(status)));
                    }
                }
                Err(_) => break,
            }
        }
        // The zygote is gone, and its children with it (PR_SET_PDEATHSIG).
        forget_zygote(&reader);
        for (_, (reply, _)) in lock(&reader.pending).drain() {
            let _ = reply.send(Err(std::io::Error::other("the fork server exited")));
        }
        let orphans: Vec<OnExit> = lock(&reader.children).drain().map(|(_, f)| f).collect();
        for on_exit in orphans {
            on_exit(Err(std::io::Error::other("the fork server exited, and the worker with it")));
        }
    });
    zygotes.push(zygote.clone());
    Ok(zygote)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fork server as the driver keeps it, of a stand-in process (`sleep`), last used `ago`.
    fn zygote(ago: Duration) -> (Arc<Zygote>, u32) {
        let mut command = std::process::Command::new("sleep");
        command.arg("600").stdin(Stdio::null()).stdout(Stdio::null());
        let process = crate::sys::spawn_supervised(command, |_| {}).unwrap();
        let pid = process.pid;
        let zygote = Arc::new(Zygote {
            exe: PathBuf::from("/bin/sleep"),
            requests: Mutex::new(std::fs::File::create("/dev/null").unwrap()),
            pending: Mutex::new(HashMap::new()),
            children: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            used: Mutex::new(std::time::Instant::now() - ago),
            process: Mutex::new(Some(process)),
        });
        (zygote, pid)
    }

    /// Only a fork server without workers that was not used for longer than the limit ends
    /// (its process killed); one with a live worker, or used lately, stays.
    #[tokio::test]
    async fn only_idle_fork_servers_retire() {
        let (idle, idle_pid) = zygote(Duration::from_secs(120));
        let (recent, recent_pid) = zygote(Duration::ZERO);
        let (busy, busy_pid) = zygote(Duration::from_secs(120));
        lock(&busy.children).insert(1, Box::new(|_| {}));
        let mut zygotes = vec![idle, recent.clone(), busy.clone()];
        retire_idle(&mut zygotes, Duration::from_secs(60));
        assert_eq!(zygotes.len(), 2);
        assert!(zygotes.iter().all(|z| Arc::ptr_eq(z, &recent) || Arc::ptr_eq(z, &busy)));
        let gone = std::time::Instant::now() + Duration::from_secs(10);
        while crate::sys::process_start(idle_pid).is_some() && std::time::Instant::now() < gone {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(crate::sys::process_start(idle_pid).is_none(), "the idle one's process ended");
        assert!(crate::sys::process_start(recent_pid).is_some());
        assert!(crate::sys::process_start(busy_pid).is_some());
    }
}
