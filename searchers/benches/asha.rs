//! ASHA `on_trial_result` latency with 10,000 trials (defaults: grace 1, rf 4, max_t 100):
//! trials report epoch after epoch in round-robin until stopped; only the decision is timed.
//! Target: under 10 µs per decision.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use rand::{RngExt, SeedableRng};
use rtune_searchers::{Asha, Decision, Metrics, Mode, Params, TrialId, TrialScheduler, TrialTable};

const TRIALS: u64 = 10_000;

struct Feed {
    asha: Asha,
    view: TrialTable,
    alive: Vec<u64>,
    next_alive: Vec<u64>,
    epoch: u64,
    at: usize,
    rng: rand::rngs::StdRng,
}

impl Feed {
    fn new() -> Self {
        let mut view = TrialTable::new();
        let mut asha = Asha::new().metric("acc").mode(Mode::Max);
        for i in 0..TRIALS {
            view.add(TrialId(i), Params::new());
            asha.on_trial_add(&view, TrialId(i)).unwrap();
        }
        Self {
            asha,
            view,
            alive: (0..TRIALS).collect(),
            next_alive: Vec::new(),
            epoch: 1,
            at: 0,
            rng: rand::rngs::StdRng::seed_from_u64(7),
        }
    }

    /// One decision; returns the time it took.
    fn step(&mut self) -> Duration {
        if self.at == self.alive.len() {
            self.alive = std::mem::take(&mut self.next_alive);
            self.at = 0;
            self.epoch += 1;
            if self.alive.is_empty() {
                *self = Feed::new();
            }
        }
        let trial = self.alive[self.at];
        self.at += 1;
        let acc: f64 = self.rng.random::<f64>() * (1.0 - 1.0 / (self.epoch as f64 + 1.0));
        let r = Metrics::from([
            ("training_iteration".to_string(), self.epoch as f64),
            ("acc".to_string(), acc),
        ]);
        let start = Instant::now();
        let d = self.asha.on_trial_result(&self.view, TrialId(trial), black_box(&r)).unwrap();
        let took = start.elapsed();
        if d == Decision::Continue {
            self.next_alive.push(trial);
        }
        took
    }
}

fn bench(c: &mut Criterion) {
    let mut feed = Feed::new();
    c.bench_function("asha_on_trial_result_10k_trials", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| feed.step()).sum())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
