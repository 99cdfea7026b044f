//! Helpers: a group of ranks as threads of this process, over real TCP on 127.0.0.1.

use std::net::{SocketAddr, TcpListener};
use std::thread;

use rtune_collective::{GroupOptions, RingGroup};

/// Binds one listener per rank on 127.0.0.1:0 and returns them with their addresses
/// (what the rendezvous would publish).
pub fn listeners(world: usize) -> (Vec<TcpListener>, Vec<SocketAddr>) {
    let ls: Vec<_> = (0..world).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs = ls.iter().map(|l| l.local_addr().unwrap()).collect();
    (ls, addrs)
}

/// Runs `f(rank, group)` on one thread per rank after building the ring; returns the results
/// in rank order. Panics (failing the test) if the ring cannot be built.
pub fn run_ranks<R, F>(world: usize, opts: GroupOptions, f: F) -> Vec<R>
where
    R: Send,
    F: Fn(usize, RingGroup) -> R + Sync,
{
    let (ls, addrs) = listeners(world);
    thread::scope(|s| {
        let handles: Vec<_> = ls
            .into_iter()
            .enumerate()
            .map(|(rank, l)| {
                let (addrs, opts, f) = (&addrs, opts.clone(), &f);
                s.spawn(move || {
                    let g = RingGroup::connect(rank, world, l, addrs, opts).expect("connect");
                    f(rank, g)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
    })
}

/// Small integers, so any sum of a few of them is exact in f32.
pub fn value(rank: usize, i: usize) -> f32 {
    ((i * 7 + rank * 13) % 17) as f32
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
