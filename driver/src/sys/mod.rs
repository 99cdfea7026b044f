//! Process-level helpers shared by the driver and the node agent: starting supervised worker
//! processes, the build id that proves a worker runs the driver's very binary, the CUDA probe
//! (`cuda_probe`: what a GPU worker will find, asked of a child process), the GPUs' use from NVML (`nvml`), a device as
//! users and workers name it (`Device`), and a sleep for `select!` loops whose deadline may be
//! none. A leaf: it knows nothing of trials, groups or the cluster.

pub mod build_id;
pub mod cuda_probe;
pub mod nvml;
pub mod stacks;
pub mod zygote;

use std::os::unix::process::CommandExt;
use std::process::ExitStatus;
use std::sync::{Mutex, mpsc};

use tokio::sync::oneshot;

/// A `CUDA_VISIBLE_DEVICES`-style list as device names (`0,2`, or `GPU-<uuid>`s); CUDA stops
/// at the first invalid entry (`-1`), and Slurm writes `NoDevFiles` for none.
pub(crate) fn device_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .take_while(|d| !d.starts_with('-'))
        .filter(|d| !d.is_empty() && *d != "NoDevFiles")
        .map(str::to_owned)
        .collect()
}

/// A device as a user names it (`--device`, a worker's assignment): the CPU, or a GPU by its
/// index among the visible ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    /// `cpu`, `cuda` (the first visible GPU) or `cuda:N`, as PyTorch writes them; None for
    /// anything else.
    pub fn parse(text: &str) -> Option<Device> {
        match text.trim() {
            "cpu" => Some(Device::Cpu),
            "cuda" => Some(Device::Cuda(0)),
            other => other.strip_prefix("cuda:")?.parse().ok().map(Device::Cuda),
        }
    }
}

/// Spawns `command` as a worker process that dies with this process (`PR_SET_PDEATHSIG =
/// SIGKILL`: a driver's or node agent's workers never outlive it), in a process group of its
/// own (a terminal's Ctrl-C goes to the driver, which stops its trials cleanly, not to every
/// worker at once), and hands its exit to
/// `on_exit`. The returned sender kills it; dropping the sender kills it too. Also returns its
/// stdin, stdout and stderr when the command piped them. Call inside a tokio runtime, from any thread:
/// the fork happens on the spawner thread (see `fork_on_spawner`).
pub(crate) fn spawn_supervised(
    mut command: std::process::Command,
    on_exit: impl FnOnce(std::io::Result<ExitStatus>) + Send + 'static,
) -> std::io::Result<Supervised> {
    // SAFETY: prctl and setpgid are async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = fork_on_spawner(command, tokio::runtime::Handle::current())?;
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let pid = child.id().unwrap_or(0);
    let (kill, killed) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let status = tokio::select! {
            status = child.wait() => status,
            _ = killed => {
                let _ = child.start_kill();
                child.wait().await
            }
        };
        on_exit(status);
    });
    Ok(Supervised { kill, pid, stdin, stdout, stderr })
}

type SpawnRequest = (
    std::process::Command,
    tokio::runtime::Handle,
    mpsc::Sender<std::io::Result<tokio::process::Child>>,
);

/// The spawner thread's inbox, started on first use.
static SPAWNER: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);

/// Forks `command` on the spawner thread, registered with the runtime of `handle`.
///
/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process. A
/// fork on a caller's thread, a runtime worker or a blocking-pool thread (which tokio retires
/// when idle) would kill the workers with that thread; the spawner thread lives as long as the
/// process, so workers die with the process and nothing else.
fn fork_on_spawner(
    command: std::process::Command,
    handle: tokio::runtime::Handle,
) -> std::io::Result<tokio::process::Child> {
    let inbox = {
        let mut spawner = SPAWNER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match &*spawner {
            Some(inbox) => inbox.clone(),
            None => {
                let (inbox, requests) = mpsc::channel::<SpawnRequest>();
                std::thread::Builder::new().name("rtune-spawner".into()).spawn(move || {
                    for (command, handle, reply) in requests {
                        let _runtime = handle.enter();
                        let mut command = tokio::process::Command::from(command);
                        let _ = reply.send(spawn_when_written(command.kill_on_drop(true)));
                    }
                })?;
                spawner.insert(inbox).clone()
            }
        }
    };
    let (reply, answer) = mpsc::channel();
    let gone = || std::io::Error::other("the rtune-spawner thread is gone");
    inbox.send((command, handle, reply)).map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}

/// Spawns `command`, trying again for a while if its program is busy being written
/// (`ETXTBSY`): a binary just written (a node agent's copy of a driver's) can be held open for
/// writing a moment longer by a child another thread forked meanwhile, which inherited the
/// descriptor and has not exec'd yet (the close-on-exec flag closes it only then).
fn spawn_when_written(
    command: &mut tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    let mut wait = std::time::Duration::from_millis(1);
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && wait.as_millis() < 500 => {
                std::thread::sleep(wait);
                wait *= 2;
            }
            spawned => return spawned,
        }
    }
}

/// The start time of process `pid` (clock ticks after boot); None when no such process runs
/// (a zombie has ended).
pub(crate) fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses; the rest does not.
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if matches!(fields.first(), None | Some(&"Z") | Some(&"X")) {
        return None;
    }
    // Field 22 of the line is starttime; `rest` begins at field 3.
    fields.get(22 - 3)?.parse().ok()
}

/// This machine's host name ("" if it has none).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Raises this process's soft limit on open files to its hard one: a driver holds a connection
/// to each of its remote workers, and a head one to each node and driver, a thousand and more
/// where the usual soft limit is 1,024.
pub fn raise_open_files_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Makes a FIFO (a named pipe) at `path`, readable and writable by this user only.
pub(crate) fn make_fifo(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
    // SAFETY: mkfifo reads the NUL-terminated name we own.
    if unsafe { libc::mkfifo(name.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A writing end of the FIFO at `path`, opened without waiting (its reader must be open).
pub(crate) fn open_fifo_writer(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(path)
}

/// A supervised worker process.
pub(crate) struct Supervised {
    /// Send (or drop) to kill it.
    pub kill: oneshot::Sender<()>,
    pub pid: u32,
    pub stdin: Option<tokio::process::ChildStdin>,
    pub stdout: Option<tokio::process::ChildStdout>,
    pub stderr: Option<tokio::process::ChildStderr>,
}

/// The files of a folder and its subfolders, sorted, as paths relative to it (none for a
/// folder that cannot be read).
pub fn relative_files(dir: &std::path::Path) -> Vec<String> {
    fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if let Ok(rel) = path.strip_prefix(base) {
                out.push(rel.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Year, month, day, hour, minute and second (UTC) of seconds since the Unix epoch.
pub(crate) fn utc_fields(unix_seconds: f64) -> [i64; 6] {
    let t = unix_seconds.floor() as i64;
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    [year, month, day, secs / 3600, secs % 3600 / 60, secs % 60]
}

/// `2026-11-26T05:43:53.123456+00:00`: ISO 8601 in UTC with microseconds, as Python's
/// `datetime.isoformat(timespec="microseconds")` writes an aware UTC time.
pub(crate) fn iso_utc(unix_seconds: f64) -> String {
    let [year, month, day, hour, minute, second] = utc_fields(unix_seconds);
    let micros = ((unix_seconds - unix_seconds.floor()) * 1e6).round().min(999_999.0) as u32;
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{micros:06}+00:00")
}

/// Seconds since the Unix epoch, now.
pub fn unix_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Sleeps until `at`; for ever without one (for a `select!` branch that has nothing to wait for
/// now).
pub(crate) async fn sleep_until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program still open for writing cannot be exec'd (`ETXTBSY`); once the writer lets go,
    /// the spawn that was waiting for it goes through.
    #[tokio::test]
    async fn a_program_being_written_is_spawned_once_it_is_closed() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("program");
        let mut writer = std::fs::File::create(&program).unwrap();
        writer.write_all(b"#!/bin/sh\nexit 7\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut command = tokio::process::Command::new(&program);
        let busy = command.spawn().map(|_| ()).unwrap_err();
        assert_eq!(busy.raw_os_error(), Some(libc::ETXTBSY), "{busy}");
        let closer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            drop(writer);
        });
        let status = spawn_when_written(&mut command).unwrap().wait().await.unwrap();
        closer.join().unwrap();
        assert_eq!(status.code(), Some(7));
    }

    /// Python's `datetime.isoformat(timespec="microseconds")` of an aware UTC time, and the
    /// civil date across a leap day and before 1970.
    #[test]
    fn utc_times_read_as_python_writes_them() {
        assert_eq!(iso_utc(1_795_672_404.568_855), "2026-11-26T05:53:24.568855+00:00");
        assert_eq!(iso_utc(951_782_400.0), "2000-02-29T00:00:00.000000+00:00");
        assert_eq!(utc_fields(-1.5), [1969, 12, 31, 23, 59, 58]);
    }

    fn alive(pid: u32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
        !matches!(state, None | Some('Z') | Some('X'))
    }

    /// A worker asked for by a thread that then exits keeps running (PR_SET_PDEATHSIG follows
    /// the forking thread, so forking on the asker's thread would have killed it).
    #[test]
    fn workers_outlive_the_thread_that_started_them() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        let (exited_tx, exited) = mpsc::channel();
        let supervised = std::thread::spawn(move || {
            let _runtime = handle.enter();
            let mut command = std::process::Command::new("sh");
            command.args(["-c", "echo $$; exec sleep 60"]).stdout(std::process::Stdio::piped());
            spawn_supervised(command, move |status| drop(exited_tx.send(status))).unwrap()
        })
        .join()
        .unwrap();
        let mut stdout = supervised.stdout.unwrap();
        let pid: u32 = runtime.block_on(async {
            use tokio::io::AsyncReadExt;
            let mut text = String::new();
            while !text.ends_with('\n') {
                let mut byte = [0u8; 1];
                stdout.read_exact(&mut byte).await.unwrap();
                text.push(char::from(byte[0]));
            }
            text.trim().parse().unwrap()
        });
        // The asking thread is gone; a death signal tied to it is sent as it exits.
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(alive(pid), "worker {pid} died with the thread that started it");
        drop(supervised.kill);
        let status = exited.recv_timeout(std::time::Duration::from_secs(30)).unwrap().unwrap();
        assert!(!status.success(), "killed, not finished: {status:?}");
        assert!(!alive(pid));
    }
}
