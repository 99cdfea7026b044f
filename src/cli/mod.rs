//! The `rtune` command line with this binary's train functions: [`main`] runs every command
//! (`rtune_cli::program`), with the train functions and models of a [`Registry`], and writes
//! what needs tensors for it (an export's TorchScript, batch prediction). A user's own binary
//! gets all of it, with its own train functions, from one call (a trainable registered with
//! defaults declares its params: see `rtune_cli::program::registry`):
//!
//! ```no_run
//! fn my_train(ctx: &mut rtune::TrainContext) -> anyhow::Result<()> {
//!     ctx.report([("score", 1.0)])?;
//!     Ok(())
//! }
//!
//! fn main() {
//!     let registry = rtune::cli::Registry::builtin().with(
//!         "my-model",
//!         "what it trains",
//!         my_train,
//!         rtune::Params::new().with("lr", 0.01),
//!     );
//!     rtune::cli::main(registry) // first line of main: it also runs the worker processes
//! }
//! ```
//!

mod predict;
mod serve;

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::Path;

use rtune_cli::program::{AddData, Builtins, Torch, Trainables};
pub use rtune_cli::{EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_TRIALS_FAILED};
use rtune_cli::{PredictArgs, ServeArgs};
use rtune_driver::config::ScalingConfig;
use rtune_driver::outcome::Checkpoint;
use rtune_driver::storage::checkpoint::ExportCard;
use rtune_driver::train::TrainFnId;
use rtune_searchers::Params;
use tch::nn;

use crate::builtins::{digits_data, digits_model, train_digits_mlp, train_synthetic_curve};
use crate::digits::DIGIT_FEATURES;
use crate::model::Model;
use crate::worker::TrainFn;
use rtune_driver::error::Result;

/// Runs the `rtune` command line with `registry`'s train functions and exits. Call it first
/// in `main`: it also makes the binary's worker processes work (`rtune::init`).
pub fn main(registry: Registry) -> ! {
    crate::worker::init();
    rtune_cli::program::main(&registry.trainables, &registry, env!("RTUNE_SOURCES"))
}

/// The train functions a CLI binary offers by name (`[trainable] builtin = "NAME"`), and the
/// models `rtune export` rebuilds for TorchScript.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    trainables: Trainables,
    models: BTreeMap<String, Model>,
}

impl Registry {
    /// No train functions.
    pub fn empty() -> Self {
        Registry::default()
    }

    /// `digits-mlp` and `synthetic-curve` (`rtune::builtins`), with digits-mlp's model.
    pub fn builtin() -> Self {
        let builtins = Builtins {
            digits_mlp: TrainFnId::of(train_digits_mlp),
            digits_data,
            synthetic_curve: TrainFnId::of(train_synthetic_curve),
            xgboost: TrainFnId::of(crate::trees::xgboost::train),
            xgboost_probe: crate::trees::xgboost::probe,
            lightgbm: TrainFnId::of(crate::trees::lightgbm::train),
            lightgbm_probe: crate::trees::lightgbm::probe,
        };
        Registry { trainables: Trainables::builtin(builtins), models: BTreeMap::new() }.model(
            "digits-mlp",
            digits_model,
            vec![DIGIT_FEATURES as i64],
        )
    }

    /// Adds (or replaces) a train function under `name`. Its `defaults` declare the params it
    /// reads: a sweep file may give those (of the same types) and no others. With no defaults
    /// it declares nothing, and a param it never reads is said as the sweep runs.
    pub fn with(
        mut self,
        name: impl Into<String>,
        about: impl Into<String>,
        train: TrainFn,
        defaults: Params,
    ) -> Self {
        let name = name.into();
        self.models.remove(&name);
        self.trainables = self.trainables.with(name, about, TrainFnId::of(train), defaults);
        self
    }

    /// Declares the metrics `name` reports: a sweep file's metric names are checked against
    /// them before anything runs.
    pub fn metrics(mut self, name: &str, metrics: &[&str]) -> Self {
        self.trainables = self.trainables.metrics(name, metrics);
        self
    }

    /// Declares the values `name`'s numeric `param` accepts: a sweep file giving one outside
    /// (a constant or a domain's bound) is refused before anything runs.
    pub fn range(mut self, name: &str, param: &str, range: RangeInclusive<f64>) -> Self {
        self.trainables = self.trainables.range(name, param, range);
        self
    }

    /// Tells the CLI which datasets `name` trains on (`add` gives them to its trainer).
    pub fn data(mut self, name: &str, add: AddData) -> Self {
        self.trainables = self.trainables.data(name, add);
        self
    }

    /// Tells `rtune export` how to rebuild `name`'s model (for TorchScript in the export).
    pub fn model(
        mut self,
        name: &str,
        build: fn(&nn::Path, &Params) -> Result<Box<dyn nn::ModuleT>>,
        input_shape: Vec<i64>,
    ) -> Self {
        if self.trainables.get(name).is_some() {
            self.models.insert(name.to_owned(), Model { build, input_shape });
        }
        self
    }

    /// The train functions, as the command line reads sweep files against them.
    pub fn trainables(&self) -> &Trainables {
        &self.trainables
    }
}

impl Torch for Registry {
    fn export(
        &self,
        checkpoint: &Checkpoint,
        to: &Path,
        card: ExportCard,
        trainable: Option<&str>,
    ) -> Result<bool> {
        let model = trainable.and_then(|name| self.models.get(name));
        let mut writer = crate::model::Export::from(card);
        if let Some(model) = model {
            writer = writer.model(model.clone());
        }
        writer.write(checkpoint, to)?;
        Ok(model.is_some())
    }

    fn predict(
        &self,
        args: &PredictArgs,
        cluster: Option<(String, String)>,
    ) -> anyhow::Result<String> {
        predict::predict(args, cluster)
    }

    fn serve(&self, args: &ServeArgs) -> anyhow::Result<()> {
        serve::serve(args)
    }
}

/// `workers` workers of the pool, each holding `cpus` CPUs and, given, `gpus` GPUs (a
/// fraction shares one); on GPUs when `use_gpu` or when it holds some.
fn workers(workers: usize, cpus: f64, gpus: Option<f64>, use_gpu: bool) -> ScalingConfig {
    let mut resources = BTreeMap::from([("CPU".to_owned(), cpus)]);
    if let Some(gpus) = gpus {
        resources.insert("GPU".to_owned(), gpus);
    }
    let use_gpu = use_gpu || gpus.is_some_and(|g| g > 0.0);
    ScalingConfig::workers(workers).use_gpu(use_gpu).resources_per_worker(resources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registering_replaces_by_name_and_forgets_the_old_model() {
        let r =
            Registry::builtin().with("digits-mlp", "mine", train_synthetic_curve, Params::new());
        assert_eq!(
            r.trainables().names(),
            ["synthetic-curve", "xgboost", "lightgbm", "digits-mlp"]
        );
        assert_eq!(r.trainables().get("digits-mlp").unwrap().about, "mine");
        assert!(r.models.is_empty());
    }
}
