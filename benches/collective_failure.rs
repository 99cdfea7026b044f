//! How fast the ring notices failures: the latencies that the collective tests deliberately do
//! not assert (a loaded machine would make such asserts flaky, and prove little).
//!
//! * `peer_lost`: 3 ranks over loopback TCP all-reducing 4 MB buffers in a loop; rank 1 drops
//!   its group mid-stream (its sockets close, as a killed process's do). Measured: from the drop
//!   to each survivor's `PeerLost`.
//! * `timeout_overshoot`: 2 ranks, rank 1 never calls; rank 0's all-reduce has a 200 ms timeout.
//!   Measured: how far past 200 ms the `Timeout` comes.
//!
//! `cargo bench --bench collective_failure` prints median, min and max over 20 rounds each.

use std::sync::{Barrier, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rtune::collective::{CollectiveError, GroupOptions, ProcessGroup, ReduceOp, RingGroup};

const ROUNDS: usize = 20;

fn connect_all(world: usize, opts: &GroupOptions) -> Vec<RingGroup> {
    let ls: Vec<_> =
        (0..world).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<_> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
    thread::scope(|s| {
        let hs: Vec<_> = ls
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let (addrs, opts) = (&addrs, opts.clone());
                s.spawn(move || RingGroup::connect(r, world, l, addrs, opts).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// One round of `peer_lost`: the survivors' latencies from the drop.
fn peer_lost_round() -> Vec<Duration> {
    let opts = GroupOptions::new(1).timeout(Duration::from_secs(300));
    let groups = connect_all(3, &opts);
    let started = Barrier::new(3);
    let dropped_at = Mutex::new(None::<Instant>);
    let (tx, rx) = mpsc::channel();
    thread::scope(|s| {
        for (rank, mut g) in groups.into_iter().enumerate() {
            let (started, dropped_at, tx) = (&started, &dropped_at, tx.clone());
            s.spawn(move || {
                let mut buf = vec![1.0f32; 1 << 20];
                g.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                started.wait();
                if rank == 1 {
                    thread::sleep(Duration::from_millis(50));
                    *dropped_at.lock().unwrap() = Some(Instant::now());
                    drop(g);
                    return;
                }
                loop {
                    match g.all_reduce(&mut buf, ReduceOp::Sum) {
                        Ok(()) => buf.fill(1.0),
                        Err(CollectiveError::PeerLost { .. }) => break,
                        Err(e) => panic!("rank {rank}: expected PeerLost, got {e}"),
                    }
                }
                tx.send(Instant::now()).unwrap();
            });
        }
    });
    drop(tx);
    let dropped = dropped_at.lock().unwrap().expect("rank 1 dropped its group");
    rx.iter().map(|t| t.saturating_duration_since(dropped)).collect()
}

/// One round of `timeout_overshoot`: how long past the timeout rank 0's error came.
fn timeout_round(timeout: Duration) -> Duration {
    let opts = GroupOptions::new(2).timeout(timeout);
    let mut groups = connect_all(2, &opts);
    let silent = groups.pop().unwrap();
    let mut g = groups.pop().unwrap();
    let t = Instant::now();
    let e = g.all_reduce(&mut vec![1.0f32; 1000], ReduceOp::Sum).unwrap_err();
    let took = t.elapsed();
    assert!(matches!(e, CollectiveError::Timeout { .. }), "expected Timeout, got {e}");
    drop(silent);
    took.saturating_sub(timeout)
}

fn summary(name: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name:<20} median {:>8.3} ms   min {:>8.3} ms   max {:>8.3} ms   ({} samples)",
        ms(xs[xs.len() / 2]),
        ms(xs[0]),
        ms(xs[xs.len() - 1]),
        xs.len()
    );
}

fn main() {
    // `cargo test --benches` runs bench targets with `--bench` absent: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    summary("peer_lost", (0..ROUNDS).flat_map(|_| peer_lost_round()).collect());
    let timeout = Duration::from_millis(200);
    summary("timeout_overshoot", (0..ROUNDS).map(|_| timeout_round(timeout)).collect());
}
