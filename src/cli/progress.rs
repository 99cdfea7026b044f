//! Plain progress lines for `rtune run` without a terminal (CI logs): one line per trial that
//! ends, and a status block at most every few seconds, so that a long sweep's log stays short.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rtune_searchers::{Metrics, Mode, TrialStatus};

use crate::callback::{Callback, TrialInfo};
use crate::error::Result;

/// What the sweep looks like now, from the callbacks' events.
#[derive(Debug, Default)]
struct Board {
    /// trial id → status and last metrics.
    trials: BTreeMap<String, (TrialStatus, Option<Metrics>)>,
    last_block: Option<Instant>,
}

/// Prints progress to `out` (stdout in `rtune run`).
pub struct Progress<W: Write + Send> {
    began: Instant,
    every: Duration,
    metric: Option<(String, Mode)>,
    total: Option<u64>,
    board: Mutex<(Board, W)>,
}

impl<W: Write + Send> Progress<W> {
    /// A status block at most every `every`; `total` trials when known.
    pub fn new(
        out: W,
        every: Duration,
        metric: Option<(String, Mode)>,
        total: Option<u64>,
    ) -> Self {
        Progress {
            began: Instant::now(),
            every,
            metric,
            total,
            board: Mutex::new((Board::default(), out)),
        }
    }

    /// Trials that ended before this driver began (a resumed sweep), counted in the status.
    pub fn knowing(
        self,
        trials: impl IntoIterator<Item = (String, TrialStatus, Option<Metrics>)>,
    ) -> Self {
        self.with_board(|board, _| {
            for (id, status, metrics) in trials {
                board.trials.insert(id, (status, metrics));
            }
            Ok(())
        });
        self
    }

    fn stamp(&self) -> String {
        format!("[{}]", super::inspect::clock(self.began.elapsed().as_secs_f64()))
    }

    fn metric_text(&self, metrics: Option<&Metrics>) -> String {
        let Some(metrics) = metrics else { return "no results".into() };
        let iteration =
            metrics.get("training_iteration").map_or(String::new(), |i| format!("iter {i}"));
        match &self.metric {
            Some((name, _)) => match metrics.get(name) {
                Some(v) => format!("{name}={v:.4} {iteration}"),
                None => format!("{name} not reported, {iteration}"),
            },
            None => iteration,
        }
    }

    fn with_board(&self, f: impl FnOnce(&mut Board, &mut W) -> std::io::Result<()>) {
        let mut guard = self.board.lock().unwrap_or_else(|p| p.into_inner());
        let (board, out) = &mut *guard;
        let _ = f(board, out).and_then(|()| out.flush());
    }

    /// The status block: elapsed, trials by status, the best so far.
    fn block(&self, board: &Board, out: &mut W) -> std::io::Result<()> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (status, _) in board.trials.values() {
            *counts.entry(format!("{status:?}").to_uppercase()).or_default() += 1;
        }
        let seen = board.trials.len() as u64;
        let mut parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        if let Some(total) = self.total.filter(|&t| t > seen) {
            parts.push(format!("{} PENDING", total - seen));
        }
        let best = self.metric.as_ref().and_then(|(name, mode)| {
            board
                .trials
                .iter()
                .filter_map(|(id, (_, m))| Some((id, m.as_ref()?.get(name)?)))
                .filter(|(_, v)| v.is_finite())
                .max_by(|a, b| (mode.sign() * a.1).total_cmp(&(mode.sign() * b.1)))
                .map(|(id, v)| format!("; best {name}={v:.4} ({id})"))
        });
        writeln!(
            out,
            "{} == {} trials: {}{}",
            self.stamp(),
            seen,
            parts.join(", "),
            best.unwrap_or_default()
        )
    }

    fn record(
        &self,
        trial: &TrialInfo,
        status: TrialStatus,
        metrics: Option<&Metrics>,
        end: Option<String>,
    ) {
        self.with_board(|board, out| {
            let entry = board.trials.entry(trial.trial_id.clone()).or_insert((status, None));
            entry.0 = status;
            if let Some(m) = metrics {
                entry.1 = Some(m.clone());
            }
            if let Some(how) = end {
                let text = self.metric_text(entry.1.as_ref());
                writeln!(out, "{} trial {} {how}: {text}", self.stamp(), trial.trial_id)?;
            }
            let due = board.last_block.is_none_or(|t| t.elapsed() >= self.every);
            if due {
                board.last_block = Some(Instant::now());
                self.block(board, out)?;
            }
            Ok(())
        });
    }
}

impl<W: Write + Send> Callback for Progress<W> {
    fn name(&self) -> String {
        "progress".into()
    }

    fn on_trial_start(&self, trial: &TrialInfo) -> Result<()> {
        self.record(trial, TrialStatus::Running, None, None);
        Ok(())
    }

    fn on_trial_result(&self, trial: &TrialInfo, result: &Metrics) -> Result<()> {
        self.record(trial, TrialStatus::Running, Some(result), None);
        Ok(())
    }

    fn on_trial_complete(&self, trial: &TrialInfo) -> Result<()> {
        self.record(trial, TrialStatus::Terminated, None, Some("TERMINATED".into()));
        Ok(())
    }

    fn on_trial_error(&self, trial: &TrialInfo, error: &str) -> Result<()> {
        let first_line = error.lines().next().unwrap_or_default();
        self.record(trial, TrialStatus::Error, None, Some(format!("ERROR ({first_line})")));
        Ok(())
    }

    fn on_experiment_end(&self, _trials: &[TrialInfo]) -> Result<()> {
        self.with_board(|board, out| self.block(board, out));
        Ok(())
    }
}
