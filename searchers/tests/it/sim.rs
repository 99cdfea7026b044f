//! A discrete-event simulation of a sweep: synthetic learning curves, `workers` slots, a
//! simulated clock (no sleeping), a scheduler deciding on every reported epoch. It plays the
//! controller's part: it owns the trial table and carries out decisions.

#![allow(dead_code)]

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use rand::{RngExt, SeedableRng};
use rtune_searchers::{
    Decision, Metrics, Params, SchedulerState, TrialId, TrialScheduler, TrialStatus, TrialTable,
};

/// A synthetic trial: its accuracy after `e` epochs is `quality · (1 − exp(−e/tau))` plus a
/// little deterministic noise; an epoch takes `epoch_time` units of simulated time.
#[derive(Clone, Debug)]
pub struct Curve {
    pub quality: f64,
    pub tau: f64,
    pub epoch_time: f64,
    pub noise: Vec<f64>,
}

impl Curve {
    pub fn acc(&self, epoch: u64) -> f64 {
        let e = epoch as f64;
        let noise = self.noise.get(epoch as usize).copied().unwrap_or(0.0);
        self.quality * (1.0 - (-e / self.tau).exp()) + noise
    }
}

/// Random curves for `n` trials.
pub fn curves(n: usize, max_t: u64, seed: u64) -> Vec<Curve> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let quality = rng.random_range(0.5..1.0);
            let tau = rng.random_range(5.0..20.0);
            let epoch_time = rng.random_range(0.5..1.5);
            let noise = (0..=max_t).map(|_| rng.random_range(-0.003..0.003)).collect();
            Curve { quality, tau, epoch_time, noise }
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Event {
    time: f64,
    trial: TrialId,
}

impl Eq for Event {}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Min-heap on time, then trial id, so the order is total and deterministic.
        other.time.total_cmp(&self.time).then(other.trial.cmp(&self.trial))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Builds a fresh scheduler configured like the one under test.
pub type SchedulerFactory<'a> = &'a dyn Fn() -> Box<dyn TrialScheduler>;

/// What happened, for comparing runs.
#[derive(Clone, Debug, PartialEq)]
pub enum LogEntry {
    Started(TrialId),
    Decided(TrialId, u64, Decision),
    StopRequested(TrialId),
}

pub struct Outcome {
    /// Epochs trained, summed over trials.
    pub epochs: u64,
    /// Accuracy of each trial at its last epoch, and that epoch.
    pub last: Vec<(f64, u64)>,
    pub log: Vec<LogEntry>,
    pub end_time: f64,
}

/// Run `curves` (trial i has params `{"i": i}`) under `scheduler` with `workers` slots, each
/// trial for at most `max_t` epochs. If `swap_at` is set, after that many decisions the
/// scheduler is saved (through JSON), and `fresh()` is restored from it and used onwards.
pub fn run(
    curves: &[Curve],
    max_t: u64,
    workers: usize,
    scheduler: &mut dyn TrialScheduler,
    swap_at: Option<(usize, SchedulerFactory<'_>)>,
) -> Outcome {
    let mut table = TrialTable::new();
    let mut swapped: Option<Box<dyn TrialScheduler>> = None;
    let mut has_swapped = false;
    let mut epoch = vec![0u64; curves.len()];
    let mut curve_of: Vec<usize> = (0..curves.len()).collect();
    for i in 0..curves.len() {
        let id = TrialId(i as u64);
        table.add(id, Params::new().with("i", i));
        scheduler.on_trial_add(&table, id).expect("add");
    }
    // Every trial there will be is added.
    scheduler.on_no_more_trials();
    let mut heap = BinaryHeap::new();
    let mut now = 0.0;
    let mut running = 0;
    let mut log = Vec::new();
    let mut decisions = 0;
    let mut total_epochs = 0;
    loop {
        let sched: &mut dyn TrialScheduler = match swapped.as_mut() {
            Some(s) => s.as_mut(),
            None => &mut *scheduler,
        };
        while running < workers {
            let Some(id) = sched.choose_trial_to_run(&table) else { break };
            table.set_status(id, TrialStatus::Running);
            log.push(LogEntry::Started(id));
            let i = id.0 as usize;
            heap.push(Event { time: now + curves[curve_of[i]].epoch_time, trial: id });
            running += 1;
        }
        let Some(ev) = heap.pop() else { break };
        now = ev.time;
        let i = ev.trial.0 as usize;
        epoch[i] += 1;
        total_epochs += 1;
        let e = epoch[i];
        let acc = curves[curve_of[i]].acc(e);
        let result = Metrics::from([
            ("training_iteration".to_string(), e as f64),
            ("acc".to_string(), acc),
            ("time_total_s".to_string(), now),
        ]);
        table.set_result(ev.trial, result.clone());
        let decision = sched.on_trial_result(&table, ev.trial, &result).expect("result");
        decisions += 1;
        log.push(LogEntry::Decided(ev.trial, e, decision.clone()));
        let finished = e >= max_t;
        match decision {
            Decision::Continue if !finished => {
                heap.push(Event { time: now + curves[curve_of[i]].epoch_time, trial: ev.trial });
            }
            Decision::Continue | Decision::Stop => {
                table.set_status(ev.trial, TrialStatus::Terminated);
                sched.on_trial_complete(&table, ev.trial, Some(&result), false).expect("complete");
                running -= 1;
            }
            Decision::Pause => {
                table.set_status(ev.trial, TrialStatus::Paused);
                running -= 1;
            }
            Decision::Exploit { source, new_params } => {
                let s = source.0 as usize;
                curve_of[i] = curve_of[s];
                epoch[i] = epoch[s];
                table.set_params(ev.trial, new_params);
                if epoch[i] >= max_t {
                    table.set_status(ev.trial, TrialStatus::Terminated);
                    sched.on_trial_complete(&table, ev.trial, None, false).expect("complete");
                    running -= 1;
                } else {
                    heap.push(Event {
                        time: now + curves[curve_of[i]].epoch_time,
                        trial: ev.trial,
                    });
                }
            }
        }
        for id in sched.take_stop_requests() {
            log.push(LogEntry::StopRequested(id));
            if table.record(id).is_some_and(|r| r.status == TrialStatus::Running) {
                // Not expected from the schedulers here, but keep the books right.
                running -= 1;
                heap.retain(|e| e.trial != id);
            }
            table.set_status(id, TrialStatus::Terminated);
            sched.on_trial_complete(&table, id, None, false).expect("complete");
        }
        let snapshot = match swap_at {
            Some((at, _)) if decisions == at && !has_swapped => Some(sched.save_state()),
            _ => None,
        };
        if let (Some(saved), Some((_, fresh))) = (snapshot, swap_at) {
            let json = serde_json::to_string(&saved).expect("serialise");
            let back: SchedulerState = serde_json::from_str(&json).expect("deserialise");
            assert_eq!(back, saved, "state survives JSON");
            let mut s = fresh();
            s.restore_state(back).expect("restore");
            swapped = Some(s);
            has_swapped = true;
        }
    }
    let last = (0..curves.len()).map(|i| (curves[curve_of[i]].acc(epoch[i]), epoch[i])).collect();
    Outcome { epochs: total_epochs, last, log, end_time: now }
}
