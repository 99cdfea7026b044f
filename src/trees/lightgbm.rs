//! LightGBM's train function (what `LightGBMTrainer` and the `lightgbm` builtin run on every
//! rank) and its probe (a name or value the library refuses, found before any trial runs).
//!
//! Each rank makes a `Dataset` of its shard of every dataset (the eval sets binned as the
//! training set is), so in a group of N ranks the library trains one model data-parallel
//! (`tree_learner = "data"`, `pre_partition`: each rank's rows are its own) over its network
//! (the backend joined it), as `lightgbm.train` does in N Python processes given the machine
//! list. LightGBM evaluates each rank's rows alone; rtune pools the ranks' values into the
//! metric over all their rows: exactly for means (log losses, error rates, l1, l2...) and for
//! rmse (through its square), as the row-weighted mean of the ranks' values for the rest (auc,
//! average_precision, ndcg@k, map@k).
//!
//! A resumed run does what `lightgbm.train(init_model=..)` does: the checkpoint's model gives
//! every dataset's raw scores, boosting starts from them, and the model's trees are put before
//! the new ones.

use anyhow::Context as _;
use rtune_cli::program::Probed;
use rtune_driver::error::{Error, Result};
use rtune_driver::setting::Setting;
use rtune_driver::train::TreeBackend;
use rtune_searchers::Params;

use super::probe::{Library, Refusal, Tried};
use super::{
    Dense, EarlyStop, LibraryParams, Rounds, Schedule, check_classes, is_rtune_param, no_dataset,
    param_text, stopping_rounds, threads_given,
};
use crate::lightgbm::{Booster, Dataset, LOG, main_name, params_text, unknown_params};
use crate::worker::TrainContext;

pub use crate::lightgbm::MODEL_FILE;

/// The threads param rtune decides for every rank: the CPUs it reserved.
const THREADS: &str = "num_threads";

/// LightGBM's multiclass objectives (by their main names and aliases), which need `num_class`.
const MULTICLASS: [&str; 6] =
    ["multiclass", "softmax", "multiclassova", "multiclass_ova", "ova", "ovr"];

/// Opens the library (once), or says why it cannot be (not installed, another version).
pub fn check_library() -> Result<()> {
    crate::lightgbm::api().map(|_| ()).map_err(|e| Error::config(Setting::Builtin, e))
}

/// The library's params of a trial on `world` ranks: every param but rtune's own, as text, and
/// those that make the ranks one model; the names rtune decides itself are refused.
fn library_params(params: &Params, threads: usize, world: usize) -> LibraryParams {
    let (mut out, mut refused) = (Vec::new(), Vec::new());
    let (mut num_threads, mut learner_given, mut early_stopping) = (threads, false, None);
    for (key, value) in params.iter() {
        if is_rtune_param(key) {
            continue;
        }
        let said = |why: &str| (key.to_owned(), why.to_owned());
        match main_name(key).as_str() {
            THREADS => match threads_given(key, value, num_threads) {
                Ok(n) => num_threads = n,
                Err(e) => refused.push(e),
            },
            "num_iterations" => refused.push(said(
                "is LightGBM's name for the boosting rounds, which rtune reads from \
                 `num_boost_round`: give that instead",
            )),
            "machines"
            | "num_machines"
            | "local_listen_port"
            | "machine_list_filename"
            | "pre_partition"
            | "time_out" => refused.push(said(
                "is set by rtune from the trial's ranks (`scaling.num_workers`): leave it out",
            )),
            "early_stopping_round" => match stopping_rounds(key, value) {
                Ok(n) => early_stopping = Some(n),
                Err(e) => refused.push(e),
            },
            main => {
                learner_given |= main == "tree_learner";
                out.push((key.to_owned(), param_text(value).join(",")));
            }
        }
    }
    out.push((THREADS.into(), num_threads.to_string()));
    if world > 1 {
        out.push(("num_machines".into(), world.to_string()));
        out.push(("pre_partition".into(), "true".into()));
        if !learner_given {
            out.push(("tree_learner".into(), "data".into()));
        }
    }
    LibraryParams { taken: out, refused, early_stopping }
}

/// `lightgbm`: boosts `num_boost_round` rounds on dataset `train` (this rank's shard), one
/// report per round with every dataset's evaluation, and a checkpoint of the model; a resumed
/// run boosts on from the checkpoint's model. It is the train function [`Boosting`] makes
/// simplest.
pub fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let mut boosting = Boosting::start(ctx)?;
    for _ in boosting.rounds() {
        boosting.update()?;
        let metrics = boosting.eval(ctx)?;
        if !boosting.report(ctx, metrics)? {
            break;
        }
    }
    Ok(())
}

/// A rank's LightGBM training as a train function of its own drives it (Ray's newer
/// `LightGBMTrainer(train_fn)`, given to [`LightGBMTrainer::with_train_fn`]): this rank's
/// shard of every dataset as a LightGBM `Dataset` (the eval sets binned as `train`), a booster
/// with the trial's params (rtune's threads, the ranks' network), the checkpoint's model
/// boosted on from on a retry or resume, and the rows and checkpoints a report makes (every
/// `checkpoint_frequency` rounds, `early_stopping_round` watched), as `lightgbm.train` with
/// Ray's report callback gives them. Between rounds the function may boost with its own
/// objective's gradients (with `objective = "none"`) and add metrics.
///
/// [`LightGBMTrainer::with_train_fn`]: super::TreeTrainer::with_train_fn
///
/// ```no_run
/// use rtune::trees::lightgbm::Boosting;
/// use rtune::TrainContext;
///
/// // Squared error as a custom objective (the trial's params say `objective = "none"`).
/// fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
///     let mut boosting = Boosting::start(ctx)?;
///     let labels = boosting.labels("train")?.to_vec();
///     for _ in boosting.rounds() {
///         let scores = boosting.scores("train")?;
///         let grad: Vec<f32> = scores.iter().zip(&labels).map(|(s, y)| *s as f32 - y).collect();
///         boosting.boost(&grad, &vec![1.0; grad.len()])?;
///         let metrics = boosting.eval(ctx)?;
///         if !boosting.report(ctx, metrics)? {
///             break;
///         }
///     }
///     Ok(())
/// }
/// ```
pub struct Boosting {
    // Before the datasets it trains on: dropped first.
    booster: Booster,
    sets: Vec<(String, Dataset, Vec<f32>)>,
    metrics: Vec<String>,
    rounds: Rounds,
    early_stop: Option<EarlyStop>,
    /// The last round added no tree (LightGBM can split no further).
    finished: bool,
}

impl Boosting {
    /// This rank's training, ready to boost its next round (the checkpoint's, on a retry or
    /// resume): the datasets (`train` first, required), the trial's params, the model so far.
    pub fn start(ctx: &mut TrainContext) -> anyhow::Result<Boosting> {
        if ctx.world_size() > 1 && ctx.backend_name() != TreeBackend::LIGHTGBM {
            anyhow::bail!(
                "LightGBM's train function runs on {} ranks without LightGBM's network: use \
                 LightGBMTrainer (or `builtin = \"lightgbm\"`), whose backend joins it",
                ctx.world_size()
            );
        }
        let schedule = Schedule::of(ctx.params())
            .map_err(|(key, why)| anyhow::anyhow!("param `{key}` {why}"))?;
        let sorted = library_params(ctx.params(), ctx.num_cpus(), ctx.world_size());
        let early_stopping = sorted.early_stopping;
        let params = sorted.or_refused()?;
        let text = params_text(&params);
        if ctx.device().is_cuda() {
            tracing::warn!("LightGBM's wheel boosts on the CPU: this rank's GPU stays idle");
        }
        let names = ctx.dataset_names();
        anyhow::ensure!(
            names.first().is_some_and(|n| n == "train"),
            "LightGBM needs a dataset named `train` (this run has {})",
            if names.is_empty() { "none".to_owned() } else { names.join(", ") }
        );
        let earlier = match ctx.checkpoint() {
            Some(checkpoint) => {
                let path = checkpoint.path().join(MODEL_FILE);
                let model = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                Some(Booster::load(&model).map_err(library_error)?)
            }
            None => None,
        };
        let predict_params = format!("{THREADS}={}", ctx.num_cpus());
        let mut sets: Vec<(String, Dataset, Vec<f32>)> = Vec::new();
        for name in names.iter().cloned() {
            let dense = Dense::of(&ctx.dataset_shard(&name)?, &name)?;
            let reference = sets.first().map(|(_, train, _)| train);
            let dataset = Dataset::dense(
                &dense.features,
                dense.rows,
                dense.cols,
                &dense.labels,
                &text,
                reference,
            )
            .map_err(|e| anyhow::anyhow!("LightGBM refused dataset `{name}`: {e}"))?;
            if name == "train" {
                let given = |main: &str| {
                    params.iter().find(|(k, _)| main_name(k) == main).map(|(_, v)| v.as_str())
                };
                let objective = given("objective").filter(|o| MULTICLASS.contains(o));
                check_classes(ctx, objective, given("num_class"), &dense.labels)?;
            }
            if let Some(earlier) = &earlier {
                let raw = earlier
                    .predict(&dense.features, dense.rows, dense.cols, true, &predict_params)
                    .map_err(library_error)?;
                dataset.set_init_score(&class_major(&raw, dense.rows)).map_err(library_error)?;
            }
            sets.push((name, dataset, dense.labels));
        }
        let mut booster = Booster::new(&sets[0].1, &text).map_err(library_error)?;
        for (_, valid, _) in &sets[1..] {
            booster.add_valid(valid).map_err(library_error)?;
        }
        if let Some(earlier) = &earlier {
            booster.merge(earlier).map_err(library_error)?;
        }
        let metrics = booster.eval_names().map_err(library_error)?;
        let early_stop = match early_stopping {
            Some(rounds) => Some(early_stop(rounds, &params, &names, &metrics)?),
            None => None,
        };
        let done = booster.rounds().map_err(library_error)? as u64;
        anyhow::ensure!(
            done == ctx.iteration(),
            "the checkpoint's model has {done} rounds where the run has reported {}",
            ctx.iteration()
        );
        Ok(Boosting {
            booster,
            sets,
            metrics,
            rounds: Rounds::new(schedule, done),
            early_stop,
            finished: false,
        })
    }

    /// The rounds left to boost (0-based: from the model's rounds to `num_boost_round`).
    pub fn rounds(&self) -> std::ops::Range<u64> {
        self.rounds.left()
    }

    /// Boosts the next round with the trial's objective.
    pub fn update(&mut self) -> anyhow::Result<()> {
        self.finished = self.booster.update().map_err(library_error)?;
        self.rounds.boosted_one();
        Ok(())
    }

    /// Boosts the next round with a custom objective's gradients and hessians of `train`'s
    /// rows (one per row and class, class-major, as [`scores`](Self::scores) gives scores).
    pub fn boost(&mut self, grad: &[f32], hess: &[f32]) -> anyhow::Result<()> {
        self.finished = self.booster.boost(grad, hess).map_err(library_error)?;
        self.rounds.boosted_one();
        Ok(())
    }

    fn index(&self, name: &str) -> anyhow::Result<usize> {
        let names = || self.sets.iter().map(|(n, _, _)| n.as_str());
        self.sets.iter().position(|(n, _, _)| n == name).ok_or_else(|| no_dataset(name, names()))
    }

    /// This rank's labels of dataset `name`.
    pub fn labels(&self, name: &str) -> anyhow::Result<&[f32]> {
        Ok(&self.sets[self.index(name)?].2)
    }

    /// The model's scores of this rank's rows of dataset `name`, one per row and class
    /// (class-major), as LightGBM gives a custom objective them: raw with `objective =
    /// "none"`, through the trial's objective otherwise.
    pub fn scores(&self, name: &str) -> anyhow::Result<Vec<f64>> {
        self.booster.scores(self.index(name)?).map_err(library_error)
    }

    /// The last round's evaluation of every dataset (`valid-multi_logloss`), each over every
    /// rank's rows (LightGBM evaluates a rank's alone; see the module's words on pooling).
    pub fn eval(&self, ctx: &mut TrainContext) -> anyhow::Result<Vec<(String, f64)>> {
        let mut evaluated = Vec::new();
        for (index, (name, dataset, _)) in self.sets.iter().enumerate() {
            let values = self.booster.eval(index, self.metrics.len()).map_err(library_error)?;
            for (metric, value) in self.metrics.iter().zip(values) {
                evaluated.push((format!("{name}-{metric}"), value, dataset.rows()));
            }
        }
        pool(ctx, &evaluated)
    }

    /// Reports the last round's row (`metrics`, with `training_iteration` its round), with a
    /// checkpoint of the model where `checkpoint_frequency` keeps one; false when boosting
    /// ends here (the last round, early stopping, or a round that added no tree: every later
    /// one would add none either, so it is the last and keeps the model).
    pub fn report(
        &mut self,
        ctx: &mut TrainContext,
        metrics: Vec<(String, f64)>,
    ) -> anyhow::Result<bool> {
        let round = self.rounds.to_report()?;
        let stops = self.early_stop.as_mut().is_some_and(|e| e.stops(round, &metrics));
        let booster = &self.booster;
        let goes_on = self.rounds.report(
            ctx,
            metrics,
            self.finished || stops,
            ("lightgbm", MODEL_FILE),
            || Ok(booster.save_text().map_err(library_error)?.into_bytes()),
        )?;
        match (self.finished, stops) {
            (true, _) => tracing::info!("LightGBM can split no further after round {round}"),
            (false, true) => tracing::info!("early stopping after round {round}"),
            _ => {}
        }
        Ok(goes_on)
    }
}

/// LightGBM's early stopping (its `early_stopping` callback's): every metric of every dataset
/// but `train` watched (the first only with `first_metric_only`), better by more than
/// `early_stopping_min_delta`.
fn early_stop(
    rounds: u64,
    params: &[(String, String)],
    names: &[String],
    metrics: &[String],
) -> anyhow::Result<EarlyStop> {
    let given = |main: &str| params.iter().find(|(k, _)| main_name(k) == main).map(|(_, v)| v);
    let first_only = given("first_metric_only").is_some_and(|v| v == "true");
    let min_delta = match given("early_stopping_min_delta") {
        Some(v) => v.parse::<f64>().map_err(|_| {
            anyhow::anyhow!("param `early_stopping_min_delta` is {v:?}: use a number")
        })?,
        None => 0.0,
    };
    let watched: Vec<(String, bool)> = names
        .iter()
        .filter(|name| *name != "train")
        .flat_map(|name| {
            let taken = if first_only { 1 } else { metrics.len() };
            metrics.iter().take(taken).map(move |metric| {
                let higher = ["auc", "ndcg@", "map@", "average_precision"]
                    .iter()
                    .any(|p| metric.starts_with(p));
                (format!("{name}-{metric}"), higher)
            })
        })
        .collect();
    anyhow::ensure!(
        !watched.is_empty(),
        "param `early_stopping_round` watches a dataset other than `train`, and this run has \
         none: add one (`valid`) to the datasets"
    );
    Ok(EarlyStop::new(rounds, min_delta, watched))
}

/// The library's words, said as what they are.
fn library_error(message: String) -> anyhow::Error {
    anyhow::anyhow!("LightGBM: {message}")
}

/// `rows` rows of k scores each (row-major) as LightGBM's `init_score` takes them: every row's
/// score of class 0, then of class 1, ...
fn class_major(scores: &[f64], rows: usize) -> Vec<f64> {
    let k = scores.len().checked_div(rows).unwrap_or(0);
    (0..k).flat_map(|class| (0..rows).map(move |row| scores[row * k + class])).collect()
}

/// Each metric over every rank's rows, from each rank's (name, value over its rows, rows).
fn pool(
    ctx: &mut TrainContext,
    local: &[(String, f64, usize)],
) -> anyhow::Result<Vec<(String, f64)>> {
    if ctx.world_size() == 1 {
        return Ok(local.iter().map(|(name, value, _)| (name.clone(), *value)).collect());
    }
    let mine: Vec<u8> = local
        .iter()
        .flat_map(|(_, value, rows)| [*value, *rows as f64])
        .flat_map(f64::to_le_bytes)
        .collect();
    let ranks: Vec<Vec<f64>> = ctx
        .all_gather_bytes(&mine)?
        .iter()
        .map(|bytes| {
            bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8"))).collect()
        })
        .collect();
    anyhow::ensure!(
        ranks.iter().all(|r| r.len() == mine.len() / 8),
        "the ranks evaluated different metrics"
    );
    Ok(local
        .iter()
        .enumerate()
        .map(|(i, (name, _, _))| {
            // After the last `-`: a dataset's name may hold one, LightGBM's metrics none.
            let metric = name.rsplit_once('-').map_or(name.as_str(), |(_, m)| m);
            let value = pooled(metric, ranks.iter().map(|r| (r[2 * i], r[2 * i + 1])));
            (name.clone(), value)
        })
        .collect())
}

/// A metric over several ranks' rows from each rank's (value over its rows, rows): rmse through
/// its square, gamma_deviance (a sum) summed, every other as the row-weighted mean (exact for
/// LightGBM's means).
fn pooled(metric: &str, ranks: impl Iterator<Item = (f64, f64)>) -> f64 {
    let pairs: Vec<(f64, f64)> = ranks.collect();
    if metric == "gamma_deviance" {
        return pairs.iter().map(|(v, _)| v).sum();
    }
    let root = metric == "rmse";
    let rows: f64 = pairs.iter().map(|(_, n)| n).sum();
    let sum: f64 = pairs.iter().map(|(v, n)| n * if root { v * v } else { *v }).sum();
    let mean = sum / rows;
    if root { mean.sqrt() } else { mean }
}

/// Why LightGBM refuses `params`, each at its key (see `probe`), and the metrics a round
/// reports; empty problems when it takes them.
pub fn probe(params: &Params) -> Probed {
    super::probe::probe(&LIBRARY, params)
}

/// What the probe knows of LightGBM.
const LIBRARY: Library = Library {
    open: || crate::lightgbm::aliases().map(|_| ()),
    params: |params| library_params(params, 1, 1),
    unknown: "is not a parameter LightGBM knows (it said \"Unknown parameter\"); see LightGBM's \
              parameter list",
    added: &[THREADS],
    other_names: |key| {
        let main = main_name(key);
        let others = crate::lightgbm::aliases().ok().and_then(|a| a.get(&main)).cloned();
        std::iter::once(main).chain(others.unwrap_or_default()).collect()
    },
    try_params,
};

/// What the library says of `params` on a dataset of four rows of two features (labels 0 and
/// 1 suit classifiers, regressions and counts alike) whose booster boosts a round: the names
/// it does not know, its error, or the metrics it evaluates.
fn try_params(params: &[(String, String)]) -> Tried {
    let _quiet = LOG.quiet();
    let _hidden = crate::native::HiddenStderr::new();
    let _ = unknown_params();
    // Its warnings said whatever verbosity the sweep gives (they name unknown params); a
    // verbosity that is no whole number is left for LightGBM to refuse.
    let quiet = |(k, v): &(String, String)| main_name(k) == "verbosity" && v.parse::<i64>().is_ok();
    let mut params: Vec<(String, String)> = params.iter().filter(|p| !quiet(p)).cloned().collect();
    params.push(("verbosity".into(), "0".into()));
    let text = params_text(&params);
    let rows = [0.0f32, 1.0, 1.0, 0.0, 2.0, 3.0, 3.0, 2.0];
    let labels = [0.0f32, 1.0, 0.0, 1.0];
    let outcome = (|| -> std::result::Result<Vec<String>, Refusal> {
        let dataset = Dataset::dense(&rows, 4, 2, &labels, &text, None).map_err(|e| (None, e))?;
        let mut booster = Booster::new(&dataset, &text).map_err(|e| (None, e))?;
        booster.update().map_err(|e| (None, e))?;
        booster.eval_names().map_err(|e| (None, e))
    })();
    let mut unknown = unknown_params();
    unknown.dedup();
    match outcome {
        Ok(metrics) => Tried { unknown, refused: None, metrics },
        Err(refused) => Tried { unknown, refused: Some(refused), metrics: Vec::new() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_go_class_major() {
        // Two rows of three classes.
        let scores = [0.0, 1.0, 2.0, 10.0, 11.0, 12.0];
        assert_eq!(class_major(&scores, 2), [0.0, 10.0, 1.0, 11.0, 2.0, 12.0]);
    }

    #[test]
    fn ranks_metrics_pool_into_the_metric_over_all_rows() {
        // A log loss (a mean) of 0.2 over 10 rows and 0.5 over 30: 0.425 over the 40.
        assert!(
            (pooled("multi_logloss", [(0.2, 10.0), (0.5, 30.0)].into_iter()) - 0.425).abs() < 1e-12
        );
        // rmse 1 over 1 row and 3 over 1 row: sqrt((1 + 9) / 2).
        assert!((pooled("rmse", [(1.0, 1.0), (3.0, 1.0)].into_iter()) - 5f64.sqrt()).abs() < 1e-12);
        assert_eq!(pooled("gamma_deviance", [(1.5, 4.0), (2.0, 9.0)].into_iter()), 3.5);
    }
}
