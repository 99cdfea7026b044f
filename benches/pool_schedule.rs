//! Reservation throughput of the pool: 10 000 pending placement groups on 100 nodes.
//!
//! Nodes: 100 × 32 CPUs, every 4th with 4 GPUs. Requests: 1–8 bundles of 1–4 CPUs, all four
//! strategies, about one in eight asking for 0.5 or 1 GPU per bundle.
//!
//! * `drain_10k`: schedule, release everything reserved, repeat until the queue is empty
//!   (elements/s = reservations per second with a 10k backlog);
//! * `first_pass_10k`: one pass over 10k pending on an idle cluster (elements/s = decisions per
//!   second: every pending request is either reserved or left waiting);
//! * `saturated_pass_10k`: one pass when nothing fits any more (the cost of a no-op pass;
//!   elements/s = pending requests examined per second);
//! * `request_10k`: submitting 10k requests (validation + feasibility check).

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use rtune_driver::cluster::pool::{NodeSpec, PlacementRequest, Pool, Resources, Strategy};

const NODES: usize = 100;
const PENDING: usize = 10_000;

/// A tiny deterministic generator (xorshift), so the bench needs no `rand`.
struct Gen(u64);

impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn requests() -> Vec<PlacementRequest> {
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    let strategies =
        [Strategy::Pack, Strategy::Spread, Strategy::StrictPack, Strategy::StrictSpread];
    (0..PENDING)
        .map(|i| {
            let strategy = strategies[g.next(4) as usize];
            let cpus = (1 + g.next(4)) as f64;
            let mut workers = 1 + g.next(8) as usize;
            let mut bundle = Resources::new().cpu(cpus);
            if g.next(8) == 0 {
                bundle = bundle.gpu(if g.next(2) == 0 { 0.5 } else { 1.0 });
                if strategy == Strategy::StrictPack {
                    workers = workers.min(4);
                }
            }
            PlacementRequest::uniform(strategy, workers, bundle).label(format!("trial_{i}"))
        })
        .collect()
}

fn cluster() -> Pool {
    let mut pool = Pool::new();
    for i in 0..NODES {
        let gpus = if i % 4 == 0 { 4 } else { 0 };
        pool.add_node(NodeSpec::new(
            format!("10.0.{}.{}:7000", i / 256, i % 256),
            Resources::new().cpu(32.0).gpu(f64::from(gpus)),
        ))
        .unwrap();
    }
    pool
}

fn backlog(reqs: &[PlacementRequest]) -> Pool {
    let mut pool = cluster();
    for r in reqs {
        pool.request(r.clone()).unwrap();
    }
    pool
}

fn drain(pool: &mut Pool) -> (usize, usize) {
    let (mut reserved, mut rounds) = (0, 0);
    while pool.pending_count() > 0 {
        let r = pool.schedule();
        assert!(!r.is_empty(), "an idle cluster reserved nothing");
        reserved += r.len();
        rounds += 1;
        for res in r {
            pool.release(res.pg).unwrap();
        }
    }
    (reserved, rounds)
}

fn bench(c: &mut Criterion) {
    let reqs = requests();
    {
        let mut pool = backlog(&reqs);
        let first = pool.schedule().len();
        let saturated = pool.schedule().len();
        let mut pool = backlog(&reqs);
        let (reserved, rounds) = drain(&mut pool);
        eprintln!(
            "setup: first pass reserves {first} of {PENDING}, a second pass {saturated}; \
             draining reserves {reserved} in {rounds} passes"
        );
    }

    let mut group = c.benchmark_group("schedule");
    group.throughput(Throughput::Elements(PENDING as u64));
    group.bench_function("drain_10k", |b| {
        b.iter_batched(
            || backlog(&reqs),
            |mut pool| black_box(drain(&mut pool)),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("first_pass_10k", |b| {
        b.iter_batched(
            || backlog(&reqs),
            |mut pool| black_box(pool.schedule()),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("request_10k", |b| {
        b.iter_batched(
            cluster,
            |mut pool| {
                for r in &reqs {
                    pool.request(r.clone()).unwrap();
                }
                pool
            },
            BatchSize::LargeInput,
        )
    });
    // Elements of the no-op pass: the requests it examines, i.e. those still pending after
    // the first pass reserved what fitted (measured, not assumed).
    let mut pool = backlog(&reqs);
    pool.schedule();
    group.throughput(Throughput::Elements(pool.pending_count() as u64));
    group.bench_function("saturated_pass_10k", |b| {
        b.iter(|| {
            let r = pool.schedule();
            assert!(r.is_empty());
            r
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
