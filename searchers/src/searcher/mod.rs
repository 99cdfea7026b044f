//! Searchers: the second stage of the pipeline. Given a validated [`SearchSpace`], a searcher
//! proposes the params of the next trial ([`Searcher::suggest`]) and learns from results. It
//! never starts trials or reads files; the controller calls it and carries out its answers.
//!
//! Every searcher keeps its randomness in its own seeded state, and [`Searcher::save_state`]
//! returns plain serde data from which [`Searcher::restore_state`] continues exactly as if the
//! sweep had never stopped.
//!
//! [`SearchSpace`]: crate::space::SearchSpace

/// A searcher's builder methods, the same in every searcher that has them: `seed` (restarting
/// its `state.rng`), and `metric` and `mode` (its `metric` and `mode` fields) for the ones that
/// rank by one metric. The schedulers' are `target_builders!`.
macro_rules! searcher_builders {
    (seed) => {
        /// Seed (restarts the random stream; call before the first suggestion).
        pub fn seed(mut self, seed: u64) -> Self {
            self.state.rng = crate::rng::SearchRng::seed_from_u64(seed);
            self
        }
    };
    (metric, mode, seed) => {
        /// The metric to optimise (or pass it through [`Searcher::set_metric`]).
        pub fn metric(mut self, metric: impl Into<String>) -> Self {
            self.metric = Some(metric.into());
            self
        }

        /// The direction.
        pub fn mode(mut self, mode: Mode) -> Self {
            self.mode = Some(mode);
            self
        }

        searcher_builders!(seed);
    };
}

mod auto;
mod basic_variant;
mod bohb;
mod cmaes;
#[cfg(test)]
mod constrained;
mod gp;
mod limiter;
mod nsga2;
mod points;
mod repeater;
pub mod tpe;
#[cfg(test)]
mod zdt;

use serde::{Deserialize, Serialize};

pub use auto::auto;
pub use basic_variant::{BasicVariant, BasicVariantState};
pub use bohb::{Bohb, BohbState};
pub use cmaes::{CmaEs, CmaEsRestart, CmaEsState};
pub use gp::{Gp, GpState};
pub use limiter::{ConcurrencyLimiter, LimiterState};
pub use nsga2::{Nsga2, Nsga2State};
pub use repeater::{Repeater, RepeaterState, TRIAL_INDEX_KEY};
pub use tpe::{Tpe, TpeState};

use crate::error::Result;
use crate::metrics::{Metrics, Mode, Objective};
use crate::params::Params;
use crate::space::SearchSpace;
use crate::trial::TrialId;
use crate::value::Value;

/// What the searchers that refuse several objectives name instead.
pub(crate) const MULTI_OBJECTIVE_SEARCHERS: &str =
    "several objectives need NSGA-II (`Nsga2`), TPE or random search";

/// What a searcher answers when asked for the next trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Suggestion {
    /// Run a trial with these params.
    Params(Params),
    /// Nothing now (e.g. a concurrency limit); ask again after a trial completes.
    NotNow,
    /// The searcher has nothing more to suggest, ever.
    Finished,
}

/// Proposes params for new trials and learns from their results.
///
/// Call order, per trial: `suggest(id)` once; any number of `on_trial_result(id, ..)`; exactly
/// one `on_trial_complete(id, ..)`. `set_metric` comes first (the controller passes its
/// `TuneConfig` metric and mode); searchers that do not use results accept it and ignore it.
pub trait Searcher: Send {
    /// The sweep's param space, handed over by the `Tuner` before anything else: a searcher
    /// built without a space (`Tpe::new()`) takes it, one built with its own keeps that. The
    /// default ignores it (a searcher that needs none, or holds its own).
    fn set_space(&mut self, space: &SearchSpace) -> Result<()> {
        let _ = space;
        Ok(())
    }
    /// Tell the searcher which metric to optimise and in which direction.
    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()>;

    /// Tell the searcher the objectives of a multi-objective sweep (two or more), instead of
    /// `set_metric`. The default refuses them ([`Error::SingleObjective`]): the searcher ranks
    /// trials by one metric.
    ///
    /// [`Error::SingleObjective`]: crate::Error::SingleObjective
    fn set_objectives(&mut self, objectives: &[Objective]) -> Result<()> {
        Err(crate::Error::SingleObjective {
            component: "this searcher",
            objectives: objectives.len(),
            takes: MULTI_OBJECTIVE_SEARCHERS,
        })
    }

    /// Tell the searcher the sweep's constraints, after its metric or objectives: metrics
    /// every result holds that must be <= 0 for the trial to be feasible (Optuna's
    /// `constraints_func`). Called only when there are some. The default refuses them
    /// ([`Error::NoConstraints`]): the searcher cannot steer by them.
    ///
    /// [`Error::NoConstraints`]: crate::Error::NoConstraints
    fn set_constraints(&mut self, constraints: &[String]) -> Result<()> {
        let _ = constraints;
        Err(crate::Error::NoConstraints { component: "this searcher" })
    }

    /// Checks its settings before any trial runs: a setting it refuses is an
    /// `Error::InvalidConfig` naming it. The default accepts everything.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// The metric this searcher optimises, if it knows one (wrappers ask their inner searcher).
    fn metric(&self) -> Option<&str> {
        None
    }

    /// How many trials it suggests in all, where it decides that itself (a grid repeated
    /// `num_samples` times, its points first); None where the sweep's `num_samples` does.
    fn trial_count(&self) -> Option<u64> {
        None
    }

    /// Params for trial `trial`, or `NotNow`, or `Finished`.
    fn suggest(&mut self, trial: TrialId) -> Result<Suggestion>;

    /// An intermediate result of a running trial.
    fn on_trial_result(&mut self, trial: TrialId, result: &Metrics) -> Result<()> {
        let _ = (trial, result);
        Ok(())
    }

    /// The trial ended: with its last result, with none, or with an error.
    fn on_trial_complete(
        &mut self,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()>;

    /// Everything needed to continue later, as serde data.
    fn save_state(&self) -> SearcherState;

    /// Continue from a saved state. The searcher must be configured as the one that saved it
    /// (same space, same settings); only the evolving part is in the state.
    fn restore_state(&mut self, state: SearcherState) -> Result<()>;
}

impl<S: Searcher + ?Sized> Searcher for Box<S> {
    fn set_space(&mut self, space: &SearchSpace) -> Result<()> {
        (**self).set_space(space)
    }
    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        (**self).set_metric(metric, mode)
    }
    fn set_objectives(&mut self, objectives: &[Objective]) -> Result<()> {
        (**self).set_objectives(objectives)
    }
    fn set_constraints(&mut self, constraints: &[String]) -> Result<()> {
        (**self).set_constraints(constraints)
    }
    fn validate(&self) -> Result<()> {
        (**self).validate()
    }
    fn metric(&self) -> Option<&str> {
        (**self).metric()
    }
    fn trial_count(&self) -> Option<u64> {
        (**self).trial_count()
    }
    fn suggest(&mut self, trial: TrialId) -> Result<Suggestion> {
        (**self).suggest(trial)
    }
    fn on_trial_result(&mut self, trial: TrialId, result: &Metrics) -> Result<()> {
        (**self).on_trial_result(trial, result)
    }
    fn on_trial_complete(
        &mut self,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        (**self).on_trial_complete(trial, result, error)
    }
    fn save_state(&self) -> SearcherState {
        (**self).save_state()
    }
    fn restore_state(&mut self, state: SearcherState) -> Result<()> {
        (**self).restore_state(state)
    }
}

/// The saved state of any searcher of this crate (externally tagged: `{"tpe": {...}}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearcherState {
    /// [`BasicVariant`].
    BasicVariant(BasicVariantState),
    /// [`Tpe`].
    Tpe(TpeState),
    /// [`Bohb`].
    Bohb(BohbState),
    /// [`Nsga2`].
    Nsga2(Nsga2State),
    /// [`CmaEs`].
    CmaEs(CmaEsState),
    /// [`Gp`].
    Gp(GpState),
    /// [`ConcurrencyLimiter`].
    ConcurrencyLimiter(LimiterState),
    /// [`Repeater`].
    Repeater(RepeaterState),
    /// A searcher defined outside this crate.
    Custom {
        /// The searcher's name, checked on restore.
        name: String,
        /// Its data.
        data: Value,
    },
}

impl SearcherState {
    /// The searcher's name, as its saved state is tagged (`tpe`, `basic_variant`, …).
    pub fn kind(&self) -> &str {
        match self {
            SearcherState::BasicVariant(_) => "basic_variant",
            SearcherState::Tpe(_) => "tpe",
            SearcherState::Bohb(_) => "bohb",
            SearcherState::Nsga2(_) => "nsga2",
            SearcherState::CmaEs(_) => "cma_es",
            SearcherState::Gp(_) => "gp",
            SearcherState::ConcurrencyLimiter(_) => "concurrency_limiter",
            SearcherState::Repeater(_) => "repeater",
            SearcherState::Custom { name, .. } => name,
        }
    }
}

/// What a single-objective searcher keeps of `set_metric`'s metric and direction, checked.
pub(crate) fn checked_metric(
    component: &'static str,
    metric: &str,
    mode: Mode,
) -> Result<(Option<String>, Option<Mode>)> {
    Objective::new(component, metric, mode)?;
    Ok((Some(metric.to_owned()), Some(mode)))
}

/// The metric and direction a single-objective searcher was given (`set_metric`), as the
/// objective it minimises the negated score of; an error if it was given none.
pub(crate) fn objective_of(
    component: &'static str,
    metric: &Option<String>,
    mode: Option<Mode>,
) -> Result<Objective> {
    match (metric, mode) {
        (Some(metric), Some(mode)) => Ok(Objective { metric: metric.clone(), mode }),
        _ => Err(crate::Error::NotConfigured { component }),
    }
}

pub(crate) fn wrong_state(expected: &'static str, found: &SearcherState) -> crate::Error {
    crate::Error::InvalidState {
        expected,
        problem: format!("the saved state is for `{}`", found.kind()),
    }
}

/// A saved state whose trials have another number of parameters than the space.
pub(crate) fn wrong_width(expected: &'static str, parameters: usize) -> crate::Error {
    crate::Error::InvalidState {
        expected,
        problem: format!("the saved trials do not have {parameters} parameters like this space"),
    }
}
