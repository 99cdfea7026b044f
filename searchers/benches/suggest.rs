//! `suggest` latency of random search (BasicVariant), TPE, BOHB (its model-based path) and
//! NSGA-II (two objectives) after 100 and 1,000 finished trials on a 10-parameter space.
//! Target: TPE under 5 ms per suggestion at 1,000.

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use rtune_searchers::{
    BasicVariant, Bohb, Metrics, Mode, Nsga2, Objective, Params, SearchSpace, Searcher, Suggestion,
    Tpe, TrialId, choice, lograndint, loguniform, qrandint, randint, uniform,
};

fn space() -> SearchSpace {
    SearchSpace::new()
        .add("a", uniform(-5.0, 5.0).unwrap())
        .add("b", uniform(-5.0, 5.0).unwrap())
        .add("c", uniform(0.0, 1.0).unwrap())
        .add("lr", loguniform(1e-5, 1.0).unwrap())
        .add("wd", loguniform(1e-6, 1e-1).unwrap())
        .add("n", randint(1, 33).unwrap())
        .add("hidden", lograndint(1, 1025).unwrap())
        .add("batch", qrandint(16, 512, 16).unwrap())
        .add("opt", choice(["sgd", "adam", "rmsprop", "adagrad"]))
        .add("act", choice(["relu", "tanh", "gelu"]))
}

fn loss(p: &Params) -> f64 {
    let f = |k: &str| p.get::<f64>(k).unwrap();
    (f("a") - 1.0).powi(2) + (f("b") + 2.0).powi(2) + (f("lr").log10() + 3.0).powi(2) + f("c")
}

/// A searcher that has seen `n` finished trials: minimising the loss, or with `two` the loss
/// and the width (`hidden`) both.
fn warmed<S: Searcher>(mut s: S, n: u64, two: bool) -> S {
    if two {
        let objective = |metric: &str| Objective { metric: metric.into(), mode: Mode::Min };
        s.set_objectives(&[objective("loss"), objective("hidden")]).unwrap();
    } else {
        s.set_metric("loss", Mode::Min).unwrap();
    }
    for i in 0..n {
        let Suggestion::Params(p) = s.suggest(TrialId(i)).unwrap() else { panic!("no params") };
        // (BOHB reads the budget; one for all.)
        let r = Metrics::from([
            ("loss".to_string(), loss(&p)),
            ("hidden".to_string(), p.get::<f64>("hidden").unwrap()),
            ("training_iteration".to_string(), 1.0),
        ]);
        s.on_trial_complete(TrialId(i), Some(&r), false).unwrap();
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("suggest_10_params");
    for n in [100u64, 1000] {
        let random =
            warmed(BasicVariant::new(space()).unwrap().num_samples(1_000_000).seed(1), n, false);
        g.bench_with_input(BenchmarkId::new("random", n), &n, |b, &n| {
            b.iter_batched(
                || random.clone(),
                |mut s| black_box(s.suggest(TrialId(n)).unwrap()),
                BatchSize::SmallInput,
            )
        });
        let tpe = warmed(Tpe::with_space(space()).unwrap().seed(1), n, false);
        g.bench_with_input(BenchmarkId::new("tpe", n), &n, |b, &n| {
            b.iter_batched(
                || tpe.clone(),
                |mut s| black_box(s.suggest(TrialId(n)).unwrap()),
                BatchSize::SmallInput,
            )
        });
        let bohb =
            warmed(Bohb::with_space(space()).unwrap().random_fraction(0.0).seed(1), n, false);
        g.bench_with_input(BenchmarkId::new("bohb", n), &n, |b, &n| {
            b.iter_batched(
                || bohb.clone(),
                |mut s| black_box(s.suggest(TrialId(n)).unwrap()),
                BatchSize::SmallInput,
            )
        });
        let nsga2 = warmed(Nsga2::with_space(space()).unwrap().seed(1), n, true);
        g.bench_with_input(BenchmarkId::new("nsga2", n), &n, |b, &n| {
            b.iter_batched(
                || nsga2.clone(),
                |mut s| black_box(s.suggest(TrialId(n)).unwrap()),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
