//! Failures with ranks as threads: mismatched calls, a rank that stops calling, a rank that
//! leaves, poisoning, bad arguments, and the connect path (late peers, strays, other groups).

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rtune_collective::{CollectiveError, GroupOptions, Op, ProcessGroup, ReduceOp, RingGroup};

use crate::common::{listeners, run_ranks};

/// A collective timeout no working test reaches, however loaded the machine: a test that sees
/// another error than `Timeout` knows the call did not wait for it.
const NEVER: Duration = Duration::from_secs(300);
/// How long a test waits for something that must happen before it gives up (no hang).
const NO_HANG: Duration = Duration::from_secs(60);
/// The timeout where timing out is what a test checks.
const SHORT_TIMEOUT: Duration = Duration::from_secs(1);

fn opts() -> GroupOptions {
    GroupOptions::new(42).timeout(NEVER).connect_timeout(NO_HANG)
}

#[test]
fn mismatched_lengths_fail_on_both_ranks() {
    let errs = run_ranks(2, opts(), |rank, mut g| {
        let mut buf = vec![1.0; 10 + rank];
        g.all_reduce(&mut buf, ReduceOp::Sum).unwrap_err()
    });
    for (rank, e) in errs.iter().enumerate() {
        match e {
            CollectiveError::Mismatch { peer, ours, theirs } => {
                assert_eq!(*peer, 1 - rank);
                assert_eq!((ours.len, theirs.len), (10 + rank as u64, 11 - rank as u64));
            }
            other => panic!("rank {rank}: expected Mismatch, got {other}"),
        }
    }
}

#[test]
fn mismatched_lengths_fail_with_lane_threads() {
    let errs = run_ranks(2, opts().lane_threads_min_bytes(0), |rank, mut g| {
        let mut buf = vec![1.0; (1 << 20) + rank];
        g.all_reduce(&mut buf, ReduceOp::Sum).unwrap_err()
    });
    for e in errs {
        assert!(matches!(e, CollectiveError::Mismatch { .. }), "{e}");
    }
}

#[test]
fn mismatched_ops_fail() {
    let errs = run_ranks(2, opts(), |rank, mut g| {
        let mut buf = vec![1.0; 100];
        if rank == 0 {
            g.all_reduce(&mut buf, ReduceOp::Sum).unwrap_err()
        } else {
            g.broadcast(&mut buf, 0).unwrap_err()
        }
    });
    for e in errs {
        assert!(matches!(e, CollectiveError::Mismatch { .. }), "{e}");
    }
}

/// With three ranks a mismatch is seen by the odd rank's neighbours; every rank still fails
/// (the others through the closed links), none waits for its timeout: with a timeout longer
/// than any test run, a rank that waited would fail with `Timeout`, not these.
#[test]
fn mismatch_in_larger_ring_fails_everyone() {
    let opts = opts();
    let results = run_ranks(4, opts, |rank, mut g| {
        let mut buf = vec![1.0; if rank == 2 { 5000 } else { 4000 }];
        g.all_reduce(&mut buf, ReduceOp::Avg).unwrap_err()
    });
    for (rank, e) in results.iter().enumerate() {
        assert!(
            matches!(e, CollectiveError::Mismatch { .. } | CollectiveError::PeerLost { .. }),
            "rank {rank}: {e}"
        );
    }
    assert!(matches!(results[2], CollectiveError::Mismatch { .. }));
}

#[test]
fn rank_that_stops_calling_times_out() {
    stops_calling(opts().timeout(SHORT_TIMEOUT), 1000);
}

/// Same with both directions on their own threads (the buffer is large enough for two).
#[test]
fn rank_that_stops_calling_times_out_lane_threads() {
    stops_calling(opts().timeout(SHORT_TIMEOUT).lane_threads_min_bytes(0), 1 << 20);
}

fn stops_calling(opts: GroupOptions, n: usize) {
    // Rank 1 hangs (keeps the group, so its links stay open, but makes no call) until rank 0
    // has its result, however long a loaded machine takes to get there.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = (Mutex::new(done_tx), Mutex::new(done_rx));
    let results = run_ranks(2, opts, |rank, mut g| {
        if rank == 1 {
            let _ = done_rx.lock().unwrap().recv_timeout(NO_HANG);
            drop(g);
            return None;
        }
        let t = Instant::now();
        let e = g.all_reduce(&mut vec![1.0; n], ReduceOp::Sum).unwrap_err();
        let took = t.elapsed();
        done_tx.lock().unwrap().send(()).unwrap();
        Some((e, took))
    });
    let (e, took) = results[0].as_ref().unwrap();
    assert!(
        matches!(e, CollectiveError::Timeout { op: Op::AllReduce, after } if *after == SHORT_TIMEOUT),
        "{e}"
    );
    // Load can only delay a timeout, never bring it forward: the lower bound is exact.
    assert!(*took >= SHORT_TIMEOUT, "timed out early, after {took:?}");
}

#[test]
fn rank_that_leaves_is_lost() {
    leaves(opts());
}

#[test]
fn rank_that_leaves_is_lost_lane_threads() {
    leaves(opts().lane_threads_min_bytes(0));
}

fn leaves(opts: GroupOptions) {
    let results = run_ranks(3, opts, |rank, mut g| {
        if rank == 1 {
            thread::sleep(Duration::from_millis(200));
            drop(g);
            return None;
        }
        Some(g.all_reduce(&mut vec![1.0; 1 << 20], ReduceOp::Sum).unwrap_err())
    });
    // Each survivor names the neighbour whose link closed: rank 1, or the other survivor if
    // that one noticed first and closed its links. Rank 1 is blamed by at least one. (With a
    // timeout longer than the test, a survivor that waited would fail with `Timeout`.)
    let mut blamed = Vec::new();
    for rank in [0, 2] {
        match results[rank].as_ref().unwrap() {
            CollectiveError::PeerLost { rank: lost, op: Op::AllReduce, .. } => blamed.push(*lost),
            other => panic!("rank {rank}: expected PeerLost, got {other}"),
        }
    }
    assert!(blamed.contains(&1), "{blamed:?}");
}

/// After a failure every call fails with `Poisoned` at once: it never reaches the wire, so it
/// can neither wait for its (test-length) timeout nor see the peer's closed link.
#[test]
fn failed_group_is_poisoned() {
    let errs = run_ranks(2, opts(), |rank, mut g| {
        let _ = g.all_reduce(&mut vec![0.0; 3 + rank], ReduceOp::Sum).unwrap_err();
        assert!(g.poisoned().is_some());
        g.barrier().unwrap_err()
    });
    for e in errs {
        assert!(matches!(e, CollectiveError::Poisoned { .. }), "{e}");
    }
}

#[test]
fn bad_arguments_are_refused_without_poisoning() {
    let out = run_ranks(2, opts(), |_, mut g| {
        let e1 = g.all_gather(&[1.0; 3], &mut [0.0; 5]).unwrap_err();
        let e2 = g.broadcast(&mut [0.0; 3], 2).unwrap_err();
        let e3 = g.broadcast_bytes(&mut vec![], 7).unwrap_err();
        let e4 =
            g.reduce_scatter(&mut [1.0; 4], &[2, 1], &mut [0.0; 2], ReduceOp::Sum).unwrap_err();
        let e5 =
            g.reduce_scatter(&mut [1.0; 4], &[2, 2], &mut [0.0; 3], ReduceOp::Sum).unwrap_err();
        let mut buf = [1.0f32; 4];
        g.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
        (vec![e1, e2, e3, e4, e5], buf)
    });
    for (errs, buf) in out {
        for e in errs {
            assert!(matches!(e, CollectiveError::InvalidArgument { .. }), "{e}");
        }
        assert_eq!(buf, [2.0; 4]);
    }
    let (ls, addrs) = listeners(2);
    let mut ls = ls.into_iter();
    let e = RingGroup::connect(2, 2, ls.next().unwrap(), &addrs, opts()).unwrap_err();
    assert!(matches!(e, CollectiveError::InvalidArgument { op: Op::Connect, .. }), "{e}");
    let e = RingGroup::connect(0, 3, ls.next().unwrap(), &addrs, opts()).unwrap_err();
    assert!(matches!(e, CollectiveError::InvalidArgument { .. }), "{e}");
}

#[test]
fn world_of_one_needs_no_peers_to_answer() {
    let (mut ls, addrs) = listeners(1);
    let mut g = RingGroup::connect(0, 1, ls.pop().unwrap(), &addrs, opts()).unwrap();
    let mut buf = vec![3.0; 5];
    g.all_reduce(&mut buf, ReduceOp::Avg).unwrap();
    g.broadcast(&mut buf, 0).unwrap();
    let mut out = vec![0.0; 5];
    g.all_gather(&buf, &mut out).unwrap();
    g.barrier().unwrap();
    let mut bytes = b"abc".to_vec();
    g.broadcast_bytes(&mut bytes, 0).unwrap();
    assert_eq!((buf, out, bytes), (vec![3.0; 5], vec![3.0; 5], b"abc".to_vec()));
}

/// A neighbour that is not listening yet is retried until it is.
#[test]
fn connect_retries_until_the_peer_listens() {
    // Rank 1's socket is bound (so its address is known and reserved) but only starts
    // listening after rank 0 began connecting: until then connecting is refused.
    let (late, late_addr) = bound_not_listening();
    let early = TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = vec![early.local_addr().unwrap(), late_addr];
    let a = addrs.clone();
    let t0 = thread::spawn(move || RingGroup::connect(0, 2, early, &a, opts()));
    thread::sleep(Duration::from_millis(300));
    // SAFETY: listen(2) on a socket we own.
    assert_eq!(unsafe { libc::listen(late.as_raw_fd(), 16) }, 0);
    let mut g1 = RingGroup::connect(1, 2, TcpListener::from(late), &addrs, opts()).unwrap();
    let mut g0 = t0.join().unwrap().unwrap();
    let t = thread::spawn(move || g0.all_reduce(&mut [1.0; 8], ReduceOp::Sum).map(|_| g0));
    let mut buf = [2.0; 8];
    g1.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
    t.join().unwrap().unwrap();
    assert_eq!(buf, [3.0; 8]);
}

/// A TCP socket bound to 127.0.0.1 on a free port, not yet listening (std has no way to
/// bind without listening).
fn bound_not_listening() -> (OwnedFd, SocketAddr) {
    // SAFETY: plain socket/bind/getsockname calls on a fresh fd we immediately own, with
    // pointers to properly sized, initialised sockaddr_in values.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let fd = OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let rc = libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len);
        assert_eq!(rc, 0);
        let mut len = len;
        let rc = libc::getsockname(fd.as_raw_fd(), (&raw mut addr).cast(), &mut len);
        assert_eq!(rc, 0);
        (fd, SocketAddr::from((Ipv4Addr::LOCALHOST, u16::from_be(addr.sin_port))))
    }
}

/// Stray connections (garbage, silence) are refused; the real neighbour still gets in.
#[test]
fn stray_connections_are_refused() {
    let (ls, addrs) = listeners(2);
    let mut garbage = TcpStream::connect(addrs[0]).unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n--------").unwrap();
    let groups = {
        let addrs = &addrs;
        thread::scope(|s| {
            let hs: Vec<_> = ls
                .into_iter()
                .enumerate()
                .map(|(r, l)| s.spawn(move || RingGroup::connect(r, 2, l, addrs, opts())))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
    };
    for g in groups {
        g.expect("stray connection must not stop the ring");
    }
}

/// A rank of another group (other id) is refused on both sides with a handshake error.
#[test]
fn other_group_is_refused() {
    let (ls, addrs) = listeners(2);
    let errs = thread::scope(|s| {
        let hs: Vec<_> = ls
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let addrs = &addrs;
                // The accepting side waits out this timeout, then names the refused stranger;
                // 3 s leaves a loaded machine time to make the connection at all.
                let opts =
                    GroupOptions::new(100 + r as u64).connect_timeout(Duration::from_secs(3));
                s.spawn(move || RingGroup::connect(r, 2, l, addrs, opts).unwrap_err())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    for e in errs {
        assert!(matches!(e, CollectiveError::Handshake { .. }), "{e}");
        assert!(e.to_string().contains("group id"), "{e}");
    }
}

#[test]
fn connect_gives_up_at_the_timeout() {
    let (_never_listens, dead_addr) = bound_not_listening();
    let me = TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = [me.local_addr().unwrap(), dead_addr];
    let t = Instant::now();
    let opts = GroupOptions::new(1).connect_timeout(Duration::from_millis(500));
    let e = RingGroup::connect(0, 2, me, &addrs, opts).unwrap_err();
    assert!(matches!(e, CollectiveError::Connect { peer: 1, .. }), "{e}");
    // Only "gives up at all, not never": a bound no load reaches, with 120× headroom.
    assert!(t.elapsed() < NO_HANG, "{:?}", t.elapsed());
}
