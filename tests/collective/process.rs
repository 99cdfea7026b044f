//! Ranks as real processes: this test binary re-executes itself as the peer (the child runs
//! the `child_rank` test with `RTUNE_COLLECTIVE_CHILD` set; without it that test does nothing).
//! The parent then kills (SIGKILL) or freezes (SIGSTOP) the child in the middle of a stream of
//! all-reduces and checks that it gets the right error and does not hang.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rtune::collective::{CollectiveError, GroupOptions, ProcessGroup, ReduceOp, RingGroup};

const CHILD_ENV: &str = "RTUNE_COLLECTIVE_CHILD";
const ELEMS: usize = 1 << 22; // 16 MB per call: long enough that a signal lands mid-call

fn opts(timeout: Duration) -> GroupOptions {
    GroupOptions::new(7).timeout(timeout).connect_timeout(Duration::from_secs(20))
}

/// The child's side: publish the listener address on stdout, read everyone's addresses from
/// stdin (a stand-in for the rendezvous), then all-reduce until something fails.
#[test]
fn child_rank() {
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
}

/// libtest's name for `child_rank`: its module path without the crate (test binary) name, so
/// this keeps working wherever the module moves.
fn child_test_name() -> String {
    let path = module_path!();
    let module = path.split_once("::").map_or(path, |(_, rest)| rest);
    format!("{module}::child_rank")
}

/// Starts the child as rank 1 and builds the group as rank 0.
fn start_pair(timeout: Duration) -> (RingGroup, Child) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([&child_test_name(), "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, timeout.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let child_addr = loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited before publishing");
        // libtest may have printed "test ... " on the same line before it.
        if let Some((_, a)) = line.trim().split_once("ADDR ") {
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

/// Runs all-reduces until one fails; checks the successful ones. Returns the error, when it
/// happened, and how many calls succeeded.
fn reduce_until_error(g: &mut RingGroup) -> (CollectiveError, Instant, usize) {
    let mut buf = vec![0.0f32; ELEMS];
    for ok in 0.. {
        buf.fill(2.0);
        if let Err(e) = g.all_reduce(&mut buf, ReduceOp::Sum) {
            return (e, Instant::now(), ok);
        }
        assert!(buf.iter().all(|&x| x == 3.0), "wrong sum in call {ok}");
    }
    unreachable!()
}

/// One good call before any signal, so the signal lands in a working stream of calls.
fn warm_up(g: &mut RingGroup) {
    let mut buf = vec![2.0f32; ELEMS];
    g.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
    assert!(buf.iter().all(|&x| x == 3.0));
}

/// Signals the child after `delay` from another thread; returns when it was sent.
fn signal_later(pid: u32, sig: libc::c_int, delay: Duration) -> mpsc::Receiver<Instant> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        thread::sleep(delay);
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill failed");
        tx.send(Instant::now()).unwrap();
    });
    rx
}

#[test]
fn killed_peer_is_lost_within_seconds() {
    // A long timeout: if loss detection did not work this would fail as Timeout, not hang.
    let (mut g, mut child) = start_pair(Duration::from_secs(30));
    warm_up(&mut g);
    let killed = signal_later(child.id(), libc::SIGKILL, Duration::from_millis(500));
    let (err, failed_at, ok_calls) = reduce_until_error(&mut g);
    let killed_at = killed.recv().unwrap();
    child.wait().unwrap();
    match err {
        CollectiveError::PeerLost { rank: 1, .. } => {}
        other => panic!("expected PeerLost from rank 1, got {other}"),
    }
    let took = failed_at.saturating_duration_since(killed_at);
    eprintln!("PeerLost {took:?} after SIGKILL, {ok_calls} calls before");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(ok_calls > 0, "the kill should land after some successful calls");
}

#[test]
fn frozen_peer_times_out() {
    let timeout = Duration::from_secs(1);
    let (mut g, mut child) = start_pair(timeout);
    warm_up(&mut g);
    let stopped = signal_later(child.id(), libc::SIGSTOP, Duration::from_millis(300));
    let (err, failed_at, _) = reduce_until_error(&mut g);
    let stopped_at = stopped.recv().unwrap();
    child.kill().unwrap(); // SIGKILL also ends a stopped process
    child.wait().unwrap();
    match err {
        CollectiveError::Timeout { after, .. } => assert_eq!(after, timeout),
        other => panic!("expected Timeout, got {other}"),
    }
    let took = failed_at.saturating_duration_since(stopped_at);
    eprintln!("Timeout {took:?} after SIGSTOP");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}
