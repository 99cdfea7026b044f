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

use super::{Dense, NUM_BOOST_ROUND, param_text, rounds};
use crate::worker::TrainContext;
use crate::xgboost::{Booster, DMatrix};

pub use crate::xgboost::MODEL_FILE;

/// Params rtune decides for every rank: the threads are the CPUs it reserved.
const THREADS: &str = "nthread";

/// Opens the library (once), or says why it cannot be (not installed, another version).
pub fn check_library() -> Result<()> {
    crate::xgboost::api().map(|_| ()).map_err(|e| Error::config(Setting::Builtin, e))
}

/// The library's params of a trial: every param but rtune's own, as text.
fn library_params(params: &Params, threads: usize) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut nthread = threads;
    for (key, value) in params.iter() {
        match key {
            NUM_BOOST_ROUND => {}
            THREADS => {
                let given = params.get::<i64>(THREADS)?;
                if given >= 1 {
                    nthread = nthread.min(given as usize);
                }
            }
            _ => out.extend(param_text(value).into_iter().map(|v| (key.to_owned(), v))),
        }
    }
    out.push((THREADS.into(), nthread.to_string()));
    // So the library says which names it does not know (see `Booster::unused_params`).
    out.push(("validate_parameters".into(), "1".into()));
    Ok(out)
}

/// `xgboost`: boosts `num_boost_round` rounds on dataset `train` (this rank's shard), one
/// report per round with every dataset's evaluation, and a checkpoint of the model; a resumed
/// run loads the checkpoint's model and goes on from its round.
pub fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
    if ctx.world_size() > 1 && ctx.backend_name() != rtune_driver::train::TreeBackend::XGBOOST {
        anyhow::bail!(
            "XGBoost's train function runs on {} ranks without XGBoost's collective: use \
             XGBoostTrainer (or `builtin = \"xgboost\"`), whose backend joins it",
            ctx.world_size()
        );
    }
    let total =
        rounds(ctx.params()).map_err(|e| anyhow::anyhow!("param `{NUM_BOOST_ROUND}` {e}"))?;
    let params = library_params(ctx.params(), ctx.num_cpus())?;
    let names = ctx.dataset_names();
    anyhow::ensure!(
        names.iter().any(|n| n == "train"),
        "XGBoost needs a dataset named `train` (this run has {})",
        if names.is_empty() { "none".to_owned() } else { names.join(", ") }
    );
    let mut matrices = Vec::new();
    for name in &names {
        let dense = Dense::of(&ctx.dataset_shard(name)?, name)?;
        let matrix = DMatrix::dense(&dense.features, dense.rows, Some(&dense.labels))
            .map_err(|e| anyhow::anyhow!("XGBoost refused dataset `{name}`: {e}"))?;
        if name == "train" {
            check_classes(ctx, &params, &dense.labels)?;
        }
        matrices.push((name.as_str(), matrix));
    }
    let all: Vec<&DMatrix> = matrices.iter().map(|(_, m)| m).collect();
    let mut booster = Booster::new(&all).map_err(library_error)?;
    if let Some(checkpoint) = ctx.checkpoint() {
        let path = checkpoint.path().join(MODEL_FILE);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
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
    let train = &matrices.iter().find(|(n, _)| *n == "train").expect("checked above").1;
    for round in done..total {
        booster.update(round as u32, train).map_err(library_error)?;
        let metrics =
            booster.eval(round as u32, &matrices_ref(&matrices)).map_err(library_error)?;
        let mut checkpoint = ctx.new_checkpoint()?;
        if checkpoint.is_kept() {
            let model = booster.save_json().map_err(library_error)?;
            std::fs::write(checkpoint.path().join(MODEL_FILE), model)?;
            checkpoint = checkpoint.metadata(serde_json::json!({
                "framework": "xgboost",
                "rounds": round + 1,
            }));
        }
        ctx.report_with_checkpoint(metrics, checkpoint)?;
    }
    Ok(())
}

fn matrices_ref<'a>(matrices: &'a [(&'a str, DMatrix)]) -> Vec<(&'a str, &'a DMatrix)> {
    matrices.iter().map(|(n, m)| (*n, m)).collect()
}

/// The library's words, said as what they are.
fn library_error(message: String) -> anyhow::Error {
    anyhow::anyhow!("XGBoost: {message}")
}

/// A multiclass objective needs `num_class`, at least the labels' classes (the largest label
/// + 1 across every rank's shard).
fn check_classes(
    ctx: &mut TrainContext,
    params: &[(String, String)],
    labels: &[f32],
) -> anyhow::Result<()> {
    let given = |key: &str| params.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    // The same params on every rank: all of them return here, or all meet below.
    if !given("objective").is_some_and(|o| o.starts_with("multi:")) {
        return Ok(());
    }
    // Each rank's largest label in its own slot, summed: every rank's, on every rank.
    let mut tops = vec![0f32; ctx.world_size()];
    tops[ctx.world_rank()] = labels.iter().copied().fold(0f32, f32::max);
    ctx.all_reduce(&mut tops, rtune_collective::ReduceOp::Sum)?;
    let classes = tops.iter().copied().fold(0f32, f32::max) as i64 + 1;
    match given("num_class").map(str::parse::<i64>) {
        None => anyhow::bail!(
            "param `num_class` is missing: objective {:?} needs it; the labels of `train` have \
             {classes} classes (set num_class = {classes})",
            given("objective").unwrap_or_default()
        ),
        Some(Ok(n)) if n < classes => anyhow::bail!(
            "param `num_class` = {n}, but the labels of `train` go up to {} ({classes} classes): \
             set num_class = {classes}",
            classes - 1
        ),
        _ => Ok(()),
    }
}

/// Why XGBoost refuses `params`, each at its key: a name it does not use, a value it cannot
/// take (the library's message), found by setting them on a booster over a few rows and
/// boosting one round. Empty when it takes them. A message that names no param is blamed on
/// the one whose absence makes it go away.
pub fn probe(params: &Params) -> Probed {
    let refused =
        |message: String| Probed { problems: vec![(String::new(), message)], metrics: Vec::new() };
    if let Err(e) = crate::xgboost::api() {
        return refused(e);
    }
    if let Err(e) = rounds(params) {
        let message = e.to_string();
        return Probed { problems: vec![(NUM_BOOST_ROUND.into(), message)], metrics: Vec::new() };
    }
    let params = match library_params(params, 1) {
        Ok(params) => params,
        Err(e) => return refused(e.to_string()),
    };
    // Each refusal's param is left out and the rest tried again, so that every mistake is
    // found, not only the first the library stops at.
    let mut params = params;
    let mut problems: Vec<(String, String)> = Vec::new();
    let metrics = loop {
        let Tried { unused, refused, metrics } = try_params(&params);
        for name in unused {
            let message = "is not a parameter XGBoost uses (it said \"Parameters: { .. } are \
                           not used\"); see XGBoost's parameter list";
            if !problems.iter().any(|(k, _)| *k == name) {
                problems.push((name, message.to_owned()));
            }
        }
        let (key, message) = match refused {
            None => break metrics,
            Some((Some(key), message)) => (Some(key), message),
            Some((None, message)) => (blame(&params, &message), message),
        };
        let Some(key) = key else {
            problems.push((String::new(), message));
            break Vec::new();
        };
        params.retain(|(k, _)| *k != key);
        problems.push((key, message));
    };
    Probed { problems, metrics }
}

/// What the library says of `params` set on a booster over four rows of two features (labels
/// 0 and 1 suit classifiers, regressions and counts alike) that boosts a round: the names it
/// did not use, its error with the param it was setting (None: while boosting), or the metrics
/// it evaluates.
type Refusal = (Option<String>, String);
fn try_params(params: &[(String, String)]) -> Tried {
    let _quiet = crate::xgboost::Quiet::new();
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
    let unused = Booster::unused_params();
    match outcome {
        Ok(metrics) => Tried { unused, refused: None, metrics },
        Err(refused) => Tried { unused, refused: Some(refused), metrics: Vec::new() },
    }
}

/// What one try of params gave.
struct Tried {
    unused: Vec<String>,
    refused: Option<Refusal>,
    /// The evaluation metrics a round reports, by the library's names (`mlogloss`).
    metrics: Vec<String>,
}

/// The params a user gave (not the ones rtune adds).
fn user_keys(params: &[(String, String)]) -> impl Iterator<Item = &String> {
    params.iter().map(|(k, _)| k).filter(|k| k.as_str() != "validate_parameters")
}

/// XGBoost's other names for params, as its messages use them.
const ALIASES: [(&str, &str); 4] = [
    ("eta", "learning_rate"),
    ("gamma", "min_split_loss"),
    ("lambda", "reg_lambda"),
    ("alpha", "reg_alpha"),
];

/// The param a library message is about: the one it names, else the one whose absence makes
/// it go away.
fn blame(params: &[(String, String)], message: &str) -> Option<String> {
    blame_by_name(params, message).or_else(|| {
        user_keys(params)
            .find(|&key| {
                let without: Vec<_> = params.iter().filter(|(k, _)| k != key).cloned().collect();
                !matches!(try_params(&without).refused, Some((_, m)) if m == message)
            })
            .cloned()
    })
}

/// The param a library message names (by its name or the library's alias for it), as a word.
fn blame_by_name(params: &[(String, String)], message: &str) -> Option<String> {
    let mentions = |word: &str| {
        let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        message.match_indices(word).any(|(at, _)| {
            !is_word(message[..at].chars().next_back())
                && !is_word(message[at + word.len()..].chars().next())
        })
    };
    user_keys(params)
        .find(|key| {
            let alias = ALIASES.iter().find(|(k, _)| k == key).map(|(_, a)| *a);
            mentions(key) || alias.is_some_and(mentions)
        })
        .cloned()
}
