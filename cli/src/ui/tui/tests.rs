//! The screen as ratatui's TestBackend draws it, from events as a live sweep sends them.

use std::path::PathBuf;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyModifiers};
use rtune_searchers::{Metrics, Mode, Objectives, Params, TrialStatus};

use super::{Action, on_key, view};
use crate::ui::model::{Event, Model, View};
use rtune_driver::callback::{Amount, TrialInfo};

fn info(i: usize, lr: f64) -> TrialInfo {
    TrialInfo {
        trial_id: format!("abcde_{i:05}"),
        status: TrialStatus::Running,
        params: Params::new().with("lr", lr).with("hidden", 64),
        path: PathBuf::from(format!("/nonexistent/trial_{i}")),
        stopped: false,
        checkpoint: None,
    }
}

fn result(iteration: f64, acc: f64) -> Metrics {
    [("training_iteration".to_owned(), iteration), ("acc".to_owned(), acc)].into_iter().collect()
}

/// Three trials of a sweep of 5 on 4 CPUs, each of 2 workers of 1 CPU: 0 ends at acc 0.5, 1
/// runs at 0.9 (the best), 2 failed. The header's figures come from the begin event.
fn model() -> Model {
    let mut m = Model::new(String::new(), PathBuf::new(), Objectives::default());
    let begin = rtune_driver::callback::ExperimentInfo {
        path: "/tmp/demo".into(),
        name: "demo".into(),
        objectives: Objectives::one("acc", Mode::Max),
        trials: Some(5),
        per_trial: Amount { cpus: 2.0, gpus: 0.0 },
        capacity: Some(Amount { cpus: 4.0, gpus: 0.0 }),
        ..Default::default()
    };
    m.apply(&Event::Begin(Box::new(begin)));
    assert_eq!(
        (m.total, m.per_trial, m.capacity, m.elastic),
        (Some(5), (2.0, 0.0), (4.0, 0.0), None)
    );
    let events = [
        Event::Start(info(0, 0.1)),
        Event::Result(info(0, 0.1), result(1.0, 0.3)),
        Event::Result(info(0, 0.1), result(2.0, 0.5)),
        Event::Complete(info(0, 0.1)),
        Event::Start(info(1, 0.01)),
        Event::Result(info(1, 0.01), result(1.0, 0.7)),
        Event::Result(info(1, 0.01), result(2.0, 0.9)),
        Event::Start(info(2, 0.001)),
        Event::Error(info(2, 0.001), "worker rank 1 panicked: boom".into()),
    ];
    for e in &events {
        m.apply(e);
    }
    m
}

/// The time left falls while the last trial runs (it grew with the time spent, at the pace of
/// the trials that ended, until the last one did).
#[test]
fn the_time_left_falls_while_the_last_trial_runs() {
    let mut m = Model::new(String::new(), PathBuf::new(), Objectives::default());
    let begin = rtune_driver::callback::ExperimentInfo {
        objectives: Objectives::one("acc", Mode::Max),
        trials: Some(2),
        ..Default::default()
    };
    m.apply(&Event::Begin(Box::new(begin)));
    for i in 1..=10 {
        m.apply(&Event::Result(info(0, 0.1), result(i as f64, 0.5)));
    }
    m.apply(&Event::Complete(info(0, 0.1)));
    m.apply(&Event::Start(info(1, 0.2)));
    m.apply(&Event::Result(info(1, 0.2), result(2.0, 0.5)));
    let (share, early) = m.progress(12.0).unwrap();
    m.apply(&Event::Result(info(1, 0.2), result(8.0, 0.5)));
    let (_, late) = m.progress(18.0).unwrap();
    let (early, late) = (early.unwrap(), late.unwrap());
    assert_eq!(share, 0.5);
    // 10 s a trial: 2 of its 10 iterations after 12 s, 8 after 18 s.
    assert!((early - 8.0).abs() < 1e-9 && (late - 2.0).abs() < 1e-9, "{early} then {late}");
}

fn screen(model: &Model, view: &View, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| view::render(f, model, view)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let mut text = String::new();
    for y in 0..height {
        for x in 0..width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

fn best_first() -> View {
    View { sort: 3, descending: true, live: true, ..View::default() }
}

#[test]
fn the_screen_shows_status_best_trial_curve_and_error() {
    let m = model();
    let text = screen(&m, &best_first(), 120, 30);
    assert!(text.contains("rtune · demo"), "{text}");
    assert!(
        text.contains("1 RUNNING") && text.contains("1 TERMINATED") && text.contains("1 ERROR"),
        "{text}"
    );
    assert!(text.contains("2 PENDING"), "{text}");
    assert!(text.contains("best acc=0.9000 (abcde_00001)"), "{text}");
    // One running trial of 2 CPUs on a 4-CPU machine: half the bar.
    assert!(text.contains("CPU ██████████░░░░░░░░░░ 2/4"), "{text}");
    // Best first: trial 1's row comes before trial 0's.
    let row = |id: &str| text.lines().position(|l| l.contains(id) && !l.contains("best")).unwrap();
    let (one, zero) = (row("abcde_00001"), row("abcde_00000"));
    assert!(one < zero, "{text}");
    assert!(text.contains("acc by iteration"), "{text}");
    assert!(text.contains("log of abcde_00001"), "{text}");
    assert!(text.contains("x stop sweep"), "{text}");
}

/// A resumed sweep shows the trials that ended before its driver from the begin event, and
/// its best trial is the best feasible one by the last results, as `rtune ls` and
/// `export --best` name it: not the trial with the higher acc that broke a constraint.
#[test]
fn a_resumed_sweep_shows_its_ended_trials_and_the_feasible_best() {
    let report = |acc: f64, mem: f64| -> Metrics {
        [("training_iteration".to_owned(), 2.0), ("acc".to_owned(), acc), ("mem".to_owned(), mem)]
            .into_iter()
            .collect()
    };
    let ended = |i: usize, acc: f64, mem: f64| rtune_driver::callback::EndedTrial {
        trial: TrialInfo { status: TrialStatus::Terminated, ..info(i, 0.1) },
        history: vec![report(acc, mem)],
        error: None,
    };
    let begin = rtune_driver::callback::ExperimentInfo {
        name: "again".into(),
        objectives: Objectives::one("acc", Mode::Max),
        constraints: vec!["mem".into()],
        restored: true,
        trials: Some(3),
        ended_before: vec![ended(0, 0.99, 1.0), ended(1, 0.8, 0.0)],
        ..Default::default()
    };
    let mut m = Model::new(String::new(), PathBuf::new(), Objectives::default());
    m.apply(&Event::Begin(Box::new(begin)));
    m.apply(&Event::Start(info(2, 0.2)));
    let text = screen(&m, &best_first(), 120, 30);
    assert!(text.contains("2 TERMINATED") && text.contains("1 RUNNING"), "{text}");
    assert!(text.contains("best acc=0.8000 (abcde_00001)"), "{text}");
}

/// An elastic sweep's table says each trial's ranks of its range, and the pool bar counts
/// the workers the running trials hold now, not their `min`.
#[test]
fn an_elastic_trial_shows_its_ranks_and_holds_what_it_grew_to() {
    let mut m = model();
    let begin = rtune_driver::callback::ExperimentInfo {
        objectives: Objectives::one("acc", Mode::Max),
        per_trial: Amount { cpus: 1.0, gpus: 0.0 },
        elastic: Some((1, 4)),
        capacity: Some(Amount { cpus: 4.0, gpus: 0.0 }),
        ..Default::default()
    };
    m.apply(&Event::Begin(Box::new(begin)));
    assert_eq!((m.per_trial, m.elastic), ((1.0, 0.0), Some((1, 4))));
    let mut grown = result(3.0, 0.95);
    grown.insert("world_size".into(), 3.0);
    m.apply(&Event::Result(info(1, 0.01), grown));
    let text = screen(&m, &best_first(), 120, 30);
    let row = text.lines().find(|l| l.contains("abcde_00001") && !l.contains("best")).unwrap();
    assert!(row.contains("3/1-4"), "{text}");
    assert!(text.contains("ranks"), "{text}");
    assert!(text.contains("CPU ███████████████░░░░░ 3/4"), "{text}");
    // The metric column keeps its sort mark: the ranks column sorts nothing.
    assert!(text.contains("acc▼"), "{text}");
}

#[test]
fn keys_sort_filter_and_select() {
    let m = model();
    let mut v = best_first();
    // Filter to errors (after PENDING, RUNNING, TERMINATED): the failed trial alone, its error
    // as the log.
    for _ in 0..4 {
        assert_eq!(on_key(KeyCode::Char('f'), KeyModifiers::NONE, &mut v, &m), Action::Nothing);
    }
    assert_eq!(v.filter, Some(TrialStatus::Error));
    let text = screen(&m, &v, 120, 30);
    assert!(text.contains("1 shown, filter: ERROR"), "{text}");
    assert!(text.contains("worker rank 1 panicked: boom"), "{text}");
    assert!(!text.contains("abcde_00000 "), "{text}");
    // Back to all, sorted by trial id ascending; select the second row.
    v.filter = None;
    v.sort = 0;
    v.descending = false;
    on_key(KeyCode::Down, KeyModifiers::NONE, &mut v, &m);
    assert_eq!(m.rows(&v), [0, 1, 2]);
    let text = screen(&m, &v, 120, 30);
    assert!(text.contains("log of abcde_00001"), "{text}");
    on_key(KeyCode::Down, KeyModifiers::NONE, &mut v, &m);
    on_key(KeyCode::Down, KeyModifiers::NONE, &mut v, &m);
    assert_eq!(v.selected, 2, "selection stops at the last row");
    let stop = on_key(KeyCode::Char('t'), KeyModifiers::NONE, &mut v, &m);
    assert_eq!(stop, Action::StopTrial("abcde_00002".into()), "t stops the selected trial");
    let hold = on_key(KeyCode::Char('p'), KeyModifiers::NONE, &mut v, &m);
    assert_eq!(hold, Action::HoldTrial { id: "abcde_00002".into(), resume: false });
    let mut paused = m.clone();
    paused.apply(&Event::Pause(info(2, 3e-3)));
    let resume = on_key(KeyCode::Char('p'), KeyModifiers::NONE, &mut v, &paused);
    assert_eq!(resume, Action::HoldTrial { id: "abcde_00002".into(), resume: true });
    assert_eq!(on_key(KeyCode::Char('q'), KeyModifiers::NONE, &mut v, &m), Action::Quit);
    assert_eq!(on_key(KeyCode::Char('x'), KeyModifiers::NONE, &mut v, &m), Action::Stop);
    assert_eq!(on_key(KeyCode::Char('c'), KeyModifiers::CONTROL, &mut v, &m), Action::CtrlC);
}

/// A trial made and waiting for its workers is listed as PENDING (and filtered as such); once
/// a sweep stopped before its end, nothing shows as running or waiting, and there is no ETA.
#[test]
fn pending_trials_are_listed_and_an_interrupted_sweep_shows_none_running() {
    let mut m = model();
    m.apply(&Event::Add(info(3, 0.5)));
    let text = screen(&m, &best_first(), 120, 30);
    // Trial 3 waits for its workers, and one is still to be made: 2 pending of 5.
    assert!(text.contains("abcde_00003") && text.contains("2 PENDING"), "{text}");
    let pending = View { filter: Some(TrialStatus::Pending), ..best_first() };
    assert_eq!(m.rows(&pending), [3]);
    assert!(text.contains("ETA"), "{text}");
    m.apply(&Event::End);
    let text = screen(&m, &best_first(), 120, 30);
    assert!(!text.contains("RUNNING") && !text.contains("PENDING"), "{text}");
    assert!(!text.contains("ETA") && text.contains("interrupted"), "{text}");
    assert!(text.contains("2 INTERRUPTED"), "{text}");
    assert_eq!(m.count(TrialStatus::Interrupted), 2, "the running and the waiting trial");
    // The table writes the status whole, at any width.
    for width in [80, 120, 200] {
        let text = screen(&m, &best_first(), width, 30);
        let row = text.lines().find(|l| l.contains("abcde_00003")).unwrap();
        assert!(row.contains("INTERRUPTED "), "at {width} columns: {row}");
    }
}

#[test]
fn a_small_terminal_gets_a_message() {
    let text = screen(&model(), &best_first(), 40, 10);
    assert!(text.contains("terminal too small: 40x10"), "{text}");
}

#[test]
fn ten_thousand_trials_draw_only_what_fits() {
    let mut m = Model::new("big".into(), "/tmp/big".into(), Objectives::one("acc", Mode::Max));
    for i in 0..10_000 {
        let t = info(i, 1e-3 * (i % 97) as f64);
        m.apply(&Event::Result(t, result(1.0, (i % 1000) as f64 / 1000.0)));
    }
    let text = screen(&m, &best_first(), 150, 40);
    assert!(text.contains("10000 shown"), "{text}");
    assert!(text.contains("best acc=0.9990"), "{text}");
}

#[test]
fn the_scheduler_panel_shows_asha_rungs_and_pbt_exploits() {
    use rtune_searchers::{ExploitStatus, RungStatus, SchedulerStatus, TrialId};
    let mut m = model();
    let rung =
        |milestone: f64, recorded, cutoff| RungStatus { bracket: 0, milestone, recorded, cutoff };
    m.apply(&Event::Scheduler(SchedulerStatus {
        kind: "asha".into(),
        time_attr: "training_iteration".into(),
        rungs: vec![rung(1.0, 6, Some(0.8125)), rung(4.0, 2, Some(0.9)), rung(16.0, 0, None)],
        stopped: 3,
        ..SchedulerStatus::default()
    }));
    let text = screen(&m, &best_first(), 150, 40);
    assert!(text.contains("ASHA rungs · 3 stopped early"), "{text}");
    assert!(text.contains("t≥     1     6 recorded  cutoff 0.8125"), "{text}");
    assert!(text.contains("t≥    16     0 recorded  cutoff -"), "{text}");
    // At 80x24 the cutoffs are read whole, in shorter words.
    let text = screen(&m, &best_first(), 80, 24);
    assert!(text.contains("t≥   1   6 rec cut 0.8125"), "{text}");
    assert!(text.contains("t≥   4   2 rec cut 0.9000"), "{text}");
    m.apply(&Event::Scheduler(SchedulerStatus {
        kind: "pbt".into(),
        time_attr: "training_iteration".into(),
        exploits: vec![ExploitStatus { time: 8.0, trial: TrialId(2), source: TrialId(0) }],
        perturbations: 5,
        ..SchedulerStatus::default()
    }));
    let text = screen(&m, &best_first(), 150, 40);
    assert!(text.contains("PBT exploits · 5 so far"), "{text}");
    assert!(text.contains("training_iteration=8  _00002 ← _00000"), "{text}");
}

/// A failed trial's log pane: its error's first line (not libtorch's backtrace after it), then
/// the end of rank 0's stderr.
#[test]
fn a_failed_trials_log_shows_the_errors_first_line_then_the_log() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    std::fs::write(dir.path().join("logs/rank_0.stderr"), "one\ntwo\nthree\n").unwrap();
    let mut m = Model::new("demo".into(), "/tmp/demo".into(), Objectives::default());
    let mut failed = info(0, 0.1);
    failed.path = dir.path().to_owned();
    let torch = "rank 0 (attempt 0): Internal torch error: CUDA out of memory.\nException raised \
                 from malloc at c10/cuda/CUDACachingAllocator.cpp:1 (most recent call first):\n\
                 frame #0: c10::Error::Error()";
    m.apply(&Event::Start(failed.clone()));
    m.apply(&Event::Error(failed, torch.into()));
    assert_eq!(
        m.log_tail(0, 3),
        ["error: rank 0 (attempt 0): Internal torch error: CUDA out of memory.", "two", "three"]
    );
    assert_eq!(m.log_tail(0, 1).len(), 1);
}

/// The header's GPU line: each GPU's use where this machine's GPUs are in the sweep, and no
/// line at all where there are none (as on a machine without NVML).
#[test]
fn the_header_shows_each_gpus_use_only_where_there_are_gpus() {
    let mut m = model();
    let without = screen(&m, &View::default(), 120, 30);
    assert!(!without.contains("GPU0"), "{without}");
    m.gpus = vec![rtune_driver::cluster::pool::GpuUsage {
        index: 0,
        name: "NVIDIA H100 80GB HBM3".into(),
        uuid: "GPU-1".into(),
        memory_used: 12_300_000_000,
        memory_total: 79_600_000_000,
        utilization: 31,
    }];
    let with = screen(&m, &View::default(), 120, 30);
    let lines: Vec<&str> = with.lines().collect();
    assert!(lines[3].contains("GPU0 31% 12.3/79.6 GB"), "{with}");
    // The table moved down a line, whole.
    assert!(with.contains("abcde_00001"), "{with}");
}

/// The selection is a trial, not a row number: when a result re-sorts the table, the
/// highlighted trial stays highlighted, and `t`/`p` act on it, not on whatever moved into its
/// row.
#[test]
fn the_selection_follows_its_trial_when_the_rows_re_sort() {
    let mut m = model();
    // Best first by acc: trial 1 (0.9), then 0 (0.5), then 2 (failed, no acc).
    let mut v = View { sort: 3, descending: true, ..View::default() };
    assert_eq!(m.rows(&v), [1, 0, 2]);
    on_key(KeyCode::Down, KeyModifiers::NONE, &mut v, &m);
    assert_eq!(v.trial.as_deref(), Some("abcde_00000"), "the second row is trial 0");
    // Trial 0 becomes the best: it moves to the first row, and stays selected.
    m.apply(&Event::Result(info(0, 0.1), result(3.0, 0.95)));
    assert_eq!(m.rows(&v), [0, 1, 2]);
    let text = screen(&m, &v, 120, 30);
    assert!(text.contains("log of abcde_00000"), "{text}");
    let stop = on_key(KeyCode::Char('t'), KeyModifiers::NONE, &mut v, &m);
    assert_eq!(stop, Action::StopTrial("abcde_00000".into()));
    // Moving goes on from where the trial is now.
    on_key(KeyCode::Down, KeyModifiers::NONE, &mut v, &m);
    assert_eq!(v.trial.as_deref(), Some("abcde_00001"));
    // Esc closes the help before it leaves the view.
    on_key(KeyCode::Char('?'), KeyModifiers::NONE, &mut v, &m);
    assert_eq!(on_key(KeyCode::Esc, KeyModifiers::NONE, &mut v, &m), Action::Nothing);
    assert!(!v.help);
    assert_eq!(on_key(KeyCode::Esc, KeyModifiers::NONE, &mut v, &m), Action::Quit);
}

/// At 80x24 every trial id and status is read whole (the chart moves under the table, with
/// its legend), the keys line is not cut, and `?` lists every key whole, at 80 columns as at
/// 200.
#[test]
fn a_narrow_terminal_shows_ids_statuses_and_keys_whole() {
    let m = model();
    let text = screen(&m, &best_first(), 80, 24);
    for whole in ["abcde_00000", "abcde_00001", "abcde_00002", "TERMINATED", "RUNNING", "ERROR"] {
        assert!(text.contains(whole), "{whole} cut at 80x24:\n{text}");
    }
    assert!(text.contains("acc by iteration"), "no chart at 80x24:\n{text}");
    assert!(text.contains("⣀") || text.contains("⠉") || text.contains("⢀"), "no curve:\n{text}");
    // The legend names the curves: the selected trial (the best, first when sorted best first).
    assert!(text.contains("━ _00001"), "no legend at 80x24:\n{text}");
    let wide = screen(&m, &View { selected: 1, trial: None, ..best_first() }, 120, 30);
    assert!(wide.contains("━ _00000 ━ best _00001"), "no legend for the best:\n{wide}");
    // Only there: none in the chart, over its newest points (ratatui draws its own where
    // there is room for it).
    let large = screen(&m, &View { selected: 1, trial: None, ..best_first() }, 200, 50);
    assert_eq!(large.matches("best _00001").count(), 1, "a legend over the curves:\n{large}");
    let last = text.lines().last().unwrap().trim_end();
    assert!(last.ends_with("q quit"), "the keys line is cut: {last:?}");
    for width in [80, 200] {
        let help = View { help: true, ..best_first() };
        let text = screen(&m, &help, width, 24);
        for key in [
            "select a trial",
            "sort by the next column",
            "filter by status: PENDING",
            "stop the selected trial (TERMINATED, its results kept)",
            "stop the sweep, resumable",
            "leave the view (the sweep goes on)",
            "? or Esc   close this help",
        ] {
            assert!(text.contains(key), "{key:?} not whole at {width} columns:\n{text}");
        }
    }
}

/// A multi-objective sweep: the header counts the Pareto front, the table shows every
/// objective, and sorting by that column puts the front first.
#[test]
fn a_multi_objective_sweep_marks_its_front() {
    let mut m = Model::new("moo".into(), "/tmp/moo".into(), Objectives::default());
    m.objectives = vec![
        rtune_searchers::Objective { metric: "loss".into(), mode: Mode::Min },
        rtune_searchers::Objective { metric: "size".into(), mode: Mode::Min },
    ]
    .into();
    let point = |loss: f64, size: f64| -> Metrics {
        [
            ("training_iteration".to_owned(), 1.0),
            ("loss".to_owned(), loss),
            ("size".to_owned(), size),
        ]
        .into_iter()
        .collect()
    };
    // 0 and 2 are on the front; 1 is beaten by 2 in both.
    for (i, (loss, size)) in [(0.1, 900.0), (0.5, 500.0), (0.3, 100.0)].into_iter().enumerate() {
        m.apply(&Event::Result(info(i, 0.1), point(loss, size)));
        m.apply(&Event::Complete(info(i, 0.1)));
    }
    assert_eq!(m.front(), [0, 2]);
    let view = best_first();
    let rows = m.rows(&view);
    assert_eq!(rows.iter().map(|&i| m.trials()[i].id.as_str()).next_back(), Some("abcde_00001"));
    let text = screen(&m, &view, 120, 30);
    assert!(text.contains("Pareto front of loss, size: 2 trials"), "{text}");
    assert!(text.contains("loss / size"), "{text}");
    assert!(text.contains("0.3000 / 100"), "{text}");
    // The front is marked as `rtune show` marks it.
    assert!(text.contains("*abcde_00000") && text.contains("*abcde_00002"), "{text}");
    assert!(text.contains(" abcde_00001") && !text.contains("*abcde_00001"), "{text}");
    // The curve follows the first objective.
    assert!(text.contains("loss by iteration"), "{text}");
}

/// The selected trial's ranks show over its log, as its latest result measured them: a rank
/// busy 1.2x the median marked a straggler, ranks starved of data said input-bound.
#[test]
fn the_selected_trials_ranks_show_a_straggler_and_starved_inputs() {
    let mut m = model();
    let mut last = result(3.0, 0.95);
    for (rank, (step, data, collective)) in [(0.3, 0.1, 0.2), (0.3, 0.1, 0.0)].iter().enumerate() {
        last.insert(format!("ranks/{rank}/time_step_s"), *step);
        last.insert(format!("ranks/{rank}/time_data_s"), *data);
        last.insert(format!("ranks/{rank}/time_collective_s"), *collective);
    }
    m.apply(&Event::Result(info(1, 0.01), last));
    let text = screen(&m, &best_first(), 120, 30);
    let line = |needle: &str| text.lines().find(|l| l.contains(needle)).unwrap_or_default();
    assert!(line("rank 1: step 0.300s, busy 0.300s").contains("straggler"), "{text}");
    assert!(!line("rank 0: step 0.300s, busy 0.100s").contains("straggler"), "{text}");
    assert!(text.contains("input-bound: the ranks wait for data 33% of their steps"), "{text}");
}
