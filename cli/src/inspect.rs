//! Experiments on disk: `rtune ls` (the experiments under a storage path), `rtune show` (an
//! experiment's trials or one trial's results), and the end-of-sweep table and JSON summary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rtune_searchers::{Metrics, TrialStatus};
use serde_json::json;

use rtune_driver::metrics::{RankFigures, rank_figures};
use rtune_driver::outcome::error_summary;
use rtune_driver::tune::experiment::can_restore;
use rtune_driver::tune::{ResultGrid, SweepState, TrialResult, sweep_state};

use crate::args::Format;

mod listing;
use crate::format::{counts, number, param_text, status_name};
pub use listing::ls;

/// Right-aligned numbers, left-aligned text, columns as wide as their widest cell.
fn text_table(headers: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            if cell.parse::<f64>().is_ok() {
                text.push_str(&format!("{cell:>w$}"));
            } else {
                text.push_str(&format!("{cell:<w$}"));
            }
        }
        text.trim_end().to_owned()
    };
    let mut out = vec![line(headers)];
    out.extend(rows.iter().map(|r| line(r)));
    out.join("\n")
}

/// The trials, best first when the sweep had a metric (at most `limit` rows, 0 = all). With
/// constraints, a line on how many trials met them first, and the feasible trials before the
/// others (a column says which).
pub(crate) fn trials_table(grid: &ResultGrid, limit: usize) -> String {
    let mut trials: Vec<&TrialResult> = grid.trials.iter().collect();
    let objectives = grid.objectives.as_slice();
    let constrained = !grid.constraints.is_empty();
    let feasible = |t: &TrialResult| grid.feasible(t);
    // A multi-objective sweep's front is marked, and comes first.
    let front: Option<Vec<&str>> = (objectives.len() > 1).then(|| {
        let front = grid.pareto_front().unwrap_or_default();
        front.into_iter().map(|t| t.trial_id()).collect()
    });
    let on_front = |t: &TrialResult| front.as_ref().is_some_and(|f| f.contains(&t.trial_id()));
    if let Some(rtune_searchers::Objective { metric, mode }) = objectives.first() {
        let key =
            |t: &TrialResult| t.last(metric).filter(|v| v.is_finite()).map(|v| mode.sign() * v);
        trials.sort_by(|a, b| {
            let first = feasible(b).cmp(&feasible(a)).then(on_front(b).cmp(&on_front(a)));
            first.then_with(|| match (key(a), key(b)) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
        });
    }
    // The params that differ between trials (constants of the space say nothing here).
    let params: Vec<String> = {
        let mut values: Vec<(String, Vec<String>)> = Vec::new();
        for t in &trials {
            for (k, v) in t.params().flatten() {
                match values.iter_mut().find(|(name, _)| *name == k) {
                    Some((_, seen)) => seen.push(v.to_string()),
                    None => values.push((k, vec![v.to_string()])),
                }
            }
        }
        let varies =
            |seen: &[String]| seen.len() < trials.len() || seen.iter().any(|v| *v != seen[0]);
        values
            .into_iter()
            .filter(|(_, seen)| trials.len() == 1 || varies(seen))
            .map(|(name, _)| name)
            .collect()
    };
    let mut headers = vec!["trial".to_owned(), "status".into(), "iter".into()];
    if constrained {
        headers.push("feasible".into());
    }
    if front.is_some() {
        headers.push("pareto".into());
    }
    headers.extend(objectives.iter().map(|o| o.metric.clone()));
    headers.extend(grid.constraints.iter().cloned());
    headers.extend(params.iter().cloned());
    let shown = if limit == 0 { trials.len() } else { limit.min(trials.len()) };
    let rows: Vec<Vec<String>> = trials[..shown]
        .iter()
        .map(|t| {
            let last = t.history().last();
            let get = |k: &str| last.and_then(|m| m.get(k)).map_or("-".into(), |v| number(*v));
            let mut row =
                vec![t.trial_id().to_owned(), status_name(t.status()), get("training_iteration")];
            if constrained {
                let mark = match (last, feasible(t)) {
                    (None, _) => "-",
                    (Some(_), true) => "yes",
                    (Some(_), false) => "no",
                };
                row.push(mark.into());
            }
            if front.is_some() {
                row.push(if on_front(t) { "*".into() } else { String::new() });
            }
            row.extend(objectives.iter().map(|o| get(&o.metric)));
            row.extend(grid.constraints.iter().map(|c| get(c)));
            let flat: BTreeMap<String, String> =
                t.params().flatten().into_iter().map(|(k, v)| (k, param_text(&v))).collect();
            row.extend(params.iter().map(|p| flat.get(p).cloned().unwrap_or_default()));
            row
        })
        .collect();
    let mut text = match constrained {
        true => format!("{}\n", feasible_line(grid)),
        false => String::new(),
    };
    text.push_str(&text_table(&headers, &rows));
    if shown < trials.len() {
        text.push_str(&format!(
            "\n… {} more (rtune show {})",
            trials.len() - shown,
            grid.path.display()
        ));
    }
    text
}

/// How many trials met the sweep's constraints, and what that means for its best trial.
pub(crate) fn feasible_line(grid: &ResultGrid) -> String {
    let reported = grid.trials.iter().filter(|t| !t.history().is_empty());
    let (reported, feasible) =
        reported.fold((0, 0), |(r, f), t| (r + 1, f + usize::from(grid.feasible(t))));
    let rule = grid.constraints_text();
    match feasible {
        0 if reported > 0 => format!(
            "no trial met the constraints ({rule}) of the {reported} that reported: there is no \
             best trial"
        ),
        _ => format!(
            "{feasible} of {reported} trials met the constraints ({rule}); the best is chosen \
             among them"
        ),
    }
}

fn metrics_json(m: Option<&Metrics>) -> serde_json::Value {
    m.map_or(serde_json::Value::Null, |m| {
        serde_json::Value::Object(rtune_driver::metrics::to_json(m))
    })
}

/// The trial's checkpoint to use: its best by the sweep's rule (`TrialResult::checkpoint`).
fn checkpoint_of(t: &TrialResult) -> Option<String> {
    t.checkpoint().ok().map(|c| c.path().display().to_string())
}

/// `rtune run --json`: name, path, metric, mode, best trial, trials by status, time; for a
/// sweep with several objectives, those and the trials of its Pareto front instead of a best.
pub fn summary(grid: &ResultGrid, time_s: f64) -> serde_json::Value {
    let trial = |t: &TrialResult| {
        json!({
            "trial_id": t.trial_id(),
            "params": t.params(),
            "metrics": metrics_json(t.history().last()),
            "checkpoint": checkpoint_of(t),
        })
    };
    let best = grid.best_result().ok().map(trial);
    let mut summary = json!({
        "name": grid.path.file_name().map(|n| n.to_string_lossy().into_owned()),
        "path": grid.path.display().to_string(),
        "metric": grid.objectives.metric(),
        "mode": grid.objectives.mode().map(|m| format!("{m:?}").to_lowercase()),
        "best": best,
        "trials": counts(grid.trials.iter().map(|t| t.status())),
        "unread_params": grid.unread_params().into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "time_s": time_s,
    });
    if !grid.constraints.is_empty() {
        summary["constraints"] = json!(grid.constraints);
        summary["feasible"] = json!(grid.trials.iter().filter(|t| grid.feasible(t)).count());
    }
    if !grid.objectives.several().is_empty() {
        let front: Vec<serde_json::Value> =
            grid.pareto_front().unwrap_or_default().into_iter().map(trial).collect();
        summary["objectives"] = json!(grid.objectives.several());
        summary["pareto_front"] = json!(front);
    }
    summary
}

/// `rtune watch` without a directory: the newest experiment in `./rtune_results` or the default
/// storage path, one whose driver is running (it has `driver.json`) before any other.
pub(crate) fn newest_experiment() -> Result<std::path::PathBuf> {
    let roots = storage_roots();
    let mut found = Vec::new();
    for root in &roots {
        let Ok(entries) = std::fs::read_dir(root) else { continue };
        for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
            if !can_restore(&path) {
                continue;
            }
            let running = path.join(rtune_driver::tune::DRIVER_FILE).exists();
            let state = path.join(rtune_driver::tune::STATE_FILE);
            let changed = std::fs::metadata(&state).and_then(|m| m.modified()).ok();
            found.push((running, changed, path));
        }
    }
    found.into_iter().max_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1))).map(|(_, _, p)| p).with_context(
        || {
            let shown: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
            format!("no experiment in {}; give its directory: rtune watch DIR", shown.join(" or "))
        },
    )
}

/// Where `rtune ls` and `rtune watch` look when given no folder: `./rtune_results` (where the
/// examples write), then the default storage path (`$RTUNE_STORAGE_PATH`, else
/// `~/rtune_results`).
pub(crate) fn storage_roots() -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from("rtune_results")];
    let default = rtune_driver::config::RunConfig::default().resolved_storage_path();
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    if !same(&roots[0], &default) {
        roots.push(default);
    }
    roots
}

/// A sweep's state in one word: `running`, `interrupted`, `stopped` (on a mistake), `finished`.
pub(crate) fn sweep_label(state: &SweepState) -> &'static str {
    match state {
        SweepState::Running(_) => "running",
        SweepState::Interrupted => "interrupted",
        SweepState::Stopped(_) => "stopped",
        SweepState::Finished => "finished",
    }
}

/// The line that says where the sweep in `dir` stands and what to do with it: `interrupted:
/// `rtune resume DIR`` (it goes on from there), `running (host .., pid ..): `rtune watch DIR`
/// follows it, `rtune stop DIR` ends it`, or `finished`.
pub(crate) fn state_line(dir: &Path, state: &SweepState) -> String {
    let dir = dir.display();
    match state {
        SweepState::Interrupted => format!("interrupted: `rtune resume {dir}` goes on with it"),
        SweepState::Stopped(mistake) => format!(
            "stopped on a mistake, its trials cut short: {mistake}\n  fix the sweep file and run \
             it as a new sweep (`rtune run FIXED.toml`), or `rtune resume {dir} --sweep \
             FIXED.toml` where the fix changes nothing this sweep recorded"
        ),
        SweepState::Running(holder) => format!(
            "running ({holder}): `rtune watch {dir}` follows it, `rtune stop {dir}` ends it"
        ),
        SweepState::Finished => "finished".into(),
    }
}

/// The trials the sweep in `dir` runs, as its settings say (a grid times `num_samples`); None
/// for one that runs until its time budget is spent.
pub(crate) fn sweep_trials(dir: &Path) -> Option<u64> {
    let settings = rtune_driver::tune::experiment::Settings::read(dir).ok()?;
    settings.trials.or(settings.tune.num_samples.limit())
}

/// The experiment's trials by status, as every view counts them: until the sweep has finished,
/// the trials it has not made yet are PENDING.
pub(crate) fn status_counts(grid: &ResultGrid, finished: bool) -> BTreeMap<String, usize> {
    let mut status = counts(grid.trials.iter().map(|t| t.status()));
    let made = grid.trials.len() as u64;
    let unmade = match sweep_trials(&grid.path) {
        Some(total) if !finished => total.saturating_sub(made) as usize,
        _ => 0,
    };
    if unmade > 0 {
        *status.entry(status_name(TrialStatus::Pending)).or_default() += unmade;
    }
    status
}

/// What a running sweep's `driver.json` holds: where its live stream is (with the token it
/// requires) and its metrics endpoint.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct DriverFile {
    pub(crate) address: String,
    pub(crate) token: String,
    pub(crate) pid: u32,
    /// `HOST:PORT` of its Prometheus endpoint (`GET /metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) metrics: Option<String>,
}

impl DriverFile {
    /// The running sweep's in `dir`, if it has one that reads.
    pub(crate) fn of(dir: &Path) -> Option<DriverFile> {
        let text = std::fs::read(dir.join(rtune_driver::tune::DRIVER_FILE)).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// What `show`, `stop` and `watch` say of a folder that holds no experiment.
pub(crate) fn not_an_experiment(dir: &Path) -> anyhow::Error {
    anyhow::anyhow!("{} is not an experiment directory (see `rtune ls`)", dir.display())
}

/// `rtune show DIR [TRIAL]`.
pub fn show(
    dir: &Path,
    trial: Option<&str>,
    format: Format,
    pareto: &[(String, rtune_searchers::Mode)],
) -> Result<()> {
    if !can_restore(dir) {
        return Err(not_an_experiment(dir));
    }
    let mut grid = ResultGrid::from_path(dir)?;
    if !pareto.is_empty() {
        let objectives: Vec<rtune_searchers::Objective> = pareto
            .iter()
            .map(|(metric, mode)| rtune_searchers::Objective {
                metric: metric.clone(),
                mode: *mode,
            })
            .collect();
        let front: Vec<TrialResult> =
            grid.pareto_front_by(&objectives)?.into_iter().cloned().collect();
        if format == Format::Table {
            let named: Vec<String> = pareto
                .iter()
                .map(|(m, mode)| {
                    format!(
                        "{m} ({})",
                        if *mode == rtune_searchers::Mode::Min { "min" } else { "max" }
                    )
                })
                .collect();
            println!(
                "Pareto front of {}: {} of {} trials",
                named.join(", "),
                front.len(),
                grid.trials.len()
            );
        }
        grid.trials = front;
    }
    let Some(which) = trial else {
        match format {
            Format::Table => {
                let state = sweep_state(dir);
                if !matches!(state, SweepState::Finished) {
                    println!("{}", state_line(dir, &state));
                }
                // A dead driver's `driver.json` (killed, it removed nothing) names an endpoint
                // nobody serves.
                let metrics = DriverFile::of(dir).and_then(|d| d.metrics);
                if let (SweepState::Running(_), Some(metrics)) = (&state, metrics) {
                    println!("metrics for Prometheus: {}", rtune_driver::monitor::url(metrics));
                }
                println!("{}", trials_table(&grid, 0))
            }
            Format::Json => {
                let trials: Vec<serde_json::Value> = grid
                    .trials
                    .iter()
                    .map(|t| {
                        json!({
                            "trial_id": t.trial_id(),
                            "status": status_name(t.status()),
                            "params": t.params(),
                            "metrics": metrics_json(t.history().last()),
                            "checkpoint": checkpoint_of(t),
                            "error": t.error(),
                            "path": t.path().display().to_string(),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&trials)?);
            }
            Format::Csv => print!("{}", grid.csv()?),
        }
        return Ok(());
    };
    let t = find_trial(&grid, which)?;
    match format {
        Format::Table => {
            println!(
                "trial {} ({}) in {}",
                t.trial_id(),
                status_name(t.status()),
                t.path().display()
            );
            println!("params: {}", serde_json::to_string(&t.params())?);
            if let Some(e) = &t.error() {
                let whole = t.path().join(rtune_driver::tune::ERROR_FILE);
                println!("error: {} (the whole text: {})", error_summary(e), whole.display());
            }
            // rtune's figures (the ranks', the run's) have lines of their own, below.
            let figure = rtune_driver::metrics::is_figure;
            let mut names: Vec<String> = Vec::new();
            for m in t.history() {
                for k in m.keys() {
                    if !names.contains(k) && k != "timestamp" && k != "done" && !figure(k) {
                        names.push(k.clone());
                    }
                }
            }
            let rows: Vec<Vec<String>> = t
                .history()
                .iter()
                .map(|m| {
                    names.iter().map(|k| m.get(k).map_or("-".into(), |v| number(*v))).collect()
                })
                .collect();
            println!("{}", text_table(&names, &rows));
            if let Some(ranks) = ranks(t.history()) {
                print!("{}", ranks_table(&ranks));
            }
            print!("{}", run_text(t.history()));
            print!("{}", resizes_text(t.path()));
        }
        Format::Json => {
            let history: Vec<serde_json::Value> =
                t.history().iter().map(|m| metrics_json(Some(m))).collect();
            let value = json!({
                "trial_id": t.trial_id(),
                "status": status_name(t.status()),
                "params": t.params(),
                "error": t.error(),
                "checkpoint": checkpoint_of(t),
                "history": history,
            });
            println!("{}", serde_json::to_string_pretty(&value)?);
        }
        Format::Csv => {
            let progress = t.path().join("progress.csv");
            let text = std::fs::read_to_string(&progress)
                .with_context(|| format!("cannot read {}", progress.display()))?;
            print!("{text}");
        }
    }
    Ok(())
}

/// How a trial's worker groups started (one line per attempt), how long its reports kept its
/// train function waiting, and what its checkpoints weighed and took, from its rows' figures
/// (`rtune_driver::metrics::{add_group_start, add_run_figures}`); empty where no worker measured them.
pub(crate) fn run_text(history: &[Metrics]) -> String {
    use rtune_driver::metrics::{group_start, run_figures};
    let mut text = String::new();
    for (start, first) in history.iter().filter_map(|m| Some((group_start(m)?, m))) {
        let of = match first.get(rtune_driver::metrics::GROUP_METRICS[0]) {
            Some(1.0) => " of 1 rank".to_owned(),
            Some(world) => format!(" of {world} ranks"),
            None => String::new(),
        };
        text.push_str(&format!(
            "attempt {}: its group{of} started in {:.3}s (reserve {:.3}s, spawn {:.3}s, join \
             {:.3}s)\n",
            start.attempt,
            start.total_s(),
            start.reserve_s,
            start.spawn_s,
            start.join_s
        ));
    }
    let figures: Vec<_> = history.iter().map(run_figures).collect();
    let steps: f64 = history.iter().filter_map(|m| m.get("time_step_s")).sum();
    let blocked: f64 = figures.iter().map(|f| f.report_s).sum();
    if blocked > 0.0 && steps > 0.0 {
        text.push_str(&format!(
            "reports kept the train function waiting {blocked:.3}s, {:.0}% of its steps' time\n",
            100.0 * blocked / steps
        ));
    }
    let checkpoints: Vec<_> = figures.iter().filter(|f| f.checkpoint_bytes > 0.0).collect();
    if !checkpoints.is_empty() {
        let n = checkpoints.len() as f64;
        let mean = |f: fn(&&rtune_driver::metrics::RunFigures) -> f64| {
            checkpoints.iter().map(f).sum::<f64>() / n
        };
        let uploads: f64 = figures.iter().map(|f| f.checkpoint_upload_s).sum();
        let waits: f64 = figures.iter().map(|f| f.checkpoint_wait_s).sum();
        let uploaded = match (uploads > 0.0, waits > 0.0) {
            (true, true) => format!(
                ", uploads {uploads:.3}s in all; reports waited {waits:.3}s for uploads behind"
            ),
            (true, false) => format!(", uploads {uploads:.3}s in all"),
            _ => String::new(),
        };
        text.push_str(&format!(
            "checkpoints: {}, {} each on average, written in {:.3}s{uploaded}\n",
            checkpoints.len(),
            crate::format::bytes(mean(|f| f.checkpoint_bytes)),
            mean(|f| f.checkpoint_write_s),
        ));
    }
    text
}

/// An elastic trial's resizes, one line each, from its list of them (`rtune_driver::record::
/// RESIZES_FILE`): after which iteration, in which attempt, from what to what size, and why.
pub(crate) fn resizes_text(run_dir: &Path) -> String {
    // Every resize as it happened, where the run wrote them down; else (an experiment of an
    // rtune before that) those its rows say.
    let resizes = rtune_driver::record::Resized::read(run_dir);
    if !resizes.is_empty() {
        let lines = resizes.iter().map(|r| {
            format!(
                "resized after iteration {} (attempt {}): {} -> {}: {}\n",
                r.after_iteration, r.attempt, r.from, r.to, r.why
            )
        });
        return lines.collect();
    }
    let Ok(rows) = std::fs::read_to_string(run_dir.join("result.json")) else {
        return String::new();
    };
    let mut text = String::new();
    for row in rows.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
        if let Some(resize) = row[rtune_driver::record::RESIZE_KEY].as_str() {
            let iteration = row["training_iteration"].as_f64().unwrap_or(0.0);
            text.push_str(&format!("resized before iteration {iteration}: {resize}\n"));
        }
    }
    text
}

/// Where a trial's ranks spent their steps, over its rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ranks {
    pub(crate) ranks: Vec<RankSummary>,
    /// The reports the figures are over.
    pub(crate) reports: usize,
    /// The share of the ranks' step time spent waiting for data, when it is above
    /// [`INPUT_BOUND`]: the trial is input-bound.
    pub(crate) input_bound: Option<f64>,
}

/// One rank's means over a trial's rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RankSummary {
    /// Its step: the train function's time from one report to the next.
    pub(crate) step_s: f64,
    /// The part of the step it worked: the step less its time in collectives (where a rank
    /// waits for the others).
    pub(crate) busy_s: f64,
    pub(crate) data_share: f64,
    pub(crate) collective_share: f64,
    pub(crate) bytes: f64,
    /// It works at least [`STRAGGLER`] times the ranks' median before the others wait for it.
    pub(crate) straggler: bool,
}

/// A rank that works this many times the ranks' median (or more) is a straggler.
pub(crate) const STRAGGLER: f64 = 1.2;
/// Ranks that wait for data more than this share of their steps make a trial input-bound.
pub(crate) const INPUT_BOUND: f64 = 0.2;

/// The ranks' figures of a trial's rows (`time_step_s` .., `ranks/R/..`); None where no
/// worker measured them.
pub(crate) fn ranks(history: &[Metrics]) -> Option<Ranks> {
    let rows: Vec<Vec<RankFigures>> =
        history.iter().map(rank_figures).filter(|r| !r.is_empty()).collect();
    // The rows of the group as it is now (a resume with other scaling changes its ranks).
    let count = rows.last()?.len();
    let rows: Vec<&Vec<RankFigures>> = rows.iter().filter(|r| r.len() == count).collect();
    // Each rank's sums over the rows: step, data, collective, bytes.
    let mut sums = vec![[0.0; 4]; count];
    for row in &rows {
        for (sum, f) in sums.iter_mut().zip(row.iter()) {
            let bytes = f.collective_bytes.unwrap_or(0.0);
            for (s, x) in sum.iter_mut().zip([f.step_s, f.data_s, f.collective_s, bytes]) {
                *s += x;
            }
        }
    }
    let n = rows.len() as f64;
    let share = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { 0.0 };
    let mut ranks: Vec<RankSummary> = sums
        .iter()
        .map(|&[step, data, collective, bytes]| RankSummary {
            step_s: step / n,
            busy_s: (step - collective).max(0.0) / n,
            data_share: share(data, step),
            collective_share: share(collective, step),
            bytes: bytes / n,
            straggler: false,
        })
        .collect();
    if ranks.len() > 1 {
        let mut busy: Vec<f64> = ranks.iter().map(|r| r.busy_s).collect();
        busy.sort_by(f64::total_cmp);
        let median = match busy.len() % 2 {
            1 => busy[busy.len() / 2],
            _ => (busy[busy.len() / 2 - 1] + busy[busy.len() / 2]) / 2.0,
        };
        // A millisecond's difference is noise, whatever its ratio.
        for r in &mut ranks {
            r.straggler = r.busy_s >= STRAGGLER * median && r.busy_s - median >= 1e-3;
        }
    }
    let (data, step) = sums.iter().fold((0.0, 0.0), |(d, s), sum| (d + sum[1], s + sum[0]));
    let input_bound = Some(share(data, step)).filter(|s| *s > INPUT_BOUND);
    Some(Ranks { ranks, reports: rows.len(), input_bound })
}

/// `rtune show DIR TRIAL`'s table of its ranks.
fn ranks_table(ranks: &Ranks) -> String {
    let names: Vec<String> = ["rank", "step", "busy", "data wait", "collective", "sent/step", ""]
        .map(String::from)
        .into();
    let rows: Vec<Vec<String>> = ranks
        .ranks
        .iter()
        .enumerate()
        .map(|(rank, r)| {
            vec![
                rank.to_string(),
                format!("{:.3}s", r.step_s),
                format!("{:.3}s", r.busy_s),
                format!("{:.0}%", r.data_share * 100.0),
                format!("{:.0}%", r.collective_share * 100.0),
                crate::format::bytes(r.bytes),
                if r.straggler { "straggler".into() } else { String::new() },
            ]
        })
        .collect();
    let mut text = format!(
        "ranks, means over {} reports (busy: the step less its time in collectives; a \
         straggler is busy {STRAGGLER}x the ranks' median or more):\n{}\n",
        ranks.reports,
        text_table(&names, &rows)
    );
    if let Some(share) = ranks.input_bound {
        text.push_str(&format!(
            "input-bound: the ranks wait for data {:.0}% of their steps\n",
            share * 100.0
        ));
    }
    text
}

/// The ranks of running trials, each with where its training thread is, as `rtune stack`
/// prints them.
pub(crate) fn stacks_text(trials: &[rtune_driver::proto::TrialStacks]) -> String {
    let mut text = String::new();
    for trial in trials {
        text.push_str(&format!("trial {} (attempt {})\n", trial.trial_id, trial.attempt));
        for rank in &trial.ranks {
            let at = match (rank.pid, rank.node.as_str()) {
                (0, _) => String::new(),
                (pid, "") => format!(" (pid {pid})"),
                (pid, node) => format!(" (pid {pid} on {node})"),
            };
            text.push_str(&format!("rank {}{at}:\n{}", rank.rank, rank.text));
        }
        text.push('\n');
    }
    text
}

pub(crate) fn find_trial<'g>(grid: &'g ResultGrid, which: &str) -> Result<&'g TrialResult> {
    let by_index = which.parse::<u64>().ok();
    grid.trials
        .iter()
        .find(|t| {
            t.trial_id() == which
                || t.path().file_name().is_some_and(|n| n == which)
                || by_index
                    .is_some_and(|i| t.trial_id().rsplit('_').next() == Some(&format!("{i:05}")))
        })
        .with_context(|| {
            let ids: Vec<&str> = grid.trials.iter().map(|t| t.trial_id()).collect();
            format!("no trial {which:?} in {}; its trials: {}", grid.path.display(), ids.join(", "))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group's start is said with its ranks, one rank as one.
    #[test]
    fn a_group_start_names_its_ranks() {
        for (world, said) in [(1.0, "its group of 1 rank started"), (3.0, "group of 3 ranks")] {
            let first = Metrics::from(
                [
                    ("world_size", world),
                    ("group_attempt", 0.0),
                    ("time_group_reserve_s", 0.5),
                    ("time_group_spawn_s", 0.25),
                    ("time_group_join_s", 0.125),
                ]
                .map(|(k, v)| (k.to_owned(), v)),
            );
            let text = run_text(&[first]);
            assert!(text.contains(said), "{text}");
        }
    }

    #[test]
    fn tables_align_numbers_right() {
        let headers = ["trial", "acc"].map(String::from);
        let rows = vec![vec!["a".into(), "0.5".into()], vec!["bb".into(), "10.25".into()]];
        assert_eq!(text_table(&headers, &rows), "trial  acc\na        0.5\nbb     10.25");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.123456), "0.1235");
        assert_eq!(number(1e-5), "1.000e-5");
    }

    /// A rank that works 1.2x the median or more is a straggler, whatever its step (the ranks
    /// wait for each other in collectives); ranks waiting for data over 20% of their steps
    /// make the trial input-bound; one rank's figures are the row's own keys.
    #[test]
    fn stragglers_and_starved_inputs_are_found() {
        let row = |ranks: &[(f64, f64, f64)]| -> Metrics {
            let mut m = Metrics::new();
            for (r, &(step, data, collective)) in ranks.iter().enumerate() {
                m.insert(format!("ranks/{r}/time_step_s"), step);
                m.insert(format!("ranks/{r}/time_data_s"), data);
                m.insert(format!("ranks/{r}/time_collective_s"), collective);
                m.insert(format!("ranks/{r}/collective_bytes"), 100.0);
            }
            m
        };
        // Rank 2 works 0.3 s; the others work 0.1 s and wait 0.2 s for it.
        let slow = [(0.3, 0.0, 0.2), (0.3, 0.0, 0.2), (0.3, 0.0, 0.0)];
        let found = ranks(&[row(&slow), row(&slow)]).unwrap();
        let marked: Vec<bool> = found.ranks.iter().map(|r| r.straggler).collect();
        assert_eq!(marked, [false, false, true]);
        assert_eq!((found.reports, found.input_bound), (2, None));
        // Even ranks: none marked; data waits of 30% make it input-bound.
        let starved = [(1.0, 0.3, 0.1), (1.0, 0.3, 0.1)];
        let found = ranks(&[row(&starved)]).unwrap();
        assert!(found.ranks.iter().all(|r| !r.straggler));
        assert!(found.input_bound.is_some_and(|s| (s - 0.3).abs() < 1e-9), "{found:?}");
        // One rank: the row's keys.
        let one = Metrics::from([("time_step_s".to_string(), 0.5), ("time_data_s".into(), 0.0)]);
        let found = ranks(&[one]).unwrap();
        assert_eq!(found.ranks.len(), 1);
        assert_eq!(found.ranks[0].step_s, 0.5);
        assert_eq!(ranks(&[Metrics::from([("loss".to_string(), 1.0)])]), None);
    }
}
