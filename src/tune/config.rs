//! How a sweep searches (`TuneConfig`, Ray's), and how it relates to the settings an experiment
//! keeps in `tuner.json`: a restored sweep rebuilds its `TuneConfig` from them, or checks the one
//! given again against them.

use rtune_searchers::{Mode, Searcher, TrialScheduler};

use super::experiment::Settings;
use crate::error::{Error, Result};

/// How a sweep searches (Ray's `TuneConfig`).
#[derive(Default)]
pub struct TuneConfig {
    pub metric: Option<String>,
    pub mode: Option<Mode>,
    /// Trials to run; -1 runs until the searcher has nothing more or the time budget ends.
    /// With the default searcher it is Ray's: the grid is walked this many times.
    pub num_samples: i64,
    pub search_alg: Option<Box<dyn Searcher>>,
    pub scheduler: Option<Box<dyn TrialScheduler>>,
    /// Trials started at once; default: as many as the local machine holds side by side.
    pub max_concurrent_trials: Option<usize>,
    pub time_budget_s: Option<f64>,
    /// Seeds the default searcher's sampling. An explicit `search_alg` keeps its own seed: set
    /// it on the searcher (`Tpe::new(space)?.seed(7)`), as Ray's search algorithms take theirs.
    pub seed: u64,
    /// End the sweep at the first trial that fails for good.
    pub fail_fast: bool,
    /// Start trials' workers warm (Ray's `reuse_actors`, on by default): forked from the
    /// driver's fork server, which has the binary and libtorch loaded, instead of a fresh exec
    /// each. Every trial still gets new processes, so nothing of one trial (params, seeds,
    /// libtorch threads, working directory, environment) reaches the next.
    pub reuse_actors: bool,
}

impl std::fmt::Debug for TuneConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TuneConfig")
            .field("metric", &self.metric)
            .field("mode", &self.mode)
            .field("num_samples", &self.num_samples)
            .field("max_concurrent_trials", &self.max_concurrent_trials)
            .field("time_budget_s", &self.time_budget_s)
            .finish_non_exhaustive()
    }
}

impl TuneConfig {
    pub fn new() -> Self {
        TuneConfig { num_samples: 1, reuse_actors: true, ..TuneConfig::default() }
    }

    pub fn metric(mut self, metric: impl Into<String>) -> Self {
        self.metric = Some(metric.into());
        self
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    pub fn num_samples(mut self, n: i64) -> Self {
        self.num_samples = n;
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
        self.max_concurrent_trials = Some(n);
        self
    }

    pub fn time_budget_s(mut self, seconds: f64) -> Self {
        self.time_budget_s = Some(seconds);
        self
    }

    /// See [`TuneConfig::seed`](#structfield.seed): the default searcher's seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub fn fail_fast(mut self, on: bool) -> Self {
        self.fail_fast = on;
        self
    }

    pub fn reuse_actors(mut self, on: bool) -> Self {
        self.reuse_actors = on;
        self
    }
}

impl Settings {
    /// The `TuneConfig` the sweep ran with, where it can be rebuilt from the settings alone.
    pub(super) fn tune_config(&self) -> Result<TuneConfig> {
        if self.search_alg != "basic_variant" || self.scheduler != "fifo" {
            return Err(Error::config(
                "Tuner::restore",
                format!(
                    "the experiment ran with search_alg `{}` and scheduler `{}`, whose settings \
                     are code, not data: pass the same TuneConfig again with .tune_config(..)",
                    self.search_alg, self.scheduler
                ),
            ));
        }
        Ok(TuneConfig {
            metric: self.metric.clone(),
            mode: self.mode,
            num_samples: self.num_samples,
            search_alg: None,
            scheduler: None,
            max_concurrent_trials: self.max_concurrent_trials,
            time_budget_s: self.time_budget_s,
            seed: self.seed,
            fail_fast: self.fail_fast,
            reuse_actors: self.reuse_actors,
        })
    }

    /// A `TuneConfig` given again on restore must be the sweep's.
    pub(super) fn check_same(&self, tune: &TuneConfig) -> Result<()> {
        let searcher = tune
            .search_alg
            .as_ref()
            .map_or("basic_variant".into(), |s| s.save_state().kind().into());
        let scheduler =
            tune.scheduler.as_ref().map_or("fifo".into(), |s| s.save_state().kind().into());
        let differences = [
            ("TuneConfig.metric", format!("{:?}", self.metric), format!("{:?}", tune.metric)),
            ("TuneConfig.mode", format!("{:?}", self.mode), format!("{:?}", tune.mode)),
            ("TuneConfig.num_samples", self.num_samples.to_string(), tune.num_samples.to_string()),
            ("TuneConfig.seed", self.seed.to_string(), tune.seed.to_string()),
            ("TuneConfig.scheduler", self.scheduler.clone(), scheduler),
            ("TuneConfig.search_alg", self.search_alg.clone(), searcher),
        ];
        match differences.into_iter().find(|(_, saved, given)| saved != given) {
            None => Ok(()),
            Some((field, saved, given)) => Err(Error::config(
                field,
                format!(
                    "is {given}, but the experiment being restored ran with {saved}; a \
                     restored sweep goes on with its own settings"
                ),
            )),
        }
    }
}
