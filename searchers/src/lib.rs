//! rtune-searchers: the policy half of rtune. Search spaces, searchers and trial schedulers
//! decide; they never act (no I/O, no clock, no threads). Randomness is seeded and kept in each
//! policy's state, so every policy can be saved and restored exactly (sweep resume).
//!
//! ```text
//! SearchSpace (builder or sweep file) ──validate──▶ Searcher::suggest ──▶ Params ──▶ controller
//!                                                                         │
//! results (Metrics) ──▶ TrialScheduler::on_trial_result ──▶ Decision ◀────┘ (Continue, Pause,
//!                   ──▶ Searcher::on_trial_result / on_trial_complete      Stop, Exploit)
//! ```
//!
//! ```
//! use rtune_searchers::*;
//!
//! # fn main() -> rtune_searchers::Result<()> {
//! let space = SearchSpace::new()
//!     .add("lr", loguniform(1e-4, 1e-1)?)
//!     .add("hidden", choice([64, 128, 256]))
//!     .add("epochs", 20)
//!     .add("batch", dependent(|p| Ok(p.get::<i64>("hidden")? / 2)));
//! let mut searcher = ConcurrencyLimiter::new(Tpe::new(space)?.seed(7), 4)?;
//! searcher.set_metric("val_acc", Mode::Max)?;
//! let mut scheduler = Asha::new().max_t(20).grace_period(2);
//! scheduler.set_metric("val_acc", Mode::Max)?;
//!
//! let mut trials = TrialTable::new();
//! let id = TrialId(0);
//! let Suggestion::Params(params) = searcher.suggest(id)? else { unreachable!() };
//! assert!(params.get::<f64>("lr")? >= 1e-4);
//! trials.add(id, params);
//! scheduler.on_trial_add(&trials, id)?;
//! let result = Metrics::from([("training_iteration".into(), 1.0), ("val_acc".into(), 0.8)]);
//! assert_eq!(scheduler.on_trial_result(&trials, id, &result)?, Decision::Continue);
//! searcher.on_trial_complete(id, Some(&result), false)?;
//! # Ok(())
//! # }
//! ```
//!
//! Modules in pipeline order: [`value`] and [`params`] (the data), [`space`] (what to search),
//! [`searcher`] (which params next), [`metrics`] and [`trial`] (what schedulers see),
//! [`scheduler`] (what to do with a running trial). The controller that carries out decisions
//! lives in the `rtune` crate, not here.

pub mod error;
mod id;
pub mod metrics;
pub mod params;
pub mod rng;
pub mod scheduler;
pub mod searcher;
pub mod space;
pub mod trial;
pub mod value;

mod math;
mod serde_util;

pub use error::{Error, Result};
pub use metrics::{Metrics, Mode, Objective};
pub use params::Params;
pub use rng::SearchRng;
pub use scheduler::{
    Asha, Decision, ExploitStatus, Fifo, HyperBand, MedianStopping, Pbt, RungStatus,
    SchedulerState, SchedulerStatus, TrialScheduler,
};
pub use searcher::{
    BasicVariant, ConcurrencyLimiter, Repeater, Searcher, SearcherState, Suggestion, Tpe,
};
pub use space::domain::{
    Domain, choice, lograndint, loguniform, qlograndint, qloguniform, qrandint, qrandn, quniform,
    randint, randn, uniform,
};
pub use space::{Dependent, IntoParam, Param, SearchSpace, dependent, grid_search, sample_from};
pub use trial::{TrialId, TrialInfo, TrialStatus, TrialTable, TrialsView};
pub use value::{FromValue, Map, Value};
