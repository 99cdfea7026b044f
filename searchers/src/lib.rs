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
//! let mut searcher = ConcurrencyLimiter::new(Tpe::with_space(space)?.seed(7), 4)?;
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
//!
//! # Deliberate differences from Ray Tune and Optuna
//!
//! The policies decide as Ray Tune's (and TPE as Optuna's) do wherever a user would compare
//! them: ASHA's cutoffs are NumPy's `nanpercentile` to the last bit, the median rule's means and
//! medians NumPy's, and replayed on the same stream of finite results ASHA makes Ray's decision
//! every time. Where rtune decides otherwise, it is on purpose, and listed here.
//!
//! | Where | rtune | Ray Tune / Optuna | Why | Ray's behaviour |
//! |---|---|---|---|---|
//! | ASHA, HyperBand, median rule, PBT: a NaN result | May stop the trial: at an ASHA rung with a cutoff it is stopped; a HyperBand round ranks it below every number; the median rule stops a trial whose results are all NaN once there is a median; in PBT it exploits a top trial | Every comparison with NaN is false, so the trial runs on (ASHA: `NaN < cutoff`); HyperBand and PBT sort NaN wherever Python's `sorted` leaves it | A diverged trial rarely recovers; its resources are better spent on the others | Not offered: report a finite value instead of NaN if such a trial should run on |
//! | Median rule: a NaN result of another trial | Left out of that trial's running mean; a trial with no number in `[grace_period, t]` is no sample (and does not count towards `min_samples_required`) | `np.mean` / `np.median` make the median NaN, and Ray's rule then stops every trial it judges | One diverged trial must not stop the whole sweep | Not offered |
//! | PBT: a trial whose last score is NaN | Left out of the quantiles: it takes no bottom place from a poor trial and is never a source | Sorted with the others, its place undefined | A NaN must not shield a poor trial from exploiting | Not offered |
//! | ASHA: a cutoff whose neighbours include `±inf` | The limit (the infinite neighbour when it has weight) | NumPy's interpolation gives NaN (`inf·0`, `inf − inf`), and no trial is stopped at that rung | `±inf` are ordered like any number (as in Ray), so the cutoff must be one too | Not offered |
//! | ASHA: bracket of a new trial | Drawn from the scheduler's own generator, seeded by `seed` (the sweep's seed): reproducible, kept in the saved state, told by `TrialScheduler::bracket` | Drawn from NumPy's global generator (`np.random.choice`), with the same probabilities | Reproducible sweeps and exact resume | Same distribution; the sequence differs |
//! | HyperBand: milestones | Cumulative (`r₀·ηᵏ`, capped at `max_t`); the last round always runs to `max_t`, and a trial reaching `max_t` there is stopped at once | Ray's capping arithmetic can end a bracket below `max_t`, and waits for the round's peers | Every bracket trains its survivors to `max_t` | Not offered |
//! | Schedulers: a result without the metric or the time attribute | An error (`Error::MissingMetric`) naming the keys present | Ignored: the scheduler answers `CONTINUE` | A typo in a metric name would otherwise switch early stopping off silently | Not offered |
//! | TPE: constant liar | On by default | Optuna: `constant_liar = False` by default before 5.0 (on since) | Spreads concurrent suggestions; measured in [`searcher::tpe`] | `constant_liar(false)` (`constant_liar = false` in a sweep file) |
//! | TPE: a NaN result | The worst observation (it stays in the model, in the bad group) | Optuna fails the trial and leaves it out of the model | Steers the model away from where trials diverge | Not offered |
//! | TPE: `randn` / `qrandn` | Modelled on the normal's CDF scale | Ray's `OptunaSearch` refuses normal domains | More spaces work unchanged | — |
//! | `points_to_evaluate` | Checked against the space: a key it does not have, a value outside its domain, a dependent value, a constant other than the space's is an `Error::InvalidConfig` naming the point, key, value and domain | Passed on unchecked (Optuna warns and uses an out-of-range value) | A typo in a known point should not run a trial outside the space | Widen the domain to take the value |
//! | Random search: `evaluated_rewards` | Accepted: the points are known and not run, and take no sample away | `BasicVariantGenerator` has no `evaluated_rewards` | Any sweep can be warm-started from an earlier one's results the same way | Leave `evaluated_rewards` out to run the points |

pub mod error;
mod id;
pub mod metrics;
pub mod params;
pub mod pareto;
pub mod rng;
pub mod scheduler;
pub mod searcher;
pub mod space;
pub mod trial;
pub mod value;

mod math;
mod serde_util;

pub use error::{Error, Result};
pub use metrics::{Metrics, Mode, Objective, Objectives, best_trial, violation};
pub use params::Params;
pub use pareto::{hypervolume, hypervolume_2d, pareto_front, pareto_front_where_finite};
pub use rng::SearchRng;
pub use scheduler::{
    Asha, Decision, ExploitStatus, Fifo, HyperBand, MedianStopping, Pbt, RungStatus,
    SchedulerState, SchedulerStatus, TrialScheduler,
};
pub use searcher::{
    BasicVariant, Bohb, CmaEs, CmaEsRestart, ConcurrencyLimiter, Gp, Nsga2, Repeater, Searcher,
    SearcherState, Suggestion, Tpe, auto,
};
pub use space::domain::{
    Domain, choice, lograndint, loguniform, qlograndint, qloguniform, qrandint, qrandn, quniform,
    randint, randn, uniform,
};
pub use space::{Dependent, IntoParam, Param, SearchSpace, dependent, grid_search, sample_from};
pub use trial::{TrialId, TrialInfo, TrialStatus, TrialTable, TrialsView};
pub use value::{FromValue, Map, Value, number_text, param_text};
