//! Plain progress lines for `rtune run` without a terminal (CI logs): one line per trial that
//! ends, and a status block at most every few seconds, so that a long sweep's log stays short.
//! The sweep is followed in the terminal UI's model, from the same events.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rtune_searchers::Metrics;

use rtune_driver::outcome::error_summary;

use super::format::{clock, counts, number};
use super::model::{Event, Follow, Model};

struct Board<W> {
    model: Model,
    last_block: Option<Instant>,
    out: W,
    /// Said that every trial so far failed the same way.
    same_failure_said: bool,
}

/// Prints progress to `out` (stdout in `rtune run`).
pub struct Progress<W: Write + Send> {
    began: Instant,
    every: Duration,
    board: Mutex<Board<W>>,
}

impl<W: Write + Send> Progress<W> {
    /// A status block at most every `every`. What the sweep optimises and how many trials it
    /// runs come with its begin event.
    pub fn new(out: W, every: Duration) -> Self {
        let model = Model::new(String::new(), PathBuf::new(), Default::default());
        let board = Board { model, last_block: None, out, same_failure_said: false };
        Progress { began: Instant::now(), every, board: Mutex::new(board) }
    }

    /// The sweep as known so far (its trials that ended before this driver began, or all the
    /// terminal UI saw before the viewer left it): the lines go on from it.
    pub(crate) fn know(&self, model: Model) {
        self.with_board(|board| {
            board.model = model;
            Ok(())
        });
    }

    fn stamp(&self) -> String {
        format!("[{}]", clock(self.began.elapsed().as_secs_f64()))
    }

    fn metric_text(&self, model: &Model, metrics: &Metrics) -> String {
        if metrics.is_empty() {
            return "no results".into();
        }
        let iteration =
            metrics.get("training_iteration").map_or(String::new(), |i| format!("iter {i}"));
        let mut said: Vec<String> = model
            .shown_metrics()
            .into_iter()
            .map(|name| match metrics.get(name) {
                Some(v) => format!("{name}={}", number(*v)),
                None => format!("{name} not reported,"),
            })
            .collect();
        said.push(iteration);
        said.join(" ")
    }

    fn with_board(&self, f: impl FnOnce(&mut Board<W>) -> std::io::Result<()>) {
        let mut board = self.board.lock().unwrap_or_else(|p| p.into_inner());
        let _ = f(&mut board).and_then(|()| board.out.flush());
    }

    /// The status block: elapsed, trials by status, the best so far.
    fn block(&self, board: &mut Board<W>) -> std::io::Result<()> {
        let model = &board.model;
        let started =
            model.trials().iter().filter(|t| t.status != rtune_searchers::TrialStatus::Pending);
        let counts = counts(started.map(|t| t.status));
        let seen = model.trials().len() as u64;
        let mut parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        if model.pending() > 0 {
            parts.push(format!("{} PENDING", model.pending()));
        }
        let best = model.best().zip(model.objectives.metric()).map(|(i, name)| {
            let t = &model.trials()[i];
            format!("; best {name}={} ({})", number(t.last[name]), t.id)
        });
        let best = best.or_else(|| {
            (!model.objectives.several().is_empty())
                .then(|| format!("; Pareto front: {} trials", model.front().len()))
        });
        let all = model.total.map_or(seen, |t| t.max(seen));
        let pace = match model.progress(self.began.elapsed().as_secs_f64()) {
            Some((share, Some(left))) => format!(" ({:.0}%, ETA {})", share * 100.0, clock(left)),
            Some((share, None)) => format!(" ({:.0}%)", share * 100.0),
            None => String::new(),
        };
        let trials = if all == 1 { "trial" } else { "trials" };
        let line = format!("{} == {all} {trials}{pace}: {}", self.stamp(), parts.join(", "));
        writeln!(board.out, "{line}{}", best.unwrap_or_default())
    }
}

impl<W: Write + Send> Follow for Progress<W> {
    fn name(&self) -> &'static str {
        "progress"
    }

    /// A line when a trial ends, the status block when it is due.
    fn follow(&self, event: Event) {
        self.with_board(|board| {
            if let Event::End = event {
                return self.block(board);
            }
            board.model.apply(&event);
            if let Event::Begin(_) = event {
                return Ok(());
            }
            let last = |t: &rtune_driver::callback::TrialInfo| {
                board.model.get(&t.trial_id).map(|r| r.last.clone()).unwrap_or_default()
            };
            let line = match &event {
                // A trial that never reported is as good as a failed one: said so, and counted
                // so at the end.
                Event::Complete(t) if last(t).is_empty() => Some((
                    t,
                    "TERMINATED without a result: it never reported (see its log); counted as \
                     failed"
                        .to_owned(),
                )),
                Event::Complete(t) => {
                    Some((t, format!("TERMINATED: {}", self.metric_text(&board.model, &last(t)))))
                }
                Event::Error(t, e) if last(t).is_empty() => {
                    Some((t, format!("ERROR: {}", error_summary(e))))
                }
                Event::Error(t, e) => Some((
                    t,
                    format!(
                        "ERROR after {}: {}",
                        self.metric_text(&board.model, &last(t)),
                        error_summary(e)
                    ),
                )),
                _ => None,
            };
            if let Some((trial, how)) = line {
                writeln!(board.out, "{} trial {} {how}", self.stamp(), trial.trial_id)?;
            }
            if let Some((n, error)) = board.model.same_failure()
                && !board.same_failure_said
            {
                board.same_failure_said = true;
                writeln!(
                    board.out,
                    "{} every trial so far failed the same way ({n} of {n}): {error}\n  the \
                     sweep goes on; fix the cause and rerun (Ctrl-C stops it resumably)",
                    self.stamp()
                )?;
            }
            if board.last_block.is_none_or(|t| t.elapsed() >= self.every) {
                board.last_block = Some(Instant::now());
                self.block(board)?;
            }
            Ok(())
        });
    }
}
