//! Trial schedulers: the last policy stage. As results of running trials come in, a scheduler
//! decides per result whether the trial continues, pauses, stops, or (PBT) restarts from
//! another trial's checkpoint with new params; and which waiting trial runs next.
//!
//! Schedulers see a read-only [`TrialsView`], never the controller or the resource pool.
//! Decisions about the reporting trial are the return value of
//! [`TrialScheduler::on_trial_result`]; decisions about *other* trials (HyperBand stopping the
//! paused losers of a round) are queued and collected with
//! [`TrialScheduler::take_stop_requests`]. Trials a scheduler promotes (HyperBand winners) are
//! handed out by [`TrialScheduler::choose_trial_to_run`].
//!
//! Direction is normalised once: every scheduler compares scores (`sign × value`, higher is
//! better); a result missing the metric or the time attribute is an [`Error::MissingMetric`].
//!
//! # Results that are not finite numbers
//!
//! The same three rules in every scheduler of this crate:
//!
//! * `±inf` are ordered like any other number in the mode's direction: `+inf` in `max` mode
//!   (`−inf` in `min` mode) is the best score there is, and is never stopped for being low.
//! * A NaN (a diverged trial) ranks below every number, so it may stop the trial: at an ASHA
//!   rung that has a cutoff, in a HyperBand round it loses, in the median rule when there is a
//!   median, and in PBT it exploits a top trial. **This differs from Ray**, whose comparisons
//!   with NaN are all false, so that a NaN trial runs on there (or, in Ray's median rule, a
//!   NaN median stops every trial it judges).
//! * A NaN is never part of what other trials are judged against: ASHA records that the trial
//!   passed the rung but leaves its NaN out of the cutoff (Ray's `nanpercentile`), the median
//!   rule leaves NaN results out of running means, PBT leaves NaN trials out of the quantiles.

/// A scheduler's builder methods for its [`Target`] (its `target` field), the same in every
/// scheduler: `time_attr`, `metric` and `mode`.
macro_rules! target_builders {
    () => {
        /// The result key measuring progress (it grows with every result of a trial).
        pub fn time_attr(mut self, attr: impl Into<String>) -> Self {
            self.target.time_attr = attr.into();
            self
        }

        /// The metric (or pass it through `set_metric`).
        pub fn metric(mut self, metric: impl Into<String>) -> Self {
            self.target.metric = Some(metric.into());
            self
        }

        /// The direction.
        pub fn mode(mut self, mode: Mode) -> Self {
            self.target.mode = Some(mode);
            self
        }
    };
}

mod asha;
mod fifo;
mod hyperband;
mod median;
mod pbt;

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

pub use asha::{Asha, AshaState};
pub use fifo::Fifo;
pub use hyperband::{HyperBand, HyperBandState};
pub use median::{MedianStopping, MedianStoppingState};
pub use pbt::{Pbt, PbtState};

use crate::error::{Error, Result};
use crate::metrics::{Metrics, Mode, Objective, get_metric};
use crate::params::Params;
use crate::trial::{TrialId, TrialStatus, TrialsView};
use crate::value::Value;

/// What to do with a trial that just reported a result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Decision {
    /// Keep training.
    Continue,
    /// Save a checkpoint and give the resources back; the trial may be resumed later (it will
    /// be offered again through `choose_trial_to_run`).
    Pause,
    /// Stop for good.
    Stop,
    /// PBT: replace this trial's state by the latest checkpoint of `source`, set its params to
    /// `new_params`, and continue training.
    Exploit {
        /// The trial whose checkpoint to clone.
        source: TrialId,
        /// The params to continue with.
        new_params: Params,
    },
}

/// Decides what running trials do. See the module docs for the calling contract.
pub trait TrialScheduler: Send {
    /// The metric to compare trials on and its direction.
    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()>;

    /// The objectives of a multi-objective sweep (two or more), instead of `set_metric`. The
    /// default refuses them ([`Error::SingleObjective`]): the scheduler compares trials by one
    /// metric.
    fn set_objectives(&mut self, objectives: &[Objective]) -> Result<()> {
        Err(Error::SingleObjective {
            component: "this scheduler",
            objectives: objectives.len(),
            takes: "a sweep with several objectives runs with the FIFO scheduler",
        })
    }

    /// Checks its settings before any trial runs: a setting it refuses is an
    /// `Error::InvalidConfig` naming it. The default accepts everything.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// A trial was created (before it first runs).
    fn on_trial_add(&mut self, trials: &dyn TrialsView, trial: TrialId) -> Result<()>;

    /// A running trial reported `result`. The decision applies to that trial.
    fn on_trial_result(
        &mut self,
        trials: &dyn TrialsView,
        trial: TrialId,
        result: &Metrics,
    ) -> Result<Decision>;

    /// A trial ended on its own (with its last result), or failed (`error`).
    fn on_trial_complete(
        &mut self,
        trials: &dyn TrialsView,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()>;

    /// Which pending or paused trial to run next, if any.
    fn choose_trial_to_run(&mut self, trials: &dyn TrialsView) -> Option<TrialId>;

    /// Trials other than the reporting one that the scheduler decided to stop (paused ones,
    /// usually); drained by the call.
    fn take_stop_requests(&mut self) -> Vec<TrialId> {
        Vec::new()
    }

    /// Everything needed to continue later, as serde data.
    fn save_state(&self) -> SchedulerState;

    /// Continue from a saved state (the scheduler must be configured as the one that saved it).
    fn restore_state(&mut self, state: SchedulerState) -> Result<()>;

    /// What the scheduler has decided so far, for a person watching the sweep (ASHA's rungs,
    /// PBT's latest exploits). Empty by default.
    fn status(&self) -> SchedulerStatus {
        SchedulerStatus::default()
    }

    /// The bracket `trial` was assigned to, for schedulers that have brackets (ASHA: the index
    /// of [`RungStatus::bracket`]; HyperBand: the index of the bracket among those created
    /// so far). Kept after the trial ends and in the saved state. `None` for a trial the
    /// scheduler never added, and from schedulers without brackets (the default).
    fn bracket(&self, trial: TrialId) -> Option<usize> {
        let _ = trial;
        None
    }

    /// Whether a trial that reported `result` has had the whole budget this scheduler gives a
    /// trial (ASHA's and HyperBand's `max_t`): a `Stop` then ends a finished trial rather than
    /// cutting one short (trackers tell the two apart: Optuna's COMPLETE and PRUNED). False by
    /// default: a scheduler without a budget only stops trials early.
    fn budget_reached(&self, result: &Metrics) -> bool {
        let _ = result;
        false
    }

    /// Whether it time-shares the trial slots (PBT): it wants the whole population made at
    /// once, waiting as PENDING, so that it can pause running trials and run waiting ones in
    /// their place when there are fewer slots than trials. False by default: trials are made
    /// as slots free up.
    fn time_shares(&self) -> bool {
        false
    }

    /// No trial will be added anymore (the samples are all made, the searcher is finished,
    /// or the sweep stops): a scheduler waiting for more (HyperBand filling a bracket) decides
    /// with the trials it has. Its decisions about trials other than a reporting one come out
    /// of [`take_stop_requests`](Self::take_stop_requests) and
    /// [`choose_trial_to_run`](Self::choose_trial_to_run), as always.
    fn on_no_more_trials(&mut self) {}
}

impl<S: TrialScheduler + ?Sized> TrialScheduler for Box<S> {
    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        (**self).set_metric(metric, mode)
    }
    fn set_objectives(&mut self, objectives: &[Objective]) -> Result<()> {
        (**self).set_objectives(objectives)
    }
    fn validate(&self) -> Result<()> {
        (**self).validate()
    }
    fn on_trial_add(&mut self, trials: &dyn TrialsView, trial: TrialId) -> Result<()> {
        (**self).on_trial_add(trials, trial)
    }
    fn on_trial_result(
        &mut self,
        trials: &dyn TrialsView,
        trial: TrialId,
        result: &Metrics,
    ) -> Result<Decision> {
        (**self).on_trial_result(trials, trial, result)
    }
    fn on_trial_complete(
        &mut self,
        trials: &dyn TrialsView,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        (**self).on_trial_complete(trials, trial, result, error)
    }
    fn choose_trial_to_run(&mut self, trials: &dyn TrialsView) -> Option<TrialId> {
        (**self).choose_trial_to_run(trials)
    }
    fn take_stop_requests(&mut self) -> Vec<TrialId> {
        (**self).take_stop_requests()
    }
    fn save_state(&self) -> SchedulerState {
        (**self).save_state()
    }
    fn restore_state(&mut self, state: SchedulerState) -> Result<()> {
        (**self).restore_state(state)
    }
    fn status(&self) -> SchedulerStatus {
        (**self).status()
    }
    fn bracket(&self, trial: TrialId) -> Option<usize> {
        (**self).bracket(trial)
    }
    fn budget_reached(&self, result: &Metrics) -> bool {
        (**self).budget_reached(result)
    }
    fn time_shares(&self) -> bool {
        (**self).time_shares()
    }
    fn on_no_more_trials(&mut self) {
        (**self).on_no_more_trials()
    }
}

/// A scheduler's decisions so far, as a person watching a sweep reads them (see
/// [`TrialScheduler::status`]). Scores are in the metric's own units.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulerStatus {
    /// The scheduler's name (`asha`, `pbt`); empty when it shows nothing.
    pub kind: String,
    /// What its milestones count (`training_iteration`).
    pub time_attr: String,
    /// ASHA: every rung, lowest milestone first within each bracket.
    pub rungs: Vec<RungStatus>,
    /// ASHA: trials it stopped.
    pub stopped: u64,
    /// PBT: the latest exploits, newest first.
    pub exploits: Vec<ExploitStatus>,
    /// PBT: exploits so far.
    pub perturbations: u64,
}

/// One ASHA rung.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RungStatus {
    pub bracket: usize,
    pub milestone: f64,
    /// Trials recorded at this milestone (one with a NaN score counts here, not in the cutoff).
    pub recorded: usize,
    /// The score a trial reaching the rung now must reach to go on (None: nothing recorded,
    /// or not a finite number).
    pub cutoff: Option<f64>,
}

/// One PBT exploit: `trial` took over `source`'s checkpoint at `time`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExploitStatus {
    pub time: f64,
    pub trial: TrialId,
    pub source: TrialId,
}

/// The saved state of any scheduler of this crate (externally tagged: `{"asha": {...}}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerState {
    /// [`Fifo`] (stateless).
    Fifo,
    /// [`Asha`].
    Asha(AshaState),
    /// [`HyperBand`].
    HyperBand(HyperBandState),
    /// [`MedianStopping`].
    MedianStopping(MedianStoppingState),
    /// [`Pbt`].
    Pbt(PbtState),
    /// A scheduler defined outside this crate.
    Custom {
        /// The scheduler's name.
        name: String,
        /// Its data.
        data: Value,
    },
}

impl SchedulerState {
    /// The scheduler's name, as its saved state is tagged (`asha`, `fifo`, …).
    pub fn kind(&self) -> &str {
        match self {
            SchedulerState::Fifo => "fifo",
            SchedulerState::Asha(_) => "asha",
            SchedulerState::HyperBand(_) => "hyper_band",
            SchedulerState::MedianStopping(_) => "median_stopping",
            SchedulerState::Pbt(_) => "pbt",
            SchedulerState::Custom { name, .. } => name,
        }
    }
}

fn wrong_state(expected: &'static str, found: &SchedulerState) -> Error {
    Error::InvalidState { expected, problem: format!("the saved state is for `{}`", found.kind()) }
}

/// Metric, mode and time attribute shared by the schedulers.
#[derive(Clone, Debug)]
struct Target {
    component: &'static str,
    time_attr: String,
    metric: Option<String>,
    mode: Option<Mode>,
}

impl Target {
    fn new(component: &'static str, time_attr: &str) -> Self {
        Self { component, time_attr: time_attr.to_string(), metric: None, mode: None }
    }

    fn set(&mut self, metric: &str, mode: Mode) -> Result<()> {
        Objective::new(self.component, metric, mode)?;
        self.metric = Some(metric.to_string());
        self.mode = Some(mode);
        Ok(())
    }

    fn check(&self) -> Result<()> {
        match (&self.metric, self.mode) {
            (Some(_), Some(_)) => Ok(()),
            _ => Err(Error::NotConfigured { component: self.component }),
        }
    }

    /// Refuses a fractional `value` of `setting` where the time attribute counts iterations
    /// (a trial at `max_t = 16.5` iterations would be stopped at 17).
    fn whole_iterations(&self, setting: &'static str, value: f64) -> Result<()> {
        if self.time_attr == "training_iteration" && value.is_finite() && value.fract() != 0.0 {
            return Err(Error::config(
                self.component,
                setting,
                value,
                format!(
                    "a whole number of iterations ({} or {}): time_attr is \"training_iteration\"; \
                     a fraction needs a time attribute that has them, such as \"time_total_s\"",
                    value.floor(),
                    value.ceil()
                ),
            ));
        }
        Ok(())
    }

    /// `(time, score)` of a result. The score is `sign × value`: infinities keep their order
    /// and a NaN stays NaN, for each scheduler to treat as the module docs say.
    fn read(&self, result: &Metrics) -> Result<(f64, f64)> {
        let (Some(metric), Some(mode)) = (&self.metric, self.mode) else {
            return Err(Error::NotConfigured { component: self.component });
        };
        let time = get_metric(result, &self.time_attr)?;
        let value = get_metric(result, metric)?;
        Ok((time, mode.sign() * value))
    }
}

/// Best first: numbers (infinities included) from the highest score down, then NaN, which
/// ranks below every number (see the module docs).
fn best_first(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => b.total_cmp(&a),
        (true, true) => Ordering::Equal,
        (false, true) => Ordering::Less,
        (true, false) => Ordering::Greater,
    }
}

/// FIFO's choice, shared by the schedulers that do not order trials themselves: the first
/// pending trial, else the first paused one (in id order).
fn first_pending_then_paused(trials: &dyn TrialsView) -> Option<TrialId> {
    let mut paused = None;
    for t in trials.iter() {
        match t.status {
            TrialStatus::Pending => return Some(t.id),
            TrialStatus::Paused if paused.is_none() => paused = Some(t.id),
            _ => {}
        }
    }
    paused
}
