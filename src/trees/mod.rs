//! Tree-based trainers (Ray Train's `XGBoostTrainer`; `LightGBMTrainer` next): "pass a dataset
//! and parameters, the training loop is configured automatically". Each is a run of a train
//! function built into rtune (`xgboost::train`) on a worker group whose backend joins the
//! library's own collective (`rtune::worker` backends), so a tree trial is a trial like a
//! Torch one: the same pool, schedulers, checkpoints, rows and views.
//!
//! Params keep the library's own names (`eta`, `max_depth`, `objective`, `eval_metric`, ...),
//! passed to it as they are, with `num_boost_round` (10) rtune's: one row per boosting round,
//! `training_iteration` counting rounds, the library's evaluation of each dataset under Ray's
//! names (`train-mlogloss`, `valid-mlogloss`). Each rank's threads are the CPUs it reserved
//! (`nthread`; a larger one given is lowered to them). A checkpoint holds the model in the
//! library's format (`model.json`) with the fitted preprocessor; a retried or resumed trial goes
//! on boosting from it.
//!
//! Place in the pipeline: beside `model`, on the worker side (`worker`) and the native
//! libraries (`crate::xgboost`); above them only the builtins and the command line.

pub mod xgboost;

use rtune_driver::config::{RunConfig, ScalingConfig};
use rtune_driver::data::{Columns, Dataset, Preprocessor};
use rtune_driver::error::Result;
use rtune_driver::outcome::{Checkpoint, TrainResult};
use rtune_driver::train::{TorchTrainer, TreeBackend};
use rtune_searchers::{Params, Value};
use tch::Kind;

use crate::worker::DatasetShard;

/// The param rtune reads itself: how many boosting rounds a trial runs.
pub const NUM_BOOST_ROUND: &str = "num_boost_round";

/// Rounds when `num_boost_round` is not given (Ray's default).
pub const DEFAULT_ROUNDS: u64 = 10;

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
#[derive(Debug, Clone)]
pub struct XGBoostTrainer {
    trainer: TorchTrainer,
    params: Params,
}

impl XGBoostTrainer {
    /// A run of XGBoost with `params` (the library's names, as `xgboost.train` takes them).
    pub fn new(params: Params) -> Self {
        let trainer = TorchTrainer::new(xgboost::train).backend(TreeBackend::XGBoost);
        XGBoostTrainer { trainer, params }
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
        XGBoostTrainer { trainer: self.trainer.datasets(datasets), ..self }
    }

    /// The label column (required) and the features (every other column by default).
    pub fn columns(self, columns: Columns) -> Self {
        XGBoostTrainer { trainer: self.trainer.columns(columns), ..self }
    }

    /// A preprocessor fitted on `train` (trees need none for numbers; encoders for strings).
    pub fn preprocessor(self, preprocessor: impl Into<Preprocessor>) -> Self {
        XGBoostTrainer { trainer: self.trainer.preprocessor(preprocessor), ..self }
    }

    /// How many ranks train the one model, each on its shard, with how many CPUs each.
    pub fn scaling(self, scaling: ScalingConfig) -> Self {
        XGBoostTrainer { trainer: self.trainer.scaling(scaling), ..self }
    }

    pub fn run_config(self, run: RunConfig) -> Self {
        XGBoostTrainer { trainer: self.trainer.run_config(run), ..self }
    }

    /// Goes on boosting from `checkpoint`'s model.
    pub fn resume_from_checkpoint(self, checkpoint: Checkpoint) -> Self {
        XGBoostTrainer { trainer: self.trainer.resume_from_checkpoint(checkpoint), ..self }
    }

    /// Runs the training to its end (see `TorchTrainer::fit`). The library missing, or of
    /// another version, is an error before anything starts.
    pub fn fit(self) -> Result<TrainResult> {
        xgboost::check_library()?;
        TorchTrainer::from(self).fit()
    }
}

impl From<XGBoostTrainer> for TorchTrainer {
    fn from(trainer: XGBoostTrainer) -> TorchTrainer {
        trainer.trainer.train_loop_config(trainer.params)
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

/// The rounds a trial runs, from its params; the error says what `num_boost_round` is.
pub(crate) fn rounds(params: &Params) -> anyhow::Result<u64> {
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
}

impl Dense {
    pub(crate) fn of(shard: &DatasetShard, name: &str) -> anyhow::Result<Dense> {
        let features = shard.features().to_device(tch::Device::Cpu).contiguous();
        let size = features.size();
        let rows = size[0] as usize;
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
        })
    }
}
