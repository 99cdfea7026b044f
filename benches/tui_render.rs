//! The terminal UI with 10,000 trials: what one frame costs, and what one event costs.
//!
//! The UI redraws at most 10 times a second, so a frame must stay well under 100 ms for the
//! screen to stay smooth, and an event (a trial's result) must be cheap enough that a sweep
//! reporting thousands of results a second never backs up the UI's channel.
//!
//! * `frame_10k`: one full frame, 200x50, of 10,000 trials with 50-point learning curves,
//!   sorted by the metric, with the scheduler panel (ASHA rungs);
//! * `frame_10k_filtered`: the same with the RUNNING filter;
//! * `result_event_10k`: one result applied to a 10,000-trial model (elements/s = events/s).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use rtune::callback::TrialInfo;
use rtune::search::{Metrics, Mode, Params, RungStatus, SchedulerStatus, TrialStatus};
use rtune_cli::ui::model::{Event, Model, View};
use rtune_cli::ui::tui::view;

const TRIALS: usize = 10_000;
const POINTS: usize = 50;

fn info(i: usize) -> TrialInfo {
    TrialInfo {
        trial_id: format!("abcde_{i:05}"),
        status: TrialStatus::Running,
        params: Params::new()
            .with("lr", 1e-4 * (1 + i % 997) as f64)
            .with("hidden", [64, 128, 256][i % 3])
            .with("batch_size", [16, 32][i % 2]),
        path: PathBuf::from(format!("/nonexistent/trial_{i}")),
        stopped: false,
        checkpoint: None,
    }
}

fn result(iteration: usize, i: usize) -> Metrics {
    let acc = 1.0 - 1.0 / (1.0 + iteration as f64 * (1 + i % 89) as f64 / 100.0);
    [
        ("training_iteration".to_owned(), iteration as f64),
        ("val_acc".to_owned(), acc),
        ("loss".to_owned(), 1.0 - acc),
    ]
    .into()
}

fn big_model() -> Model {
    let metric = rtune::search::Objectives::one("val_acc", Mode::Max);
    let mut model = Model::new("bench".into(), "/nonexistent".into(), metric);
    model.total = Some(TRIALS as u64);
    model.capacity = (16.0, 0.0);
    model.per_trial = (2.0, 0.0);
    for i in 0..TRIALS {
        let t = info(i);
        for it in 1..=POINTS {
            model.apply(&Event::Result(t.clone(), result(it, i)));
        }
        if i % 7 != 0 {
            model.apply(&Event::Complete(t));
        }
    }
    let rung = |milestone: f64, recorded| RungStatus {
        bracket: 0,
        milestone,
        recorded,
        cutoff: Some(0.9),
    };
    model.apply(&Event::Scheduler(SchedulerStatus {
        kind: "asha".into(),
        time_attr: "training_iteration".into(),
        rungs: vec![rung(1.0, 10_000), rung(4.0, 2_500), rung(16.0, 625), rung(64.0, 0)],
        stopped: 9_000,
        ..SchedulerStatus::default()
    }));
    model
}

fn bench(c: &mut Criterion) {
    let model = big_model();
    let mut terminal = Terminal::new(TestBackend::new(200, 50)).expect("a test terminal");
    let best_first = View { sort: 3, descending: true, live: true, ..View::default() };
    c.bench_function("frame_10k", |b| {
        b.iter(|| terminal.draw(|f| view::render(f, black_box(&model), &best_first)).map(|_| ()))
    });
    let running = View { filter: Some(TrialStatus::Running), ..best_first.clone() };
    c.bench_function("frame_10k_filtered", |b| {
        b.iter(|| terminal.draw(|f| view::render(f, black_box(&model), &running)).map(|_| ()))
    });
    let mut group = c.benchmark_group("events");
    group.throughput(Throughput::Elements(1));
    let mut model = model;
    let mut n = 0;
    group.bench_function("result_event_10k", |b| {
        b.iter(|| {
            n += 1;
            let i = n % TRIALS;
            model.apply(black_box(&Event::Result(info(i), result(POINTS + n / TRIALS, i))));
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
