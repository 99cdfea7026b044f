//! XGBoost's train function (what `XGBoostTrainer` and the `xgboost` builtin run on every
//! rank) and its probe (a name or value the library refuses, found before any trial runs).
//!
//! Each rank makes a `DMatrix` of its shard of every dataset, so in a group of N ranks the
//! library trains one model on N shards through its collective (the backend joined it), as
//! `xgboost.train` does in each of N Python processes under a `CommunicatorContext`. The
//! library's evaluation is itself summed over the ranks.

use anyhow::Context as _;
use rtune_cli::program::Probed;
use rtune_driver::error::{Error, Result};
use rtune_driver::setting::Setting;
use rtune_searchers::Params;

use super::probe::{Library, Refusal, Tried};
use super::{
    Dense, EarlyStop, LibraryParams, Rounds, Schedule, check_classes, is_rtune_param, no_dataset,
    param_text, stopping_rounds, threads_given,
};
use crate::worker::TrainContext;
use crate::xgboost::{Booster, DMatrix};

pub use crate::xgboost::MODEL_FILE;

/// Params rtune decides for every rank: the threads are the CPUs it reserved.
const THREADS: &str = "nthread";

/// `xgboost.train`'s early stopping (not a booster param): rtune's rounds end once the last
/// dataset's last metric (as `xgboost.train` watches its last eval set's) has not improved for
/// this many rounds.
const STOPPING: &str = "early_stopping_rounds";

/// XGBoost's metrics for which higher is better (its early stopping's list).
fn higher_is_better(metric: &str) -> bool {
    ["auc", "aucpr", "pre", "map", "ndcg"]
        .iter()
        .any(|m| metric == *m || metric.strip_prefix(m).is_some_and(|rest| rest.starts_with('@')))
}

/// Opens the library (once), or says why it cannot be (not installed, another version).
pub fn check_library() -> Result<()> {
    crate::xgboost::api().map(|_| ()).map_err(|e| Error::config(Setting::Builtin, e))
}

/// The library's params of a trial: every param but rtune's own, as text.
fn library_params(params: &Params, threads: usize) -> LibraryParams {
    let (mut out, mut refused) = (Vec::new(), Vec::new());
    let (mut nthread, mut early_stopping) = (threads, None);
    for (key, value) in params.iter() {
        match key {
            _ if is_rtune_param(key) => {}
            STOPPING => match stopping_rounds(key, value) {
                Ok(n) => early_stopping = Some(n),
                Err(e) => refused.push(e),
            },
            THREADS => match threads_given(key, value, nthread) {
                Ok(n) => nthread = n,
                Err(e) => refused.push(e),
            },
            _ => out.extend(param_text(value).into_iter().map(|v| (key.to_owned(), v))),
        }
    }
    out.push((THREADS.into(), nthread.to_string()));
    // So the library says which names it does not know (see `Booster::unused_params`).
    out.push(("validate_parameters".into(), "1".into()));
    LibraryParams { taken: out, refused, early_stopping }
}

/// `xgboost`: boosts `num_boost_round` rounds on dataset `train` (this rank's shard), one
/// report per round with every dataset's evaluation, and a checkpoint of the model; a resumed
/// run loads the checkpoint's model and goes on from its round. It is the train function
/// [`Boosting`] makes simplest.
pub fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let mut boosting = Boosting::start(ctx)?;
    for _ in boosting.rounds() {
        boosting.update()?;
        let metrics = boosting.eval()?;
        if !boosting.report(ctx, metrics)? {
            break;
        }
    }
    Ok(())
}

/// A rank's XGBoost training as a train function of its own drives it (Ray's newer
/// `XGBoostTrainer(train_fn)`, given to [`XGBoostTrainer::with_train_fn`]): this rank's shard
/// of every dataset as a `DMatrix`, a booster with the trial's params (rtune's threads, and a
/// GPU rank's device), the checkpoint's model loaded on a retry or resume, and the rows and
/// checkpoints a report makes (every `checkpoint_frequency` rounds, `early_stopping_rounds`
/// watched), as `xgboost.train` with Ray's report callback gives them. Between rounds the
/// function may set params, boost with its own objective's gradients, and add metrics.
///
/// [`XGBoostTrainer::with_train_fn`]: super::TreeTrainer::with_train_fn
///
/// ```no_run
/// use rtune::trees::xgboost::Boosting;
/// use rtune::TrainContext;
///
/// // Squared error as a custom objective, and a learning rate that decays.
/// fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
///     let mut boosting = Boosting::start(ctx)?;
///     let labels = boosting.labels("train")?.to_vec();
///     for round in boosting.rounds() {
///         boosting.set_param("eta", 0.3 * 0.99f64.powi(round as i32))?;
///         let scores = boosting.margins("train")?;
///         let grad: Vec<f32> = scores.iter().zip(&labels).map(|(s, y)| s - y).collect();
///         boosting.boost(&grad, &vec![1.0; grad.len()])?;
///         let metrics = boosting.eval()?;
///         if !boosting.report(ctx, metrics)? {
///             break;
///         }
///     }
///     Ok(())
/// }
/// ```
pub struct Boosting {
    // Before the matrices it caches: dropped first.
    booster: Booster,
    matrices: Vec<(String, DMatrix, Vec<f32>)>,
    /// Which of them is `train`.
    train: usize,
    rounds: Rounds,
    early_stopping: Option<u64>,
    early_stop: Option<EarlyStop>,
}

impl Boosting {
    /// This rank's training, ready to boost its next round (the checkpoint's, on a retry or
    /// resume): the datasets (`train` required), the trial's params, the model so far.
    pub fn start(ctx: &mut TrainContext) -> anyhow::Result<Boosting> {
        if ctx.world_size() > 1 && ctx.backend_name() != rtune_driver::train::TreeBackend::XGBOOST {
            anyhow::bail!(
                "XGBoost's train function runs on {} ranks without XGBoost's collective: use \
                 XGBoostTrainer (or `builtin = \"xgboost\"`), whose backend joins it",
                ctx.world_size()
            );
        }
        let schedule = Schedule::of(ctx.params())
            .map_err(|(key, why)| anyhow::anyhow!("param `{key}` {why}"))?;
        let sorted = library_params(ctx.params(), ctx.num_cpus());
        let early_stopping = sorted.early_stopping;
        let mut params = sorted.or_refused()?;
        // A rank the pool gave a GPU boosts on it (its first visible one), unless told
        // otherwise.
        if let tch::Device::Cuda(index) = ctx.device()
            && !params.iter().any(|(k, _)| k == "device")
        {
            params.push(("device".into(), format!("cuda:{index}")));
        }
        let names = ctx.dataset_names();
        let train = names.iter().position(|n| n == "train");
        let Some(train) = train else {
            anyhow::bail!(
                "XGBoost needs a dataset named `train` (this run has {})",
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )
        };
        let mut matrices = Vec::new();
        for name in names {
            let dense = Dense::of(&ctx.dataset_shard(&name)?, &name)?;
            let matrix = DMatrix::dense(&dense.features, dense.rows, Some(&dense.labels))
                .map_err(|e| anyhow::anyhow!("XGBoost refused dataset `{name}`: {e}"))?;
            if name == "train" {
                let given =
                    |key: &str| params.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
                let objective = given("objective").filter(|o| o.starts_with("multi:"));
                check_classes(ctx, objective, given("num_class"), &dense.labels)?;
            }
            matrices.push((name, matrix, dense.labels));
        }
        let all: Vec<&DMatrix> = matrices.iter().map(|(_, m, _)| m).collect();
        let mut booster = Booster::new(&all).map_err(library_error)?;
        if let Some(checkpoint) = ctx.checkpoint() {
            let path = crate::xgboost::model_in(checkpoint.path())
                .unwrap_or_else(|| checkpoint.path().join(MODEL_FILE));
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            booster.load_into(&bytes).map_err(library_error)?;
        }
        for (key, value) in &params {
            booster.set_param(key, value).map_err(|e| anyhow::anyhow!("param `{key}`: {e}"))?;
        }
        let done = booster.rounds().map_err(library_error)? as u64;
        anyhow::ensure!(
            done == ctx.iteration(),
            "the checkpoint's model has {done} rounds where the run has reported {}",
            ctx.iteration()
        );
        Ok(Boosting {
            booster,
            matrices,
            train,
            rounds: Rounds::new(schedule, done),
            early_stopping,
            early_stop: None,
        })
    }

    /// The rounds left to boost (0-based: from the model's rounds to `num_boost_round`).
    pub fn rounds(&self) -> std::ops::Range<u64> {
        self.rounds.left()
    }

    /// Boosts the next round with the trial's objective.
    pub fn update(&mut self) -> anyhow::Result<()> {
        let round = self.rounds.boosted() as u32;
        let train = &self.matrices[self.train].1;
        self.booster.update(round, train).map_err(library_error)?;
        self.boosted_one()
    }

    /// Boosts the next round with a custom objective's gradients and hessians of `train`'s
    /// rows (one per row and output, row-major, as [`margins`](Self::margins) gives scores;
    /// XGBoost's `Booster.boost`).
    pub fn boost(&mut self, grad: &[f32], hess: &[f32]) -> anyhow::Result<()> {
        let round = self.rounds.boosted() as u32;
        let train = &self.matrices[self.train].1;
        self.booster.boost(round, train, (grad, hess)).map_err(library_error)?;
        self.boosted_one()
    }

    fn boosted_one(&mut self) -> anyhow::Result<()> {
        if self.rounds.first() {
            tracing::info!("XGBoost boosts on {}", self.booster.device().map_err(library_error)?);
        }
        self.rounds.boosted_one();
        Ok(())
    }

    fn dataset(&self, name: &str) -> anyhow::Result<&(String, DMatrix, Vec<f32>)> {
        let names = || self.matrices.iter().map(|(n, _, _)| n.as_str());
        self.matrices.iter().find(|(n, _, _)| n == name).ok_or_else(|| no_dataset(name, names()))
    }

    /// This rank's labels of dataset `name`.
    pub fn labels(&self, name: &str) -> anyhow::Result<&[f32]> {
        Ok(&self.dataset(name)?.2)
    }

    /// The model's raw scores (margins) of this rank's rows of dataset `name`, one per row
    /// and output (row-major), as a custom objective takes them.
    pub fn margins(&self, name: &str) -> anyhow::Result<Vec<f32>> {
        Ok(self.booster.margins(&self.dataset(name)?.1).map_err(library_error)?.0)
    }

    /// Sets one of XGBoost's params for the rounds to come (`eta`, ...).
    pub fn set_param(&mut self, key: &str, value: impl std::fmt::Display) -> anyhow::Result<()> {
        self.booster
            .set_param(key, &value.to_string())
            .map_err(|e| anyhow::anyhow!("param `{key}`: {e}"))
    }

    /// The last round's evaluation of every dataset (`train-mlogloss`, `valid-mlogloss`),
    /// summed by the library over the ranks.
    pub fn eval(&self) -> anyhow::Result<Vec<(String, f64)>> {
        let round = self.rounds.boosted().saturating_sub(1) as u32;
        let sets: Vec<(&str, &DMatrix)> =
            self.matrices.iter().map(|(n, m, _)| (n.as_str(), m)).collect();
        self.booster.eval(round, &sets).map_err(library_error)
    }

    /// Reports the last round's row (`metrics`, with `training_iteration` its round), with a
    /// checkpoint of the model where `checkpoint_frequency` keeps one; false when boosting
    /// ends here (the last round, or early stopping).
    pub fn report(
        &mut self,
        ctx: &mut TrainContext,
        metrics: Vec<(String, f64)>,
    ) -> anyhow::Result<bool> {
        let round = self.rounds.to_report()?;
        if let (Some(rounds), None) = (self.early_stopping, &self.early_stop) {
            let watched = metrics.last().map(|(name, _)| {
                let metric = name.rsplit_once('-').map_or(name.as_str(), |(_, m)| m);
                (name.clone(), higher_is_better(metric))
            });
            self.early_stop = Some(EarlyStop::new(rounds, 0.0, watched.into_iter().collect()));
        }
        let stops = self.early_stop.as_mut().is_some_and(|e| e.stops(round, &metrics));
        let booster = &self.booster;
        let goes_on = self.rounds.report(ctx, metrics, stops, ("xgboost", MODEL_FILE), || {
            booster.save().map_err(library_error)
        })?;
        if stops {
            tracing::info!("early stopping after round {round}");
        }
        Ok(goes_on)
    }
}

/// The library's words, said as what they are.
fn library_error(message: String) -> anyhow::Error {
    anyhow::anyhow!("XGBoost: {message}")
}

/// Why XGBoost refuses `params`, each at its key (see `probe`), and the metrics a round
/// reports; empty problems when it takes them.
pub fn probe(params: &Params) -> Probed {
    super::probe::probe(&LIBRARY, params)
}

/// What the probe knows of XGBoost.
const LIBRARY: Library = Library {
    open: || crate::xgboost::api().map(|_| ()),
    params: |params| library_params(params, 1),
    unknown: "is not a parameter XGBoost uses (it said \"Parameters: { .. } are not used\"); \
              see XGBoost's parameter list",
    added: &["validate_parameters"],
    other_names: |key| {
        ALIASES.iter().filter(|(k, _)| *k == key).map(|(_, a)| (*a).to_owned()).collect()
    },
    try_params,
};

/// What the library says of `params` set on a booster over four rows of two features (labels
/// 0 and 1 suit classifiers, regressions and counts alike) that boosts a round: the names it
/// did not use, its error with the param it was setting (None: while boosting), or the metrics
/// it evaluates.
fn try_params(params: &[(String, String)]) -> Tried {
    let _quiet = crate::xgboost::LOG.quiet();
    let rows = [0.0f32, 1.0, 1.0, 0.0, 2.0, 3.0, 3.0, 2.0];
    let labels = [0.0f32, 1.0, 0.0, 1.0];
    let outcome = (|| -> std::result::Result<Vec<String>, Refusal> {
        let matrix = DMatrix::dense(&rows, 4, Some(&labels)).map_err(|e| (None, e))?;
        let mut booster = Booster::new(&[&matrix]).map_err(|e| (None, e))?;
        let _ = Booster::unused_params();
        for (key, value) in params {
            booster.set_param(key, value).map_err(|e| (Some(key.clone()), e))?;
        }
        booster.update(0, &matrix).map_err(|e| (None, e))?;
        let evaluated = booster.eval(0, &[("x", &matrix)]).map_err(|e| (None, e))?;
        Ok(evaluated
            .into_iter()
            .map(|(name, _)| name.trim_start_matches("x-").to_owned())
            .collect())
    })();
    let unknown = Booster::unused_params();
    match outcome {
        Ok(metrics) => Tried { unknown, refused: None, metrics },
        Err(refused) => Tried { unknown, refused: Some(refused), metrics: Vec::new() },
    }
}

/// XGBoost's other names for params, as its messages use them.
const ALIASES: [(&str, &str); 4] = [
    ("eta", "learning_rate"),
    ("gamma", "min_split_loss"),
    ("lambda", "reg_lambda"),
    ("alpha", "reg_alpha"),
];
