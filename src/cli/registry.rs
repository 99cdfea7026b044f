//! The train functions a CLI binary offers by name (`[trainable] builtin = "NAME"` in a sweep
//! file): the registry a user's own binary adds its functions to
//! (`rtune::cli::main(Registry::builtin().with(..))`). The builtin ones themselves, the demo's
//! `digits-mlp` and the scheduler-exercising `synthetic-curve`, are `crate::builtins`.

use rtune_searchers::Params;
use tch::nn;

use crate::builtins::{digits_data, digits_model, train_digits_mlp, train_synthetic_curve};
use crate::data::DIGIT_FEATURES;
use crate::train::TorchTrainer;
use crate::worker::TrainFn;

/// A train function the CLI can run by name (`[trainable] builtin = "NAME"`).
#[derive(Debug, Clone)]
pub struct Trainable {
    pub name: String,
    /// One line for `--help` and error messages.
    pub about: String,
    pub train: TrainFn,
    /// Its `train_loop_config` before the param space is merged in (the param space wins).
    pub defaults: Params,
    /// How to rebuild its model from a trial's params, for `rtune export`'s TorchScript.
    pub model: Option<Model>,
    /// Gives its trainer the datasets (and preprocessor) it trains on.
    pub data: Option<AddData>,
}

/// Adds datasets, columns and a preprocessor to a trainer (`TorchTrainer::datasets`..).
pub type AddData = fn(TorchTrainer) -> crate::error::Result<TorchTrainer>;

/// A trainable's model, rebuilt from a trial's params, for `rtune export`'s TorchScript.
pub use crate::train::Model;

/// The train functions a CLI binary offers.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    entries: Vec<Trainable>,
}

impl Registry {
    /// No train functions.
    pub fn empty() -> Self {
        Registry::default()
    }

    /// `digits-mlp` and `synthetic-curve` (see the module docs).
    pub fn builtin() -> Self {
        Registry::empty()
            .with(
                "digits-mlp",
                "data-parallel MLP on the shipped 8x8 digits (lr, hidden, batch_size, epochs)",
                train_digits_mlp,
                Params::new()
                    .with("lr", 1e-3)
                    .with("hidden", 256)
                    .with("batch_size", 32)
                    .with("epochs", 20),
            )
            .with(
                "synthetic-curve",
                "learning-curve simulator for schedulers (rate, plateau, noise, iterations)",
                train_synthetic_curve,
                Params::new()
                    .with("rate", 0.3)
                    .with("plateau", 1.0)
                    .with("noise", 0.02)
                    .with("iterations", 20)
                    .with("seed", 0)
                    .with("sleep_s", 0.0)
                    .with("fail_at", 0),
            )
            .model("digits-mlp", digits_model, vec![DIGIT_FEATURES as i64])
            .data("digits-mlp", digits_data)
    }

    /// Adds (or replaces) a train function under `name`.
    pub fn with(
        mut self,
        name: impl Into<String>,
        about: impl Into<String>,
        train: TrainFn,
        defaults: Params,
    ) -> Self {
        let name = name.into();
        self.entries.retain(|t| t.name != name);
        self.entries.push(Trainable {
            name,
            about: about.into(),
            train,
            defaults,
            model: None,
            data: None,
        });
        self
    }

    /// Tells the CLI which datasets `name` trains on (`add` gives them to its trainer).
    pub fn data(mut self, name: &str, add: AddData) -> Self {
        if let Some(t) = self.entries.iter_mut().find(|t| t.name == name) {
            t.data = Some(add);
        }
        self
    }

    /// Tells `rtune export` how to rebuild `name`'s model (for TorchScript in the export).
    pub fn model(
        mut self,
        name: &str,
        build: fn(&nn::Path, &Params) -> crate::error::Result<Box<dyn nn::ModuleT>>,
        input_shape: Vec<i64>,
    ) -> Self {
        if let Some(t) = self.entries.iter_mut().find(|t| t.name == name) {
            t.model = Some(Model { build, input_shape });
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<&Trainable> {
        self.entries.iter().find(|t| t.name == name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|t| t.name.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registering_replaces_by_name() {
        let r =
            Registry::builtin().with("synthetic-curve", "mine", train_digits_mlp, Params::new());
        assert_eq!(r.names(), ["digits-mlp", "synthetic-curve"]);
        assert_eq!(r.get("synthetic-curve").unwrap().about, "mine");
    }
}
