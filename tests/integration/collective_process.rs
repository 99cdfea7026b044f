//! Collective ranks as real processes: this test binary re-executes itself as the peer rank
//! (`main` runs [`run_child_if_asked`] before any test when `RTUNE_COLLECTIVE_CHILD` is set).
//! The parent then kills (SIGKILL) or freezes (SIGSTOP) the child in the middle of a stream of
//! all-reduces and checks that it gets the right error, naming the right peer, and does not
//! hang. How fast that happens is measured by `benches/collective_failure.rs`, not asserted here.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use rtune::collective::{CollectiveError, GroupOptions, ProcessGroup, ReduceOp, RingGroup};

const CHILD_ENV: &str = "RTUNE_COLLECTIVE_CHILD";
const ELEMS: usize = 1 << 22; // 16 MB per call: long enough that a signal lands mid-call

fn opts(timeout: Duration) -> GroupOptions {
    GroupOptions::new(7).timeout(timeout).connect_timeout(Duration::from_secs(20))
}

/// In a child started by [`start_pair`] (the variable holds its collective timeout in ms): be
/// rank 1 and never return. Elsewhere: return at once.
///
/// The child publishes its listener address on stdout, reads everyone's addresses from stdin (a
/// stand-in for the rendezvous), then all-reduces until something fails.
pub fn run_child_if_asked() {
    let Ok(timeout_ms) = std::env::var(CHILD_ENV) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("ADDR {}", listener.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let peers: Vec<SocketAddr> = line.split_whitespace().map(|a| a.parse().unwrap()).collect();
    let timeout = Duration::from_millis(timeout_ms.parse().unwrap());
    let mut g = RingGroup::connect(1, 2, listener, &peers, opts(timeout)).unwrap();
    let mut buf = vec![1.0f32; ELEMS];
    while g.all_reduce(&mut buf, ReduceOp::Sum).is_ok() {
        buf.fill(1.0);
    }
    std::process::exit(0);
}

/// Starts the child as rank 1 and builds the group as rank 0.
fn start_pair(timeout: Duration) -> (RingGroup, Child) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, timeout.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let child_addr = loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited before publishing");
        if let Some(a) = line.trim().strip_prefix("ADDR ") {
            break a.parse::<SocketAddr>().unwrap();
        }
    };
    // Keep draining the child's stdout so it never blocks on a full pipe.
    thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let peers = [listener.local_addr().unwrap(), child_addr];
    writeln!(child.stdin.as_mut().unwrap(), "{} {}", peers[0], peers[1]).unwrap();
    let g = RingGroup::connect(0, 2, listener, &peers, opts(timeout)).unwrap();
    (g, child)
}

/// Runs all-reduces until one fails; checks the successful ones. Returns the error.
fn reduce_until_error(g: &mut RingGroup) -> CollectiveError {
    let mut buf = vec![0.0f32; ELEMS];
    for call in 0.. {
        buf.fill(2.0);
        if let Err(e) = g.all_reduce(&mut buf, ReduceOp::Sum) {
            return e;
        }
        assert!(buf.iter().all(|&x| x == 3.0), "wrong sum in call {call}");
    }
    unreachable!()
}

/// One good call before any signal, so the signal lands in a working stream of calls.
fn warm_up(g: &mut RingGroup) {
    let mut buf = vec![2.0f32; ELEMS];
    g.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
    assert!(buf.iter().all(|&x| x == 3.0));
}

/// Signals the child after `delay` from another thread.
fn signal_later(pid: u32, sig: libc::c_int, delay: Duration) {
    thread::spawn(move || {
        thread::sleep(delay);
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill failed");
    });
}

/// A SIGKILLed peer is lost, named, and not mistaken for a slow one: the timeout is far longer
/// than the test, so a `Timeout` here would mean loss detection did not work.
pub fn killed_peer_is_lost() -> anyhow::Result<()> {
    let (mut g, mut child) = start_pair(Duration::from_secs(600));
    warm_up(&mut g);
    signal_later(child.id(), libc::SIGKILL, Duration::from_millis(500));
    let err = reduce_until_error(&mut g);
    child.wait()?;
    match err {
        CollectiveError::PeerLost { rank: 1, .. } => Ok(()),
        other => anyhow::bail!("expected PeerLost from rank 1, got {other}"),
    }
}

/// A frozen peer (SIGSTOP: its sockets stay open) fails the call with the configured timeout.
pub fn frozen_peer_times_out() -> anyhow::Result<()> {
    let timeout = Duration::from_secs(1);
    let (mut g, mut child) = start_pair(timeout);
    warm_up(&mut g);
    signal_later(child.id(), libc::SIGSTOP, Duration::from_millis(300));
    let err = reduce_until_error(&mut g);
    child.kill()?; // SIGKILL also ends a stopped process
    child.wait()?;
    match err {
        CollectiveError::Timeout { after, .. } if after == timeout => Ok(()),
        other => anyhow::bail!("expected Timeout after {timeout:?}, got {other}"),
    }
}
