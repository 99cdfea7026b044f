//! Where a worker's training thread is, for `rtune stack`: its stack, named, and for a command
//! trainable its program's pid and state. The worker side notes its training thread
//! ([`training_thread`]) before it joins its group; the driver then asks a worker process on
//! this machine with a signal ([`ask_process`]) or, for local mode's rank on a thread of its own
//! process, asks itself ([`describe`]).
//!
//! How a stack is taken without stopping anything: the ask signal's handler only wakes a thread
//! of the worker's ("rtune-stacks"), which sends a second signal to the training thread; that
//! handler walks the thread's own stack into a fixed buffer (no allocation, no lock) and wakes
//! the stacks thread again, which names the frames and writes the text for the driver to a file
//! (`stack_file`). The training thread loses the few microseconds of the walk; a system call it
//! was in is restarted (`SA_RESTART`), and the collectives, the driver link and `sleep` already
//! go on after an interruption; a library that does not is called under [`Uninterrupted`].
//! Both signals are real-time ones glibc leaves to programs.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rtune_collective::poll::{PollFd, poll};

/// The most frames a stack keeps (deeper ones are cut, said in the text).
const MAX_FRAMES: usize = 128;
/// The file of the worker's frame that calls the train function: a stack is printed down to it.
const WORKER_FRAMES: &str = "src/worker/process.rs";
/// How long the training thread has to answer the capture signal.
const CAPTURE_WAIT: Duration = Duration::from_secs(2);
/// How long the driver waits for a worker's text (naming the frames of a first stack reads the
/// binary's and libtorch's symbols: a few seconds).
const ANSWER_WAIT: Duration = Duration::from_secs(20);

static TRAINING_TID: AtomicI32 = AtomicI32::new(0);
static COMMAND_CHILD: AtomicU32 = AtomicU32::new(0);
static FRAMES: [AtomicUsize; MAX_FRAMES] = [const { AtomicUsize::new(0) }; MAX_FRAMES];
static DEPTH: AtomicUsize = AtomicUsize::new(0);
/// Write ends of the two wake-up pipes (-1 until installed).
static ASKED_FD: AtomicI32 = AtomicI32::new(-1);
static CAPTURED_FD: AtomicI32 = AtomicI32::new(-1);
/// The read end of the captured pipe; one capture at a time.
static CAPTURED: Mutex<i32> = Mutex::new(-1);

/// The library the training thread is in with the capture signal blocked (see
/// [`Uninterrupted`]), if any.
static IN_LIBRARY: Mutex<Option<&'static str>> = Mutex::new(None);

/// While one is held, the calling thread takes no capture signal: a library whose sockets fail
/// when a system call is interrupted (LightGBM's: a receive with a timeout is never restarted,
/// `SA_RESTART` or not) is called under one. A stack asked for meanwhile is taken as the call
/// returns, or, if it runs longer than the capture waits, said to be in that library.
pub struct Uninterrupted(std::marker::PhantomData<*const ()>);

impl Uninterrupted {
    pub fn new(library: &'static str) -> Uninterrupted {
        set_blocked(capture_signal(), true);
        *IN_LIBRARY.lock().unwrap_or_else(|p| p.into_inner()) = Some(library);
        Uninterrupted(std::marker::PhantomData)
    }
}

impl Drop for Uninterrupted {
    fn drop(&mut self) {
        *IN_LIBRARY.lock().unwrap_or_else(|p| p.into_inner()) = None;
        set_blocked(capture_signal(), false);
    }
}

/// The signal that asks a worker process for its stack.
fn ask_signal() -> i32 {
    libc::SIGRTMIN() + 6
}

/// The signal the stacks thread sends the training thread.
fn capture_signal() -> i32 {
    libc::SIGRTMIN() + 7
}

/// Where a worker process writes its answer.
fn stack_file(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("rtune-stack-{pid}.txt"))
}

/// Notes the calling thread as this process's training thread, and (once per process) installs
/// the signal handlers and starts the stacks thread. Called by a worker before it joins.
pub fn training_thread() {
    // SAFETY: gettid has no preconditions.
    TRAINING_TID.store(unsafe { libc::gettid() }, Ordering::SeqCst);
    // The ask goes to another thread of the process (the stacks thread takes it), so the
    // training thread's stack never holds its handler.
    set_blocked(ask_signal(), true);
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        if let Err(e) = install() {
            tracing::warn!("rtune stack will not see this worker: {e}");
        }
    });
}

/// Notes the program a command trainable runs (None once it has ended).
pub fn command_child(pid: Option<u32>) {
    COMMAND_CHILD.store(pid.unwrap_or(0), Ordering::SeqCst);
}

fn install() -> std::io::Result<()> {
    let (asked_read, asked_write) = pipe()?;
    let (captured_read, captured_write) = pipe()?;
    ASKED_FD.store(asked_write, Ordering::SeqCst);
    CAPTURED_FD.store(captured_write, Ordering::SeqCst);
    *CAPTURED.lock().unwrap_or_else(|p| p.into_inner()) = captured_read;
    std::thread::Builder::new().name("rtune-stacks".into()).spawn(move || {
        set_blocked(ask_signal(), false);
        let mut byte = [0u8];
        // SAFETY: reading one byte into a live buffer from a pipe this thread owns.
        while unsafe { libc::read(asked_read, byte.as_mut_ptr().cast(), 1) } != 0 {
            let pid = std::process::id();
            if let Err(e) = write_answer(pid, &describe()) {
                tracing::warn!("rtune stack: cannot write {}: {e}", stack_file(pid).display());
            }
        }
    })?;
    let handlers: [(i32, extern "C" fn(i32)); 2] =
        [(ask_signal(), on_ask), (capture_signal(), on_capture)];
    for (signal, handler) in handlers {
        // SAFETY: a zeroed sigaction with a handler of the right signature and SA_RESTART.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Blocks (or unblocks) `signal` for the calling thread.
fn set_blocked(signal: i32, blocked: bool) {
    // SAFETY: a signal set built with sigemptyset/sigaddset, for this thread's own mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        let how = if blocked { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

fn pipe() -> std::io::Result<(i32, i32)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// Wakes the thread waiting on the pipe `fd` writes to; async-signal-safe (errno kept).
fn wake(fd: &AtomicI32) {
    // SAFETY: errno is this thread's; write(2) is async-signal-safe.
    unsafe {
        let errno = *libc::__errno_location();
        let _ = libc::write(fd.load(Ordering::SeqCst), [1u8].as_ptr().cast(), 1);
        *libc::__errno_location() = errno;
    }
}

extern "C" fn on_ask(_: i32) {
    wake(&ASKED_FD);
}

/// Walks this thread's stack into `FRAMES`: no allocation, no lock.
extern "C" fn on_capture(_: i32) {
    let mut depth = 0;
    // SAFETY: the walk only reads this thread's stack; the callback stores into atomics.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            FRAMES[depth].store(frame.ip() as usize, Ordering::Relaxed);
            depth += 1;
            depth < MAX_FRAMES
        });
    }
    DEPTH.store(depth, Ordering::SeqCst);
    wake(&CAPTURED_FD);
}

/// The training thread's stack as instruction pointers, innermost first.
fn capture() -> Result<Vec<usize>, String> {
    let tid = TRAINING_TID.load(Ordering::SeqCst);
    let read = CAPTURED.lock().unwrap_or_else(|p| p.into_inner());
    if tid == 0 || *read < 0 {
        return Err("no training thread has started in this process".into());
    }
    let answered = |wait: Duration| -> Result<bool, String> {
        let mut fd = [PollFd::new(*read, libc::POLLIN)];
        let ready = poll(&mut fd, wait).map_err(|e| e.to_string())? == 1;
        if ready {
            let mut byte = [0u8];
            // SAFETY: one byte into a live buffer; the pipe has it (poll said so).
            unsafe { libc::read(*read, byte.as_mut_ptr().cast(), 1) };
        }
        Ok(ready)
    };
    // A walk that answered after an earlier capture gave up would pass for this one's.
    while answered(Duration::ZERO)? {}
    DEPTH.store(0, Ordering::SeqCst);
    // SAFETY: signals a thread of this very process; the handler is installed.
    if unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, capture_signal()) } != 0 {
        return Err(format!("the training thread is gone ({})", std::io::Error::last_os_error()));
    }
    if !answered(CAPTURE_WAIT)? {
        if let Some(library) = *IN_LIBRARY.lock().unwrap_or_else(|p| p.into_inner()) {
            return Err(format!(
                "the training thread has been in a call of {library}'s for {CAPTURE_WAIT:?} \
                 (its sockets fail on a signal, so its stack is taken between its calls)"
            ));
        }
        return Err(format!("the training thread did not answer in {CAPTURE_WAIT:?}"));
    }
    let depth = DEPTH.load(Ordering::SeqCst);
    Ok(FRAMES[..depth].iter().map(|f| f.load(Ordering::Relaxed)).collect())
}

/// This process's training thread, named frame by frame (the signal handler's own frames left
/// out), and the command trainable's program where there is one.
pub(crate) fn describe() -> String {
    let mut text = String::new();
    match capture() {
        Ok(ips) => text.push_str(&name_frames(&ips)),
        Err(e) => text.push_str(&format!("no stack: {e}\n")),
    }
    let child = COMMAND_CHILD.load(Ordering::SeqCst);
    if child != 0 {
        text.push_str(&format!("command: {}\n", process_state(child)));
    }
    text
}

/// `#N function at file:line` for each frame, from the one the signal interrupted outwards
/// (an inlined function is a frame of its own, as in a panic's backtrace).
fn name_frames(ips: &[usize]) -> String {
    let named: Vec<Vec<String>> =
        ips.iter().filter(|&&ip| ip != 0).map(|&ip| name_frame(ip)).collect();
    // The handler's frames end at `on_capture`; the kernel's signal trampoline (unnamed, or
    // `__restore_rt`) follows it.
    let Some(handler) =
        named.iter().rposition(|names| names.iter().any(|n| n.contains("stacks::on_capture")))
    else {
        return "no stack: the walk did not reach the signal handler\n".into();
    };
    let trampoline = |names: &Vec<String>| {
        names.iter().all(|n| n.starts_with("0x") || n.starts_with("__restore_rt"))
    };
    let start = handler + 1 + usize::from(named.get(handler + 1).is_some_and(trampoline));
    let frames: Vec<&String> = named[start..].iter().flatten().collect();
    // Below the train function are the worker's own frames (and the runtime's): left out.
    let end = frames.iter().position(|f| f.contains(WORKER_FRAMES)).unwrap_or(frames.len());
    let mut text = String::new();
    for (i, frame) in frames[..end].iter().enumerate() {
        text.push_str(&format!("  #{i:<3} {frame}\n"));
    }
    if end < frames.len() {
        text.push_str("  (below: the worker that called the train function)\n");
    } else if ips.len() == MAX_FRAMES {
        text.push_str(&format!("  (cut at {MAX_FRAMES} frames)\n"));
    }
    text
}

/// The function (and those inlined into it, innermost first) at `ip`, each with its file and
/// line where the binary has them.
fn name_frame(ip: usize) -> Vec<String> {
    let mut names = Vec::new();
    backtrace::resolve(ip as *mut std::ffi::c_void, |symbol| {
        let name = symbol.name().map_or_else(|| format!("{ip:#x}"), |n| format!("{n:#}"));
        let place = match (symbol.filename(), symbol.lineno()) {
            (Some(file), Some(line)) => format!(" at {}:{line}", short_path(file)),
            _ => String::new(),
        };
        names.push(format!("{name}{place}"));
    });
    if names.is_empty() {
        names.push(format!("{ip:#x}"));
    }
    names
}

/// A source path from its crate's folder on (`src/worker/process.rs`), not the build machine's.
fn short_path(path: &std::path::Path) -> String {
    let text = path.display().to_string();
    match text.find("/src/") {
        Some(i) => text[text[..i].rfind('/').map_or(0, |j| j + 1)..].to_owned(),
        None => text,
    }
}

/// `pid N (name), state S (sleeping), waiting in W`, from /proc.
pub(crate) fn process_state(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // `pid (comm) S ...`: the name may hold spaces and parentheses; the state follows the last ')'.
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return format!("pid {pid}, gone");
    };
    let name = &stat[open + 1..close];
    let state = stat[close + 1..].split_whitespace().next().unwrap_or("?");
    let meaning = match state {
        "R" => "running",
        "S" => "sleeping",
        "D" => "in uninterruptible I/O",
        "T" | "t" => "stopped",
        "Z" => "a zombie",
        _ => "other",
    };
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    let waiting = match wchan.trim() {
        "" | "0" => String::new(),
        w => format!(", waiting in {w}"),
    };
    format!("pid {pid} ({name}), state {state} ({meaning}){waiting}")
}

fn write_answer(pid: u32, text: &str) -> std::io::Result<()> {
    let path = stack_file(pid);
    let partial = path.with_extension(format!("{}.part", std::process::id()));
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).open(&partial).or_else(|_| {
            std::fs::remove_file(&partial)?;
            std::fs::OpenOptions::new().write(true).create_new(true).open(&partial)
        })?;
    file.write_all(text.as_bytes())?;
    std::fs::rename(&partial, &path)
}

/// Asks the worker process `pid` on this machine for its training thread's stack (see the
/// module's doc); blocks until it answers. Only for processes that called
/// [`training_thread`] (a worker that has joined): the signal would end any other.
pub(crate) fn ask_process(pid: u32) -> Result<String, String> {
    let path = stack_file(pid);
    let _ = std::fs::remove_file(&path);
    // SAFETY: kill(2) with a signal the worker handles.
    if unsafe { libc::kill(pid as i32, ask_signal()) } != 0 {
        return Err(format!("cannot signal pid {pid}: {}", std::io::Error::last_os_error()));
    }
    let deadline = Instant::now() + ANSWER_WAIT;
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let _ = std::fs::remove_file(&path);
            return Ok(text);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("pid {pid} did not answer in {ANSWER_WAIT:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn wait_here(ready: std::sync::mpsc::Sender<()>, done: std::sync::mpsc::Receiver<()>) {
        training_thread();
        ready.send(()).unwrap();
        let _ = done.recv_timeout(Duration::from_secs(30));
    }

    /// A thread blocked in a channel's receive is named where it waits, the waiting goes on
    /// after the walk, and the process's own ask (a signal to itself) answers the same.
    #[test]
    fn a_waiting_thread_is_seen_where_it_waits() {
        let (ready, is_ready) = std::sync::mpsc::channel();
        let (finish, done) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || wait_here(ready, done));
        is_ready.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let text = describe();
        assert!(text.contains("wait_here at driver/src/sys/stacks.rs:"), "{text}");
        assert!(!text.contains("on_capture"), "the handler's frames are left out: {text}");
        let asked = ask_process(std::process::id()).unwrap();
        assert!(asked.contains("wait_here at driver/src/sys/stacks.rs:"), "{asked}");
        finish.send(()).unwrap();
        thread.join().unwrap();
    }

    #[test]
    fn a_process_state_is_read_from_proc() {
        let state = process_state(std::process::id());
        assert!(state.starts_with(&format!("pid {} (", std::process::id())), "{state}");
        assert!(state.contains("state "), "{state}");
        assert_eq!(process_state(u32::MAX), format!("pid {}, gone", u32::MAX));
    }
}
