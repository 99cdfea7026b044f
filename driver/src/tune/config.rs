//! How a sweep searches: `TuneSettings`, the settings as data (one struct for `TuneConfig`, the
//! sweep file's `[tune]` and the experiment's `tuner.json`), and `TuneConfig` (Ray's), which adds
//! the searcher and scheduler. (A restored sweep's `TuneConfig` comes from its `tuner.json`:
//! `experiment::Settings`.)

use rtune_searchers::{Mode, Objective, Objectives, Searcher, TrialScheduler};

use crate::setting::{Problems, Setting};
use serde::{Deserialize, Serialize};

/// How many trials a sweep runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Samples {
    /// This many (with the default searcher, Ray's meaning: the grid is walked this many times).
    Count(u64),
    /// Until the searcher has nothing more or the time budget ends (Ray's `num_samples = -1`).
    UntilStopped,
}

impl Samples {
    /// The most samples: the count, or None until stopped.
    pub fn limit(self) -> Option<u64> {
        match self {
            Samples::Count(n) => Some(n),
            Samples::UntilStopped => None,
        }
    }

    /// As a sweep file writes it: the count, or -1.
    pub fn written(self) -> String {
        self.limit().map_or_else(|| "-1".to_owned(), |n| n.to_string())
    }
}

/// `tuner.json` and sweep files write `Samples` as Ray does: a count, or -1.
impl Serialize for Samples {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Samples::Count(n) => s.serialize_u64(*n),
            Samples::UntilStopped => s.serialize_i64(-1),
        }
    }
}

impl<'de> Deserialize<'de> for Samples {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match i64::deserialize(d)? {
            -1 => Ok(Samples::UntilStopped),
            n => u64::try_from(n).map(Samples::Count).map_err(|_| {
                serde::de::Error::custom(format!("num_samples {n}: use a count, or -1"))
            }),
        }
    }
}

impl std::fmt::Display for Samples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Samples::Count(n) => write!(f, "{n}"),
            Samples::UntilStopped => f.write_str("-1 (until stopped)"),
        }
    }
}

/// A sweep's settings as data: `TuneConfig`'s besides its searcher and scheduler, the
/// `[tune]` table of a sweep file, and what an experiment's `tuner.json` keeps. One struct: a
/// new setting is one field here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneSettings {
    pub metric: Option<String>,
    pub mode: Option<Mode>,
    /// A multi-objective sweep's objectives, each a metric and its mode, instead of `metric`
    /// and `mode`: trials are judged by their Pareto front, not ranked by one metric.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objectives: Vec<Objective>,
    /// Metrics every result reports that must be <= 0 for its trial to be feasible (Optuna's
    /// `constraints_func`): the searcher prefers feasible trials, and the best trial and the
    /// Pareto front are chosen among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    pub num_samples: Samples,
    /// Trials started at once; default: as many as the local machine holds side by side.
    pub max_concurrent_trials: Option<usize>,
    pub time_budget_s: Option<f64>,
    /// Seeds the default searcher's sampling. An explicit `search_alg` keeps its own seed: set
    /// it on the searcher (`Tpe::new().seed(7)`), as Ray's search algorithms take theirs.
    pub seed: u64,
    /// End the sweep at the first trial that fails for good.
    pub fail_fast: bool,
    /// Start trials' workers warm (Ray's `reuse_actors`, on by default): forked from the
    /// driver's fork server, which has the binary and libtorch loaded, instead of a fresh exec
    /// each. Every trial still gets new processes, so nothing of one trial (params, seeds,
    /// libtorch threads, working directory, environment) reaches the next.
    #[serde(default = "yes")]
    pub reuse_actors: bool,
}

fn yes() -> bool {
    true
}

impl Default for TuneSettings {
    fn default() -> Self {
        TuneSettings {
            metric: None,
            mode: None,
            objectives: Vec::new(),
            constraints: Vec::new(),
            num_samples: Samples::Count(1),
            max_concurrent_trials: None,
            time_budget_s: None,
            seed: 0,
            fail_fast: false,
            reuse_actors: true,
        }
    }
}

impl TuneSettings {
    /// What the sweep optimises: nothing, one metric (`metric` and `mode`), or several
    /// (`objectives`), once [`problems`](Self::problems) has none.
    pub fn objectives(&self) -> Objectives {
        let one =
            self.metric.clone().zip(self.mode).map(|(metric, mode)| Objective { metric, mode });
        one.into_iter().chain(self.objectives.iter().cloned()).collect::<Vec<_>>().into()
    }

    /// Every mistake in the settings, each naming its setting: the one check of them, which the
    /// Tuner makes before anything starts and a sweep file's reader with the file's other
    /// mistakes.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        let mut add = |setting, message: String| problems.push((setting, message));
        match (&self.metric, self.mode) {
            (Some(m), None) => add(
                Setting::Mode,
                format!("is missing for metric `{m}`; use Mode::Max or Mode::Min"),
            ),
            (None, Some(_)) => add(Setting::Metric, "is missing for the mode given".into()),
            (Some(m), Some(_)) if m.is_empty() => add(Setting::Metric, "is empty; name one".into()),
            _ => {}
        }
        let many = &self.objectives;
        if self.metric.is_some() && !many.is_empty() {
            let message = "are given with metric and mode: give one metric and its mode, or \
                           objectives (each a metric and its mode), not both";
            add(Setting::Objectives, message.into());
        }
        for (i, o) in many.iter().enumerate() {
            if o.metric.is_empty() {
                add(
                    Setting::Objectives,
                    format!("has an empty metric (objective {}); name one", i + 1),
                );
            } else if many[..i].iter().any(|earlier| earlier.metric == o.metric) {
                let message = format!("names `{}` twice; each metric is one objective", o.metric);
                add(Setting::Objectives, message);
            }
        }
        for (i, c) in self.constraints.iter().enumerate() {
            if c.is_empty() {
                add(
                    Setting::Constraints,
                    format!("has an empty metric (constraint {}); name one", i + 1),
                );
            } else if self.constraints[..i].contains(c) {
                add(Setting::Constraints, format!("names `{c}` twice; name each metric once"));
            }
        }
        if !self.constraints.is_empty() && self.metric.is_none() && many.is_empty() {
            let message = "are given without a metric to optimise: constraints choose among the \
                           trials that a metric ranks; give metric and mode too";
            add(Setting::Constraints, message.into());
        }
        if self.num_samples == Samples::Count(0) {
            add(Setting::NumSamples, "is 0; use at least 1".into());
        }
        if self.max_concurrent_trials == Some(0) {
            add(
                Setting::MaxConcurrentTrials,
                "is 0, so no trial could ever start; use at least 1".into(),
            );
        }
        match self.time_budget_s {
            Some(budget) if budget <= 0.0 => {
                add(Setting::TimeBudget, format!("is {budget}; use more than 0 seconds"))
            }
            Some(budget) => {
                if let Err(why) = crate::config::duration(budget) {
                    add(Setting::TimeBudget, why);
                }
            }
            None => {}
        }
        problems
    }

    /// The first of [`problems`](Self::problems), as an error.
    pub fn check(&self) -> crate::error::Result<()> {
        crate::error::first(self.problems())
    }
}

/// How a sweep searches (Ray's `TuneConfig`): its settings, and the searcher and scheduler.
#[derive(Default)]
pub struct TuneConfig {
    pub settings: TuneSettings,
    pub search_alg: Option<Box<dyn Searcher>>,
    pub scheduler: Option<Box<dyn TrialScheduler>>,
}

impl std::fmt::Debug for TuneConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TuneConfig").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl TuneConfig {
    pub fn new() -> Self {
        TuneConfig::default()
    }

    pub fn metric(mut self, metric: impl Into<String>) -> Self {
        self.settings.metric = Some(metric.into());
        self
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.settings.mode = Some(mode);
        self
    }

    /// Several objectives, each a metric and its mode (instead of `metric` and `mode`):
    /// `.objectives([("val_loss", Mode::Min), ("params", Mode::Min)])`. The searcher must take
    /// them (`Nsga2`, `Tpe`, or the default random search) and the scheduler is FIFO; the
    /// sweep's result is a Pareto front (`ResultGrid::pareto_front`).
    pub fn objectives<S: Into<String>>(
        mut self,
        objectives: impl IntoIterator<Item = (S, Mode)>,
    ) -> Self {
        self.settings.objectives = objectives
            .into_iter()
            .map(|(metric, mode)| Objective { metric: metric.into(), mode })
            .collect();
        self
    }

    /// Metrics every result reports that must be <= 0 for its trial to be feasible (Optuna's
    /// `constraints_func`): `.constraints(["mem_gb_over"])`. The searcher steers towards
    /// feasible trials (`Tpe`, `Nsga2`, `Gp`; random search ignores them, others refuse them);
    /// `ResultGrid::best_result` and `pareto_front` choose among feasible trials only.
    pub fn constraints<S: Into<String>>(mut self, metrics: impl IntoIterator<Item = S>) -> Self {
        self.settings.constraints = metrics.into_iter().map(Into::into).collect();
        self
    }

    /// Trials to run (see [`Samples`]).
    pub fn num_samples(mut self, n: u64) -> Self {
        self.settings.num_samples = Samples::Count(n);
        self
    }

    /// Runs trials until the searcher has nothing more or the time budget ends (Ray's
    /// `num_samples = -1`).
    pub fn until_stopped(mut self) -> Self {
        self.settings.num_samples = Samples::UntilStopped;
        self
    }

    pub fn search_alg(mut self, searcher: impl Searcher + 'static) -> Self {
        self.search_alg = Some(Box::new(searcher));
        self
    }

    pub fn scheduler(mut self, scheduler: impl TrialScheduler + 'static) -> Self {
        self.scheduler = Some(Box::new(scheduler));
        self
    }

    pub fn max_concurrent_trials(mut self, n: usize) -> Self {
        self.settings.max_concurrent_trials = Some(n);
        self
    }

    pub fn time_budget_s(mut self, seconds: f64) -> Self {
        self.settings.time_budget_s = Some(seconds);
        self
    }

    /// See [`TuneSettings::seed`]: the default searcher's seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.settings.seed = seed;
        self
    }

    pub fn fail_fast(mut self, on: bool) -> Self {
        self.settings.fail_fast = on;
        self
    }

    pub fn reuse_actors(mut self, on: bool) -> Self {
        self.settings.reuse_actors = on;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every mistake is said, each of its setting; a sweep's usual settings have none.
    #[test]
    fn problems_name_their_settings() {
        assert_eq!(TuneSettings::default().problems(), Problems::new());
        let objective = |metric: &str| Objective { metric: metric.into(), mode: Mode::Min };
        let wrong = TuneSettings {
            metric: Some("loss".into()),
            objectives: vec![objective("a"), objective("a"), objective("")],
            num_samples: Samples::Count(0),
            max_concurrent_trials: Some(0),
            time_budget_s: Some(-1.0),
            ..TuneSettings::default()
        };
        let named: Vec<Setting> = wrong.problems().into_iter().map(|(s, _)| s).collect();
        use Setting as S;
        let expected = [
            S::Mode,
            S::Objectives,
            S::Objectives,
            S::Objectives,
            S::NumSamples,
            S::MaxConcurrentTrials,
            S::TimeBudget,
        ];
        assert_eq!(named, expected);
        let e = wrong.check().unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid TuneConfig.mode: is missing for metric `loss`; use Mode::Max or Mode::Min"
        );
        let constrained = |constraints: &[&str], metric: Option<&str>| TuneSettings {
            metric: metric.map(Into::into),
            mode: metric.map(|_| Mode::Min),
            constraints: constraints.iter().map(|c| c.to_string()).collect(),
            ..TuneSettings::default()
        };
        assert_eq!(constrained(&["mem"], Some("loss")).problems(), Problems::new());
        let problems = |t: TuneSettings| -> Vec<String> {
            t.problems().into_iter().map(|(s, m)| format!("{}: {m}", s.key())).collect()
        };
        assert_eq!(
            problems(constrained(&["mem", "", "mem"], Some("loss"))),
            [
                "tune.constraints: has an empty metric (constraint 2); name one",
                "tune.constraints: names `mem` twice; name each metric once"
            ]
        );
        let alone = problems(constrained(&["mem"], None));
        assert!(alone[0].starts_with("tune.constraints: are given without a metric"), "{alone:?}");
        let far = TuneSettings { time_budget_s: Some(1e300), ..TuneSettings::default() };
        assert!(far.problems()[0].1.contains("from 0 to"), "{:?}", far.problems());
    }
}
