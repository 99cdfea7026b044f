//! What a sweep returns (Ray's `ResultGrid`): every trial with its params, status, reported
//! results and checkpoints, the best one by a metric, and the same as polars tables: one row per
//! trial (`dataframe`, `get_dataframe`) or one per report (`results_history`), written to
//! parquet or CSV. `ResultGrid::from_path` reads a finished or interrupted experiment back.

use std::path::{Path, PathBuf};

use polars::prelude::{
    Column, CsvWriter, DataFrame, NamedFrom, ParquetWriter, PlSmallStr, SerWriter, Series,
};
use rtune_searchers::{Metrics, Mode, Objective, Objectives, Params, TrialStatus, Value};

use super::experiment::{SweepState, read_experiment};
use super::trial::TrialResult;
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::outcome::CheckpointRanking;

/// Which of a trial's results `ResultGrid::best_result_by` compares (Ray's `scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Its last result.
    #[default]
    Last,
    /// Its best result over the whole run.
    All,
}

/// What a sweep returns (Ray's `ResultGrid`).
#[derive(Debug, Clone)]
pub struct ResultGrid {
    /// The experiment directory.
    pub path: PathBuf,
    /// What the sweep optimises: nothing, one metric and its mode, or several (then trials
    /// are judged by their Pareto front).
    pub objectives: Objectives,
    /// Metrics that must be <= 0 for a trial to be feasible; the best trial and the Pareto
    /// front are chosen among feasible trials only.
    pub constraints: Vec<String>,
    /// `CheckpointConfig`'s score attribute and order: what ranks each trial's checkpoints
    /// before the sweep's metric does (see [`checkpoint_ranking`](Self::checkpoint_ranking)).
    pub checkpoint_score: Option<(String, Mode)>,
    /// Every trial, in creation order.
    pub trials: Vec<TrialResult>,
}

impl ResultGrid {
    /// Reads the experiment in `path` back, finished or interrupted (a trial that was running
    /// when its driver died keeps that status and the rows it had written).
    pub fn from_path(path: impl AsRef<Path>) -> Result<ResultGrid> {
        let path = crate::storage::staging::local_copy(path.as_ref())?;
        Ok(Self::read_with_time_spent(&path)?.0)
    }

    /// The grid and the seconds the sweep has run so far (all its drivers together), from one
    /// read of the experiment's state.
    ///
    /// Trials that were running or waiting when the sweep's driver stopped (no live driver
    /// runs it) are `INTERRUPTED`: they go on from their checkpoints when it is resumed.
    pub fn read_with_time_spent(path: &Path) -> Result<(ResultGrid, f64)> {
        let (saved, mut trials) = read_experiment(path, &RunConfig::default(), false)?;
        let unfinished = |s: TrialStatus| matches!(s, TrialStatus::Running | TrialStatus::Pending);
        if trials.values().any(|t| unfinished(t.status))
            && !matches!(super::experiment::sweep_state(path), SweepState::Running(_))
        {
            for t in trials.values_mut().filter(|t| unfinished(t.status)) {
                t.status = TrialStatus::Interrupted;
            }
        }
        let grid = ResultGrid {
            path: path.to_owned(),
            objectives: saved.objectives,
            constraints: saved.constraints,
            checkpoint_score: saved.checkpoint_score,
            trials: trials.into_values().collect(),
        };
        Ok((grid.ranking_checkpoints(), saved.time_spent_s))
    }

    /// The grid with each trial's checkpoints ranked by the sweep's rule.
    pub(crate) fn ranking_checkpoints(mut self) -> ResultGrid {
        let ranking = self.checkpoint_ranking(None);
        for t in &mut self.trials {
            t.ranking = ranking.clone();
        }
        self
    }

    /// How a trial's checkpoints rank ([`CheckpointRanking`]): by the sweep's checkpoint
    /// score when it has one, else by `metric` and its mode (the sweep's metric when None)
    /// among reports that meet the sweep's constraints, else the latest.
    pub fn checkpoint_ranking(&self, metric: Option<(&str, Mode)>) -> CheckpointRanking {
        let score =
            self.checkpoint_score.as_ref().map(|(attribute, order)| (attribute.as_str(), *order));
        let sweep = self.objectives.metric().zip(self.objectives.mode());
        CheckpointRanking::of(score, metric.or(sweep), &self.constraints)
    }

    /// The best trial by the sweep's own metric and mode, comparing each trial's last result
    /// (Ray's `get_best_result()`); see [`best_result_by`](Self::best_result_by).
    pub fn best_result(&self) -> Result<&TrialResult> {
        self.best_result_by(None, None, Scope::Last)
    }

    /// The trial whose `metric` is best in `mode` (the sweep's own metric and mode when `None`),
    /// comparing each trial's last result (`Scope::Last`) or its best one (`Scope::All`). NaN
    /// and infinities are left out, and so are trials that never reported the metric; of
    /// equally good trials the first wins (as in Ray). With constraints, only feasible results
    /// count ([`feasible`](Self::feasible)); an error says so when none is.
    pub fn best_result_by(
        &self,
        metric: Option<&str>,
        mode: Option<Mode>,
        scope: Scope,
    ) -> Result<&TrialResult> {
        let (metric, mode) = self.target(metric, mode, "ResultGrid::best_result")?;
        let best = match scope {
            // The rule every view of the sweep names its best trial by.
            Scope::Last => {
                let lasts = self.trials.iter().map(|t| t.result().and_then(|r| r.metrics.as_ref()));
                rtune_searchers::best_trial(lasts, metric, mode, &self.constraints)
                    .map(|i| &self.trials[i])
            }
            Scope::All => self
                .trials
                .iter()
                .filter_map(|t| self.best_feasible(t, metric, mode).map(|v| (t, mode.sign() * v)))
                // The first of equals, as Ray's `max` picks.
                .reduce(|best, t| if t.1 > best.1 { t } else { best })
                .map(|(t, _)| t),
        };
        let ranked = |t: &TrialResult| t.last(metric).is_some_and(f64::is_finite);
        if best.is_none() && self.trials.iter().any(ranked) {
            return Err(self.none_feasible(metric));
        }
        best.ok_or_else(|| Error::Metric {
            name: metric.to_owned(),
            problem: match self.metric_names().as_slice() {
                [] => {
                    "has no value in any trial of this sweep: no trial reported a result".to_owned()
                }
                names => format!(
                    "has no finite value in any trial of this sweep; reported were: {}",
                    names.join(", ")
                ),
            },
        })
    }

    /// Whether a trial's last result meets the sweep's constraints: each reported and <= 0.
    /// Every trial does in a sweep without constraints.
    pub fn feasible(&self, t: &TrialResult) -> bool {
        let last = t.result().and_then(|r| r.metrics.as_ref());
        self.constraints.is_empty() || last.is_some_and(|m| self.meets(m))
    }

    /// Whether a result meets the sweep's constraints (every result does without them).
    pub fn meets(&self, m: &Metrics) -> bool {
        rtune_searchers::violation(&self.constraints, m) == 0.0
    }

    /// The best finite value of `metric` over a trial's feasible reports.
    fn best_feasible(&self, t: &TrialResult, metric: &str, mode: Mode) -> Option<f64> {
        t.history()
            .iter()
            .filter(|m| self.meets(m))
            .filter_map(|m| m.get(metric).copied().filter(|v| v.is_finite()))
            .max_by(|a, b| (mode.sign() * a).total_cmp(&(mode.sign() * b)))
    }

    /// The constraints as a reader checks them: `mem_gb <= 0, latency_over <= 0`.
    pub fn constraints_text(&self) -> String {
        self.constraints.iter().map(|c| format!("{c} <= 0")).collect::<Vec<_>>().join(", ")
    }

    /// The error for a sweep whose ranked trials all violate its constraints.
    fn none_feasible(&self, metric: &str) -> Error {
        let ranked = self.trials.iter().filter(|t| t.last(metric).is_some()).count();
        Error::Metric {
            name: metric.to_owned(),
            problem: format!(
                "ranks no feasible trial: none of the {ranked} trials that reported it met the \
                 sweep's constraints ({}) in its last result",
                self.constraints_text()
            ),
        }
    }

    /// The metric and mode to rank by: the ones given, else the sweep's.
    fn target<'a>(
        &'a self,
        metric: Option<&'a str>,
        mode: Option<Mode>,
        caller: &'static str,
    ) -> Result<(&'a str, Mode)> {
        let metric =
            metric.or(self.objectives.metric()).ok_or_else(|| match self.objectives.several() {
                [] => Error::config(caller, "no metric given and the sweep had none; name one"),
                several => Error::config(
                    caller,
                    format!(
                        "the sweep has {} objectives ({}): name the metric to rank by, or take \
                         the trials of its Pareto front (pareto_front)",
                        several.len(),
                        several.iter().map(|o| o.metric.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ),
            })?;
        let mode = mode.or(self.objectives.mode()).ok_or_else(|| {
            Error::config(caller, "no mode given and the sweep had none; use Mode::Max or Min")
        })?;
        Ok((metric, mode))
    }

    /// The trials on the Pareto front of the sweep's objectives (a multi-objective sweep's);
    /// see [`pareto_front_by`](Self::pareto_front_by).
    pub fn pareto_front(&self) -> Result<Vec<&TrialResult>> {
        let objectives = self.objectives.several();
        if objectives.is_empty() {
            return Err(Error::config(
                "ResultGrid::pareto_front",
                "the sweep had fewer than two objectives: name them (pareto_front_by), or take \
                 its best trial (best_result)",
            ));
        }
        self.pareto_front_by(objectives)
    }

    /// The trials on the Pareto front of several objectives, each a metric and its mode
    /// (`Objective { metric: "val_loss".into(), mode: Mode::Min }`, ..), judged by each trial's
    /// last result: those no other trial beats in one objective without doing worse in
    /// another. Trials without a finite value of every objective are left out.
    pub fn pareto_front_by(&self, objectives: &[Objective]) -> Result<Vec<&TrialResult>> {
        if objectives.len() < 2 {
            return Err(Error::config(
                "ResultGrid::pareto_front_by",
                "give two objectives or more (each a metric and its mode, e.g. val_loss and \
                 Mode::Min); for one, use best_result_by",
            ));
        }
        let modes: Vec<Mode> = objectives.iter().map(|o| o.mode).collect();
        let feasible: Vec<&TrialResult> = self.trials.iter().filter(|t| self.feasible(t)).collect();
        let front = rtune_searchers::pareto_front_where_finite(&feasible, &modes, |t, k| {
            t.last(&objectives[k].metric)
        });
        let names: Vec<&str> = objectives.iter().map(|o| o.metric.as_str()).collect();
        let ranked = |t: &TrialResult| names.iter().all(|m| t.last(m).is_some());
        if front.is_empty() && self.trials.iter().any(ranked) && !feasible.iter().any(|t| ranked(t))
        {
            return Err(self.none_feasible(&names.join("`, `")));
        }
        if front.is_empty() {
            return Err(Error::Metric {
                name: names.join("`, `"),
                problem: format!(
                    "have finite values together in no trial of this sweep; reported were: {}",
                    self.metric_names().join(", ")
                ),
            });
        }
        Ok(front.into_iter().map(|i| feasible[i]).collect())
    }

    /// Params some trial's train function never read, each with the number of such trials:
    /// a search over them changed nothing.
    pub fn unread_params(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for key in
            self.trials.iter().filter_map(|t| t.result.as_ref()).flat_map(|r| &r.unread_params)
        {
            match counts.iter_mut().find(|(k, _)| k == key) {
                Some((_, n)) => *n += 1,
                None => counts.push((key.clone(), 1)),
            }
        }
        counts
    }

    /// The trials that failed.
    pub fn errors(&self) -> Vec<&TrialResult> {
        self.trials.iter().filter(|t| t.status == TrialStatus::Error).collect()
    }

    /// One row per trial: `trial_id`, `status`, every param as `config/<name>`, the last
    /// reported metrics, `best/<metric>` (the best value of the sweep's metric over the trial's
    /// reports, its feasible ones with constraints, when the sweep had one), `feasible`
    /// (whether its last result met the constraints, with constraints), `pareto` (whether the
    /// trial is on the Pareto front of a multi-objective sweep's objectives), `checkpoint_path`, `placement` (where its ranks ran:
    /// `node/gpu:0 node/cpu`, rank by rank), `error` and `path`.
    pub fn dataframe(&self) -> Result<DataFrame> {
        self.table(None)
    }

    /// Like `dataframe`, with each trial's metrics taken from its report with the best
    /// `filter_metric` in `filter_mode` instead of its last (Ray's `get_dataframe`).
    pub fn get_dataframe(
        &self,
        filter_metric: Option<&str>,
        filter_mode: Option<Mode>,
    ) -> Result<DataFrame> {
        match filter_metric {
            None => self.table(None),
            Some(metric) => {
                let mode = filter_mode.or(self.objectives.mode()).ok_or_else(|| {
                    Error::config("ResultGrid::get_dataframe", "filter_metric needs a mode")
                })?;
                self.table(Some((metric, mode)))
            }
        }
    }

    fn table(&self, pick: Option<(&str, Mode)>) -> Result<DataFrame> {
        let rows: Vec<Option<&Metrics>> = self
            .trials
            .iter()
            .map(|t| match pick {
                None => t.history().last(),
                Some((metric, mode)) => t.best_report(metric, mode),
            })
            .collect();
        let mut columns = vec![
            text("trial_id", self.trials.iter().map(|t| Some(t.trial_id.clone()))),
            text("status", self.trials.iter().map(|t| Some(t.status.name().to_owned()))),
        ];
        columns.extend(param_columns(self.trials.iter().map(|t| &t.params)));
        columns.extend(metric_columns(&rows));
        if self.trials.iter().any(|t| t.bracket.is_some()) {
            let brackets: Vec<Option<u32>> =
                self.trials.iter().map(|t| t.bracket.map(|b| b as u32)).collect();
            columns.push(Column::new("bracket".into(), brackets));
        }
        if let Some(Objective { metric, mode }) = self.objectives.single() {
            let best: Vec<Option<f64>> =
                self.trials.iter().map(|t| self.best_feasible(t, metric, *mode)).collect();
            columns.push(Column::new(format!("best/{metric}").into(), best));
        }
        if !self.constraints.is_empty() {
            // Null where the trial reported nothing yet.
            let feasible: Vec<Option<bool>> =
                self.trials.iter().map(|t| t.history().last().map(|_| self.feasible(t))).collect();
            columns.push(Column::new("feasible".into(), feasible));
        }
        if self.objectives.len() > 1 {
            // Null where the front is undefined (no trial has every objective yet).
            let front = self
                .pareto_front()
                .ok()
                .map(|f| f.into_iter().map(|t| &t.trial_id).collect::<Vec<_>>());
            let on: Vec<Option<bool>> = self
                .trials
                .iter()
                .map(|t| front.as_ref().map(|f| f.contains(&&t.trial_id)))
                .collect();
            columns.push(Column::new("pareto".into(), on));
        }
        let checkpoint = |t: &TrialResult| {
            let ck = t.result.as_ref()?.checkpoint.as_ref()?;
            Some(ck.path().display().to_string())
        };
        columns.push(text("checkpoint_path", self.trials.iter().map(checkpoint)));
        let placement = |t: &TrialResult| t.result.as_ref()?.placement.clone();
        columns.push(text("placement", self.trials.iter().map(placement)));
        columns.push(text("error", self.trials.iter().map(|t| t.error.clone())));
        columns.push(text("path", self.trials.iter().map(|t| Some(t.path.display().to_string()))));
        Ok(DataFrame::new(self.trials.len(), columns)?)
    }

    /// Every reported result of every trial, one row each, in trial order: `trial_id`, the
    /// params as `config/<name>`, and the metrics (a metric a trial did not report is null).
    pub fn results_history(&self) -> Result<DataFrame> {
        let mut ids = Vec::new();
        let mut params = Vec::new();
        let mut rows = Vec::new();
        for t in &self.trials {
            for m in t.history() {
                ids.push(Some(t.trial_id.clone()));
                params.push(&t.params);
                rows.push(Some(m));
            }
        }
        let height = rows.len();
        let mut columns = vec![text("trial_id", ids.into_iter())];
        columns.extend(param_columns(params.into_iter()));
        columns.extend(metric_columns(&rows));
        Ok(DataFrame::new(height, columns)?)
    }

    /// Writes `dataframe()` to a parquet file.
    pub fn write_parquet(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
        ParquetWriter::new(file).finish(&mut self.dataframe()?)?;
        Ok(())
    }

    /// Writes `dataframe()` to a CSV file (with a header row).
    pub fn write_csv(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.csv()?).map_err(|e| Error::io(path, e))
    }

    /// `dataframe()` as CSV text (with a header row).
    pub fn csv(&self) -> Result<String> {
        let mut bytes = Vec::new();
        CsvWriter::new(&mut bytes).finish(&mut self.dataframe()?)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Every metric name reported by some trial, sorted.
    fn metric_names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.trials.iter().flat_map(|t| t.history()).flat_map(|m| m.keys().cloned()).collect();
        names.sort();
        names.dedup();
        names
    }
}

fn text(name: &str, values: impl Iterator<Item = Option<String>>) -> Column {
    Column::new(name.into(), values.collect::<Vec<_>>())
}

/// One `config/<name>` column per flattened param, typed by what the trials hold: integers,
/// numbers, booleans, or text (anything mixed or nested is shown as text).
fn param_columns<'a>(params: impl Iterator<Item = &'a Params>) -> Vec<Column> {
    let flat: Vec<Vec<(String, Value)>> = params.map(|p| p.flatten()).collect();
    let mut names: Vec<String> = Vec::new();
    for row in &flat {
        for (name, _) in row {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names
        .iter()
        .map(|name| {
            let cells: Vec<Option<&Value>> = flat
                .iter()
                .map(|row| row.iter().find(|(k, _)| k == name).map(|(_, v)| v))
                .collect();
            typed(format!("config/{name}").into(), &cells)
        })
        .collect()
}

fn typed(name: PlSmallStr, cells: &[Option<&Value>]) -> Column {
    let present = || cells.iter().flatten();
    let series = if present().all(|v| matches!(v, Value::Int(_))) {
        Series::new(name, cells.iter().map(|c| c.and_then(Value::as_i64)).collect::<Vec<_>>())
    } else if present().all(|v| matches!(v, Value::Int(_) | Value::Float(_))) {
        Series::new(name, cells.iter().map(|c| c.and_then(Value::as_f64)).collect::<Vec<_>>())
    } else if present().all(|v| matches!(v, Value::Bool(_))) {
        let bools = cells.iter().map(|c| match c {
            Some(Value::Bool(b)) => Some(*b),
            _ => None,
        });
        Series::new(name, bools.collect::<Vec<_>>())
    } else {
        let texts = cells.iter().map(|c| {
            c.map(|v| match v {
                Value::Str(s) => s.clone(),
                other => other.to_string(),
            })
        });
        Series::new(name, texts.collect::<Vec<_>>())
    };
    series.into()
}

/// One column per metric name any row has (rtune's automatic ones first, in Ray's order; then
/// the reported ones by name); a row without it is null. Metrics are Float64, but for the
/// counts and the seconds since the epoch that rtune adds (Int64, as in Ray's tables: a CSV
/// says `16`, not `16.0`).
fn metric_columns(rows: &[Option<&Metrics>]) -> Vec<Column> {
    const WHOLE: [&str; 3] = ["training_iteration", "timestamp", "iterations_since_restore"];
    let mut names: Vec<&str> = Vec::new();
    for m in rows.iter().flatten() {
        for name in m.keys() {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    let auto = |n: &str| crate::metrics::AUTO_METRICS.iter().position(|a| *a == n);
    names.sort_by_key(|n| (auto(n).is_none(), auto(n), *n));
    names
        .into_iter()
        .map(|name| {
            let values: Vec<Option<f64>> =
                rows.iter().map(|m| m.and_then(|m| m.get(name).copied())).collect();
            let whole = |v: &Option<f64>| v.is_none_or(|x| x.fract() == 0.0 && x.abs() < 9e15);
            if WHOLE.contains(&name) && values.iter().all(whole) {
                let ints: Vec<Option<i64>> = values.iter().map(|v| v.map(|x| x as i64)).collect();
                return Column::new(name.into(), ints);
            }
            Column::new(name.into(), values)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::TrainResult;

    fn trial(id: &str, params: Params, history: &[&[(&str, f64)]]) -> TrialResult {
        let history: Vec<Metrics> = history
            .iter()
            .map(|row| row.iter().map(|&(k, v)| (k.to_owned(), v)).collect())
            .collect();
        TrialResult {
            trial_id: id.into(),
            status: TrialStatus::Terminated,
            params,
            result: Some(TrainResult {
                metrics: history.last().cloned(),
                checkpoint: None,
                best_checkpoints: Vec::new(),
                error: None,
                path: PathBuf::from(id),
                metrics_history: history,
                placement: None,
                failures: Vec::new(),
                fit_seconds: 0.0,
                train_loop_seconds: 0.0,
                unread_params: Vec::new(),
            }),
            error: None,
            path: PathBuf::from(id),
            bracket: None,
            ranking: Default::default(),
        }
    }

    fn objectives(pairs: &[(&str, Mode)]) -> Vec<Objective> {
        pairs.iter().map(|&(metric, mode)| Objective { metric: metric.into(), mode }).collect()
    }

    fn grid() -> ResultGrid {
        ResultGrid {
            path: PathBuf::from("exp"),
            objectives: Objectives::one("acc", Mode::Max),
            constraints: Vec::new(),
            checkpoint_score: None,
            trials: vec![
                // Peaks high, ends low.
                trial(
                    "a",
                    Params::new().with("opt", "sgd").with("n", 1),
                    &[&[("acc", 0.9)], &[("acc", 0.2)]],
                ),
                // Ends best among finite values; its NaN and infinity are never the best.
                trial(
                    "b",
                    Params::new().with("opt", 3).with("n", 2.5),
                    &[&[("acc", f64::INFINITY)], &[("acc", 0.5), ("loss", 1.0)]],
                ),
                trial("c", Params::new().with("flag", true), &[&[("acc", f64::NAN)]]),
            ],
        }
    }

    /// A trial prints as a person reads it: params, what the train function reported (not
    /// rtune's bookkeeping), the iteration, why it failed.
    #[test]
    fn a_trial_prints_readably() {
        let params = Params::new().with("lr", 0.037302865731).with("opt", "adam");
        let report = [
            ("loss", 0.41234),
            ("training_iteration", 10.0),
            ("time_total_s", 3.5),
            ("time_step_s", 0.1),
            ("world_size", 2.0),
        ];
        let mut t = trial("3c1f0_00004", params, &[&report]);
        assert_eq!(
            t.to_string(),
            r#"3c1f0_00004 TERMINATED: lr=0.0373, opt="adam" · loss=0.4123 (iteration 10)"#
        );
        t.status = TrialStatus::Error;
        t.result = None;
        t.error = Some("worker rank 1 failed: boom\nstack ...".into());
        assert_eq!(
            t.to_string(),
            r#"3c1f0_00004 ERROR: lr=0.0373, opt="adam" · worker rank 1 failed: boom"#
        );
    }

    #[test]
    fn best_result_by_last_or_all_leaves_out_nan_and_infinity() {
        let g = grid();
        assert_eq!(g.best_result().unwrap().trial_id, "b");
        assert_eq!(g.best_result_by(None, None, Scope::All).unwrap().trial_id, "a");
        assert_eq!(g.best_result_by(None, Some(Mode::Min), Scope::Last).unwrap().trial_id, "a");
        let e = g.best_result_by(Some("f1"), None, Scope::Last).unwrap_err().to_string();
        assert!(e.contains("`f1`") && e.contains("acc, loss"), "{e}");
        let no_metric = ResultGrid { objectives: Objectives::default(), ..g };
        let e = no_metric.best_result().unwrap_err().to_string();
        assert!(e.contains("no metric"), "{e}");
    }

    /// The front of accuracy (max) against size (min), by the last results: a trial beaten in
    /// both is off it; one without a finite value of both is left out; mistakes are named.
    #[test]
    fn the_pareto_front_of_two_objectives() {
        let t = |id: &str, acc: f64, size: f64| {
            trial(
                id,
                Params::new(),
                &[&[("acc", 0.0), ("size", 0.0)], &[("acc", acc), ("size", size)]],
            )
        };
        let g = ResultGrid {
            trials: vec![
                t("big", 0.9, 100.0),
                t("small", 0.6, 10.0),
                t("worse", 0.5, 50.0),
                t("mid", 0.8, 40.0),
                t("nan", f64::NAN, 1.0),
                trial("no_size", Params::new(), &[&[("acc", 1.0)]]),
            ],
            ..grid()
        };
        let front =
            g.pareto_front_by(&objectives(&[("acc", Mode::Max), ("size", Mode::Min)])).unwrap();
        let ids: Vec<&str> = front.iter().map(|t| t.trial_id.as_str()).collect();
        assert_eq!(ids, ["big", "small", "mid"]);
        let e = g.pareto_front_by(&objectives(&[("acc", Mode::Max)])).unwrap_err().to_string();
        assert!(e.contains("two objectives"), "{e}");
        let e =
            g.pareto_front_by(&objectives(&[("acc", Mode::Max), ("f1", Mode::Max)])).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("`acc`, `f1`") && e.contains("acc, size"), "{e}");
        // A sweep with one metric has no front of its own.
        assert!(g.pareto_front().unwrap_err().to_string().contains("fewer than two objectives"));

        // A multi-objective sweep: its own front, marked in the table; no single best.
        let objective = |metric: &str, mode| Objective { metric: metric.into(), mode };
        let g = ResultGrid {
            objectives: vec![objective("acc", Mode::Max), objective("size", Mode::Min)].into(),
            ..g
        };
        let front: Vec<&str> = g.pareto_front().unwrap().iter().map(|t| t.trial_id()).collect();
        assert_eq!(front, ["big", "small", "mid"]);
        let e = g.best_result().unwrap_err().to_string();
        assert!(e.contains("2 objectives (acc, size)") && e.contains("pareto_front"), "{e}");
        let best = g.best_result_by(Some("size"), Some(Mode::Min), Scope::Last).unwrap();
        assert_eq!(best.trial_id(), "nan");
        let df = g.dataframe().unwrap();
        let column = df.column("pareto").unwrap().bool().unwrap().clone();
        let pareto: Vec<Option<bool>> = (0..df.height()).map(|i| column.get(i)).collect();
        let on = [true, true, false, true, false, false].map(Some);
        assert_eq!(pareto, on);
    }

    #[test]
    fn of_equally_good_trials_the_first_is_best() {
        let same = |id: &str| trial(id, Params::new(), &[&[("acc", 0.5)]]);
        let g = ResultGrid { trials: vec![same("x"), same("y"), same("z")], ..grid() };
        assert_eq!(g.best_result().unwrap().trial_id, "x");
        assert_eq!(g.best_result_by(None, Some(Mode::Min), Scope::All).unwrap().trial_id, "x");
    }

    #[test]
    fn table_columns_are_typed_and_missing_values_are_null() {
        let df = grid().dataframe().unwrap();
        let names: Vec<&str> = df.get_column_names().into_iter().map(|n| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "trial_id",
                "status",
                "config/opt",
                "config/n",
                "config/flag",
                "acc",
                "loss",
                "best/acc",
                "checkpoint_path",
                "placement",
                "error",
                "path"
            ]
        );
        let dtype = |n: &str| df.column(n).unwrap().dtype().clone();
        use polars::prelude::DataType;
        // Mixed text and number: text; integers and floats: floats; booleans stay booleans.
        assert_eq!(dtype("config/opt"), DataType::String);
        assert_eq!(dtype("config/n"), DataType::Float64);
        assert_eq!(dtype("config/flag"), DataType::Boolean);
        let opt = df.column("config/opt").unwrap().str().unwrap();
        assert_eq!((0..3).map(|i| opt.get(i)).collect::<Vec<_>>(), [Some("sgd"), Some("3"), None]);
        let numbers = |name: &str| {
            let column = df.column(name).unwrap().f64().unwrap();
            (0..3).map(|i| column.get(i)).collect::<Vec<_>>()
        };
        assert_eq!(numbers("loss"), [None, Some(1.0), None]);
        assert_eq!(numbers("best/acc"), [Some(0.9), Some(0.5), None]);
        assert_eq!(grid().results_history().unwrap().height(), 5);
    }

    /// With constraints, the best trial, its best report (`Scope::All`), the front and the
    /// `best/` column count feasible results only, a `feasible` column says which trial met
    /// them, and a sweep where none did says so instead of naming a best.
    #[test]
    fn constraints_leave_infeasible_trials_out() {
        let t = |id: &str, rows: &[&[(&str, f64)]]| trial(id, Params::new(), rows);
        let g = ResultGrid {
            constraints: vec!["mem".into()],
            trials: vec![
                // The best accuracy, over the memory limit at its end.
                t("over", &[&[("acc", 0.99), ("mem", -1.0)], &[("acc", 0.95), ("mem", 2.0)]]),
                t("fits", &[&[("acc", 0.7), ("mem", -0.5)]]),
                // Exactly at the limit counts as feasible; a NaN constraint does not.
                t("edge", &[&[("acc", 0.6), ("mem", 0.0)]]),
                t("nan", &[&[("acc", 0.9), ("mem", f64::NAN)]]),
                t("quiet", &[]),
            ],
            ..grid()
        };
        assert_eq!(g.best_result().unwrap().trial_id, "fits");
        // Over all reports, `over`'s first (feasible) report is the best.
        assert_eq!(g.best_result_by(None, None, Scope::All).unwrap().trial_id, "over");
        let df = g.dataframe().unwrap();
        let column = df.column("feasible").unwrap().bool().unwrap().clone();
        let feasible: Vec<Option<bool>> = (0..df.height()).map(|i| column.get(i)).collect();
        assert_eq!(feasible, [Some(false), Some(true), Some(true), Some(false), None]);
        let best = df.column("best/acc").unwrap().f64().unwrap().clone();
        assert_eq!(
            (0..4).map(|i| best.get(i)).collect::<Vec<_>>(),
            [Some(0.99), Some(0.7), Some(0.6), None]
        );
        // `over` would dominate both if it were feasible.
        let front =
            g.pareto_front_by(&objectives(&[("acc", Mode::Max), ("mem", Mode::Max)])).unwrap();
        let ids: Vec<&str> = front.iter().map(|t| t.trial_id()).collect();
        assert_eq!(ids, ["fits", "edge"]);

        let none = ResultGrid { trials: vec![g.trials[0].clone(), g.trials[3].clone()], ..g };
        let e = none.best_result().unwrap_err().to_string();
        assert!(e.contains("none of the 2 trials") && e.contains("(mem <= 0)"), "{e}");
        let e = none
            .pareto_front_by(&objectives(&[("acc", Mode::Max), ("mem", Mode::Min)]))
            .unwrap_err();
        assert!(e.to_string().contains("ranks no feasible trial"), "{e}");
    }
}
