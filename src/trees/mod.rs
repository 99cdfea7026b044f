//! Tree-based trainers (Ray Train's `XGBoostTrainer` and `LightGBMTrainer`): "pass a dataset
//! and parameters, the training loop is configured automatically". Each is a run of a train
//! function built into rtune (`xgboost::train`, `lightgbm::train`), or of the user's own
//! through the same `Boosting` handle (Ray's newer form, `with_train_fn`), on a worker group
//! whose backend joins the library's own collective (`rtune::worker` backends), so a tree
//! trial is a trial like a Torch one: the same pool, schedulers, checkpoints, rows and views.
//!
//! Params keep the library's own names (`eta`, `max_depth`, `objective`, `eval_metric`, ...),
//! passed to it as they are, with `num_boost_round` (10) rtune's: one row per boosting round,
//! `training_iteration` counting rounds, the library's evaluation of each dataset under Ray's
//! names (`train-mlogloss`, `valid-mlogloss`). Each rank's threads are the CPUs it reserved
//! (`nthread`, `num_threads`; a larger one given is lowered to them). A checkpoint holds the
//! model in the library's format (`model.ubj`, `model.txt`) with the fitted preprocessor; a
//! retried or resumed trial goes on boosting from it. Before any trial runs, `probe` sets a
//! trial's params on a booster over a few rows and says what the library refused.
//!
//! Place in the pipeline: beside `model`, on the worker side (`worker`) and the native
//! libraries (`crate::xgboost`, `crate::lightgbm`); above them only the builtins and the
//! command line.

pub mod lightgbm;
mod probe;
pub mod xgboost;

use std::marker::PhantomData;

use rtune_driver::config::{RunConfig, ScalingConfig};
use rtune_driver::data::{Columns, Dataset, Preprocessor};
use rtune_driver::error::Result;
use rtune_driver::outcome::{Checkpoint, TrainResult};
use rtune_driver::train::{TorchTrainer, TreeBackend};
use rtune_searchers::{Params, Value};
use tch::Kind;

use crate::worker::{DatasetShard, TrainContext, TrainFn};

/// The param rtune reads itself: how many boosting rounds a trial runs.
pub const NUM_BOOST_ROUND: &str = "num_boost_round";

/// Rounds when `num_boost_round` is not given (Ray's default).
pub const DEFAULT_ROUNDS: u64 = 10;

/// The param rtune reads itself: every how many rounds a checkpoint is kept (1, the default:
/// every round, so that a lost rank costs at most a round; 0: only the last round's). The last
/// round's is always kept.
pub const CHECKPOINT_FREQUENCY: &str = "checkpoint_frequency";

/// The params rtune reads itself, never passed to a library.
const RTUNE_PARAMS: [&str; 2] = [NUM_BOOST_ROUND, CHECKPOINT_FREQUENCY];

/// A library a [`TreeTrainer`] runs.
pub trait Library {
    /// The backend that joins its collective.
    const BACKEND: TreeBackend;
    /// Its train function (what every rank runs).
    fn train(ctx: &mut TrainContext) -> anyhow::Result<()>;
    /// Opens it, or says why it cannot be (not installed, another version).
    fn check_library() -> Result<()>;
}

/// XGBoost, for [`XGBoostTrainer`].
#[derive(Debug, Clone, Copy)]
pub struct XGBoost;

impl Library for XGBoost {
    const BACKEND: TreeBackend = TreeBackend::XGBoost;
    fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
        xgboost::train(ctx)
    }
    fn check_library() -> Result<()> {
        xgboost::check_library()
    }
}

/// LightGBM, for [`LightGBMTrainer`].
#[derive(Debug, Clone, Copy)]
pub struct LightGBM;

impl Library for LightGBM {
    const BACKEND: TreeBackend = TreeBackend::LightGBM;
    fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
        lightgbm::train(ctx)
    }
    fn check_library() -> Result<()> {
        lightgbm::check_library()
    }
}

/// A distributed XGBoost run (Ray's `XGBoostTrainer`): `params` are XGBoost's (and
/// `num_boost_round`); datasets `train` (required), `valid` and any other name are evaluated
/// every round.
///
/// ```no_run
/// use rtune::data::{Columns, Dataset};
/// use rtune::{Params, ScalingConfig, XGBoostTrainer};
///
/// let result = XGBoostTrainer::new(
///     Params::new().with("objective", "multi:softprob").with("num_class", 10).with("eta", 0.3),
/// )
/// .num_boost_round(50)
/// .datasets([("train", Dataset::csv("train.csv")), ("valid", Dataset::csv("valid.csv"))])
/// .columns(Columns::new().label("digit"))
/// .scaling(ScalingConfig::workers(2))
/// .fit()?;
/// println!("{:?}", result.metrics.as_ref().map(|m| m["valid-mlogloss"]));
/// # Ok::<(), rtune::Error>(())
/// ```
pub type XGBoostTrainer = TreeTrainer<XGBoost>;

/// A distributed LightGBM run (Ray's `LightGBMTrainer`): `params` are LightGBM's (and
/// `num_boost_round`); datasets as [`XGBoostTrainer`]'s. Its ranks train data-parallel
/// (`tree_learner = "data"`) over LightGBM's network, on ports each rank picks.
///
/// ```no_run
/// use rtune::data::{Columns, Dataset};
/// use rtune::{LightGBMTrainer, Params, ScalingConfig};
///
/// let result = LightGBMTrainer::new(
///     Params::new().with("objective", "multiclass").with("num_class", 10).with("num_leaves", 31),
/// )
/// .num_boost_round(50)
/// .datasets([("train", Dataset::csv("train.csv")), ("valid", Dataset::csv("valid.csv"))])
/// .columns(Columns::new().label("digit"))
/// .scaling(ScalingConfig::workers(2))
/// .fit()?;
/// println!("{:?}", result.metrics.as_ref().map(|m| m["valid-multi_logloss"]));
/// # Ok::<(), rtune::Error>(())
/// ```
pub type LightGBMTrainer = TreeTrainer<LightGBM>;

/// A tree library's trainer: [`XGBoostTrainer`], [`LightGBMTrainer`].
#[derive(Debug, Clone)]
pub struct TreeTrainer<L> {
    trainer: TorchTrainer,
    params: Params,
    library: PhantomData<L>,
}

impl<L: Library> TreeTrainer<L> {
    /// A run of the library with `params` (its names, as its Python `train` takes them).
    pub fn new(params: Params) -> Self {
        let trainer = TorchTrainer::new(L::train).backend(L::BACKEND);
        TreeTrainer { trainer, params, library: PhantomData }
    }

    /// A run of `train_fn` on every rank (Ray's newer `XGBoostTrainer(train_fn)` form) instead
    /// of rtune's own rounds, with `params` its trial's params (`ctx.params()`): the function
    /// drives the library through `Boosting` (`trees::xgboost::Boosting`,
    /// `trees::lightgbm::Boosting`), rtune's handle on the rank's shards, booster and
    /// reports, on the same backend, datasets and checkpoints as [`new`](Self::new)'s.
    pub fn with_train_fn(train_fn: TrainFn, params: Params) -> Self {
        let trainer = TorchTrainer::new(train_fn).backend(L::BACKEND);
        TreeTrainer { trainer, params, library: PhantomData }
    }

    /// Boosting rounds (Ray's `num_boost_round`; 10 by default).
    pub fn num_boost_round(mut self, rounds: u64) -> Self {
        self.params = self.params.with(NUM_BOOST_ROUND, rounds as i64);
        self
    }

    /// Datasets by name: `train` is boosted on; every one (`train` too) is evaluated each round.
    pub fn datasets<S: Into<String>>(
        self,
        datasets: impl IntoIterator<Item = (S, Dataset)>,
    ) -> Self {
        TreeTrainer { trainer: self.trainer.datasets(datasets), ..self }
    }

    /// The label column (required) and the features (every other column by default).
    pub fn columns(self, columns: Columns) -> Self {
        TreeTrainer { trainer: self.trainer.columns(columns), ..self }
    }

    /// A preprocessor fitted on `train` (trees need none for numbers; encoders for strings).
    pub fn preprocessor(self, preprocessor: impl Into<Preprocessor>) -> Self {
        TreeTrainer { trainer: self.trainer.preprocessor(preprocessor), ..self }
    }

    /// How many ranks train the one model, each on its shard, with how many CPUs each.
    pub fn scaling(self, scaling: ScalingConfig) -> Self {
        TreeTrainer { trainer: self.trainer.scaling(scaling), ..self }
    }

    pub fn run_config(self, run: RunConfig) -> Self {
        TreeTrainer { trainer: self.trainer.run_config(run), ..self }
    }

    /// Goes on boosting from `checkpoint`'s model.
    pub fn resume_from_checkpoint(self, checkpoint: Checkpoint) -> Self {
        TreeTrainer { trainer: self.trainer.resume_from_checkpoint(checkpoint), ..self }
    }

    /// Runs the training to its end (see `TorchTrainer::fit`). The library missing, or of
    /// another version, is an error before anything starts.
    pub fn fit(self) -> Result<TrainResult> {
        L::check_library()?;
        TorchTrainer::from(self).fit()
    }
}

impl<L: Library> From<TreeTrainer<L>> for TorchTrainer {
    fn from(trainer: TreeTrainer<L>) -> TorchTrainer {
        trainer.trainer.train_loop_config(trainer.params)
    }
}

/// A trial's params as a library is given them (as text), and those rtune refuses, each at its
/// key (`param_space.<key>`) with why.
#[derive(Debug, Default)]
pub(crate) struct LibraryParams {
    pub(crate) taken: Vec<(String, String)>,
    pub(crate) refused: Vec<(String, String)>,
    /// The rounds without improvement that end boosting (the library's early stopping).
    pub(crate) early_stopping: Option<u64>,
}

impl LibraryParams {
    /// The params taken, or the refusals as a train function's error.
    pub(crate) fn or_refused(self) -> anyhow::Result<Vec<(String, String)>> {
        if self.refused.is_empty() {
            return Ok(self.taken);
        }
        let said: Vec<String> =
            self.refused.iter().map(|(k, why)| format!("param `{k}` {why}")).collect();
        anyhow::bail!("{}", said.join("; "))
    }
}

/// Early stopping rounds as a param gives them (a whole number, at least 1).
pub(crate) fn stopping_rounds(
    key: &str,
    value: &Value,
) -> std::result::Result<u64, (String, String)> {
    match value {
        Value::Int(n) if *n >= 1 => Ok(*n as u64),
        other => Err((
            key.to_owned(),
            format!("is {}: use a whole number of rounds, at least 1", other.describe()),
        )),
    }
}

/// Early stopping as the libraries' Python `train` does it: boosting ends once a watched metric
/// has not improved (by more than `min_delta`) for `rounds` rounds; the round it ends at keeps a
/// checkpoint. Counted from the round a trial starts or resumes at.
#[derive(Debug)]
pub(crate) struct EarlyStop {
    rounds: u64,
    min_delta: f64,
    watched: Vec<Watched>,
}

/// A metric early stopping watches (`valid-mlogloss`), whether higher is better, and its best
/// value and round so far.
#[derive(Debug)]
struct Watched {
    name: String,
    higher: bool,
    best: Option<(f64, u64)>,
}

impl EarlyStop {
    pub(crate) fn new(rounds: u64, min_delta: f64, watched: Vec<(String, bool)>) -> EarlyStop {
        let watched = watched
            .into_iter()
            .map(|(name, higher)| Watched { name, higher, best: None })
            .collect();
        EarlyStop { rounds, min_delta, watched }
    }

    /// After round `round`'s metrics: whether boosting ends here.
    pub(crate) fn stops(&mut self, round: u64, metrics: &[(String, f64)]) -> bool {
        let mut stops = false;
        for Watched { name, higher, best } in &mut self.watched {
            let Some(&(_, value)) = metrics.iter().find(|(n, _)| n == name) else { continue };
            let better = match *best {
                None => true,
                Some((b, _)) if *higher => value > b + self.min_delta,
                Some((b, _)) => value < b - self.min_delta,
            };
            if better {
                *best = Some((value, round));
            }
            stops |= best.is_some_and(|(_, at)| round - at >= self.rounds);
        }
        stops
    }
}

/// The threads a rank gives the library: the CPUs it reserved, or fewer if `key` (the
/// library's thread count) says so; 0 or less is the library's "all", which is the CPUs.
pub(crate) fn threads_given(
    key: &str,
    value: &Value,
    reserved: usize,
) -> std::result::Result<usize, (String, String)> {
    match value {
        Value::Int(n) if *n >= 1 => Ok(reserved.min(*n as usize)),
        Value::Int(_) => Ok(reserved),
        other => {
            Err((key.to_owned(), format!("is {}: use a whole number of threads", other.describe())))
        }
    }
}

/// A multiclass objective (`objective`, None for another) needs `num_class`, at least the
/// labels' classes (the largest label + 1 across every rank's shard).
pub(crate) fn check_classes(
    ctx: &mut TrainContext,
    objective: Option<&str>,
    num_class: Option<&str>,
    labels: &[f32],
) -> anyhow::Result<()> {
    // The same params on every rank: all of them return here, or all meet below.
    let Some(objective) = objective else { return Ok(()) };
    // Each rank's largest label in its own slot, summed: every rank's, on every rank.
    let mut tops = vec![0f32; ctx.world_size()];
    tops[ctx.world_rank()] = labels.iter().copied().fold(0f32, f32::max);
    ctx.all_reduce(&mut tops, rtune_collective::ReduceOp::Sum)?;
    let classes = tops.iter().copied().fold(0f32, f32::max) as i64 + 1;
    match num_class.map(str::parse::<i64>) {
        None => anyhow::bail!(
            "param `num_class` is missing: objective {objective:?} needs it; the labels of \
             `train` have {classes} classes (set num_class = {classes})"
        ),
        Some(Ok(n)) if n < classes => anyhow::bail!(
            "param `num_class` = {n}, but the labels of `train` go up to {} ({classes} classes): \
             set num_class = {classes}",
            classes - 1
        ),
        _ => Ok(()),
    }
}

/// A param's value as the libraries read it from text (`true`, `0.3`, `multi:softprob`); a
/// list is one value per item (`eval_metric = ["mlogloss", "merror"]`).
pub(crate) fn param_text(value: &Value) -> Vec<String> {
    match value {
        Value::Null => Vec::new(),
        Value::Bool(b) => vec![b.to_string()],
        Value::Int(i) => vec![i.to_string()],
        Value::Float(x) => vec![x.to_string()],
        Value::Str(s) => vec![s.clone()],
        Value::List(items) => items.iter().flat_map(param_text).collect(),
        Value::Map(_) => vec![value.to_string()],
    }
}

/// A trial's rounds and which of them keep a checkpoint, from its params; the error names the
/// param and says what it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    pub(crate) rounds: u64,
    checkpoint_every: u64,
}

impl Schedule {
    pub(crate) fn of(params: &Params) -> std::result::Result<Schedule, (String, String)> {
        let rounds = rounds(params).map_err(|e| (NUM_BOOST_ROUND.to_owned(), e.to_string()))?;
        let checkpoint_every = match params.value(CHECKPOINT_FREQUENCY) {
            None => 1,
            Some(Value::Int(n)) if *n >= 0 => *n as u64,
            Some(other) => {
                let why = format!(
                    "is {}: use a whole number of rounds (0: only the last round's)",
                    other.describe()
                );
                return Err((CHECKPOINT_FREQUENCY.to_owned(), why));
            }
        };
        Ok(Schedule { rounds, checkpoint_every })
    }

    /// Whether round `round` (1-based) keeps a checkpoint.
    fn keeps(&self, round: u64) -> bool {
        round == self.rounds
            || (self.checkpoint_every > 0 && round.is_multiple_of(self.checkpoint_every))
    }

    /// The same, ending at round `last` (a library that can boost no further).
    pub(crate) fn ending_at(self, last: u64) -> Schedule {
        Schedule { rounds: last, ..self }
    }
}

/// A rank's rounds as a `Boosting` counts them: those boosted and reported (the same but
/// while a round waits for its report), and which keep a checkpoint.
#[derive(Debug)]
pub(crate) struct Rounds {
    schedule: Schedule,
    boosted: u64,
    reported: u64,
}

impl Rounds {
    /// The rounds of `schedule`, `done` of them in the model already.
    pub(crate) fn new(schedule: Schedule, done: u64) -> Rounds {
        Rounds { schedule, boosted: done, reported: done }
    }

    /// The rounds left to boost (0-based).
    pub(crate) fn left(&self) -> std::ops::Range<u64> {
        self.boosted..self.schedule.rounds
    }

    /// Rounds boosted so far: the next round's 0-based number, the last one's 1-based.
    pub(crate) fn boosted(&self) -> u64 {
        self.boosted
    }

    /// Whether no round was boosted yet in this run (a resume's first counts as its first).
    pub(crate) fn first(&self) -> bool {
        self.boosted == self.reported
    }

    pub(crate) fn boosted_one(&mut self) {
        self.boosted += 1;
    }

    /// The round a report is for (1-based: the one just boosted), or why there is none.
    pub(crate) fn to_report(&self) -> anyhow::Result<u64> {
        let round = self.boosted;
        anyhow::ensure!(
            round == self.reported + 1,
            "report once after each round boosted (round {round} is reported already)"
        );
        Ok(round)
    }

    /// Reports the round [`to_report`](Self::to_report) says (see `report_round`), the last one
    /// if it `ends` there; whether boosting goes on.
    pub(crate) fn report(
        &mut self,
        ctx: &mut TrainContext,
        metrics: Vec<(String, f64)>,
        ends: bool,
        file: (&str, &str),
        save: impl FnOnce() -> anyhow::Result<Vec<u8>>,
    ) -> anyhow::Result<bool> {
        let round = self.to_report()?;
        let schedule = if ends { self.schedule.ending_at(round) } else { self.schedule };
        report_round(ctx, &schedule, round, metrics, file, save)?;
        self.reported = round;
        Ok(!ends && round < self.schedule.rounds)
    }
}

/// A run has no dataset `name`: it has `names`.
pub(crate) fn no_dataset<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> anyhow::Error {
    let names: Vec<&str> = names.collect();
    anyhow::anyhow!("no dataset `{name}` in this run (it has {})", names.join(", "))
}

/// Whether `key` is a param rtune reads itself.
pub(crate) fn is_rtune_param(key: &str) -> bool {
    RTUNE_PARAMS.contains(&key)
}

/// Reports round `round`'s (1-based) metrics, with a checkpoint of the model (`save`'s bytes in
/// `file`) where `schedule` keeps one.
fn report_round(
    ctx: &mut TrainContext,
    schedule: &Schedule,
    round: u64,
    metrics: Vec<(String, f64)>,
    (framework, file): (&str, &str),
    save: impl FnOnce() -> anyhow::Result<Vec<u8>>,
) -> anyhow::Result<()> {
    if !schedule.keeps(round) {
        return Ok(ctx.report(metrics)?);
    }
    let mut checkpoint = ctx.new_checkpoint()?;
    if checkpoint.is_kept() {
        std::fs::write(checkpoint.path().join(file), save()?)?;
        checkpoint = checkpoint.metadata(serde_json::json!({
            "framework": framework,
            "rounds": round,
        }));
    }
    Ok(ctx.report_with_checkpoint(metrics, checkpoint)?)
}

/// The rounds a trial runs, from its params; the error says what `num_boost_round` is.
fn rounds(params: &Params) -> anyhow::Result<u64> {
    match params.value(NUM_BOOST_ROUND) {
        None => Ok(DEFAULT_ROUNDS),
        Some(Value::Int(n)) if *n >= 1 => Ok(*n as u64),
        Some(other) => {
            anyhow::bail!("is {}: use a whole number of rounds, at least 1", other.describe())
        }
    }
}

/// A shard as the libraries take it: its features row-major, its labels as floats.
pub(crate) struct Dense {
    pub(crate) features: Vec<f32>,
    pub(crate) labels: Vec<f32>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl Dense {
    pub(crate) fn of(shard: &DatasetShard, name: &str) -> anyhow::Result<Dense> {
        let features = shard.features().to_device(tch::Device::Cpu).contiguous();
        let size = features.size();
        let (rows, cols) = (size[0] as usize, size.get(1).copied().unwrap_or(0) as usize);
        let labels = shard.labels().ok_or_else(|| {
            anyhow::anyhow!(
                "dataset `{name}` has no label: give the label column (`[datasets] label` in a \
                 sweep file, `Columns::label` in Rust)"
            )
        })?;
        let labels = labels.to_device(tch::Device::Cpu).to_kind(Kind::Float).contiguous();
        Ok(Dense {
            features: Vec::<f32>::try_from(features.view([-1]))?,
            labels: Vec::<f32>::try_from(labels.view([-1]))?,
            rows,
            cols,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_stopping_ends_after_rounds_without_improvement() {
        let mut stop = EarlyStop::new(2, 0.0, vec![("valid-auc".into(), true)]);
        let auc = |v: f64| vec![("valid-auc".to_owned(), v)];
        assert!(!stop.stops(1, &auc(0.8)));
        assert!(!stop.stops(2, &auc(0.9)));
        assert!(!stop.stops(3, &auc(0.9)));
        assert!(stop.stops(4, &auc(0.85)));
        let mut loss = EarlyStop::new(1, 0.1, vec![("valid-l2".into(), false)]);
        assert!(!loss.stops(1, &[("valid-l2".into(), 1.0)]));
        // Better, but by no more than min_delta.
        assert!(loss.stops(2, &[("valid-l2".into(), 0.95)]));
    }

    #[test]
    fn a_schedule_keeps_every_nth_round_and_the_last() {
        let kept = |params: Params| {
            let schedule = Schedule::of(&params).unwrap();
            (1..=schedule.rounds).filter(|&r| schedule.keeps(r)).collect::<Vec<_>>()
        };
        let ten = Params::new().with(NUM_BOOST_ROUND, 10);
        assert_eq!(kept(ten.clone()), (1..=10).collect::<Vec<_>>());
        assert_eq!(kept(ten.clone().with(CHECKPOINT_FREQUENCY, 4)), [4, 8, 10]);
        assert_eq!(kept(ten.clone().with(CHECKPOINT_FREQUENCY, 0)), [10]);
        let (key, why) = Schedule::of(&ten.with(CHECKPOINT_FREQUENCY, -1)).unwrap_err();
        assert_eq!(key, CHECKPOINT_FREQUENCY);
        assert!(why.contains("whole number"), "{why}");
        assert_eq!(Schedule::of(&Params::new()).unwrap().rounds, DEFAULT_ROUNDS);
    }
}
