//! The train functions a CLI binary offers by name (`[trainable] builtin = "NAME"` in a sweep
//! file): the registry a user's own binary adds its functions to
//! (`rtune::cli::main(Registry::builtin().with(..))`). The builtin ones themselves, the demo's
//! `digits-mlp` and the scheduler-exercising `synthetic-curve`, are `crate::builtins`.
//!
//! A trainable declares the params it reads by its defaults (each default's type is the
//! param's) and, for numbers, the range it accepts (`Registry::range`): a sweep file naming
//! another param, a value of another type, or a value or domain bound outside a range is
//! refused before anything runs. One registered without defaults declares nothing; its params
//! are checked as it runs (a param it never reads is a warning).

use std::ops::RangeInclusive;

use rtune_searchers::{Param, Params, Value};
use tch::nn;

use crate::builtins::{digits_data, digits_model, train_digits_mlp, train_synthetic_curve};
use crate::digits::DIGIT_FEATURES;
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
    /// The ranges its numeric params must lie in (checked before a sweep runs).
    pub ranges: Vec<(String, RangeInclusive<f64>)>,
    /// The metrics it reports (rtune's automatic ones aside); empty: not declared. A sweep
    /// file's metric names (tune.metric, a scheduler's time_attr, run.stop, a checkpoint's
    /// score) are checked against them before anything runs.
    pub metrics: Vec<String>,
}

impl Trainable {
    /// Whether its defaults declare every param it reads (it has some).
    pub fn declares_params(&self) -> bool {
        !self.defaults.is_empty()
    }

    /// Why a sweep cannot rank, schedule or stop by `metric`, or None: it is neither one this
    /// train function declares it reports nor one of rtune's automatic ones.
    pub fn check_metric(&self, metric: &str) -> Option<String> {
        let auto = crate::metrics::AUTO_METRICS;
        if self.metrics.is_empty()
            || self.metrics.iter().any(|m| m == metric)
            || auto.contains(&metric)
        {
            return None;
        }
        let numeric = auto.into_iter().filter(|m| *m != "checkpoint_dir_name");
        let names: Vec<&str> = self.metrics.iter().map(String::as_str).chain(numeric).collect();
        Some(format!(
            "names `{metric}`, which `{}` does not report; it reports {}{}",
            self.name,
            super::doc::list(&names),
            super::doc::did_you_mean(metric, &names)
        ))
    }

    /// Why `param` cannot be given as `key` to this train function, or None: a param it does
    /// not read (naming the nearest it does), a value of another type than its default's, or a
    /// value (or domain bound) outside its range.
    pub fn check_param(&self, key: &str, param: &Param) -> Option<String> {
        if !self.declares_params() {
            return None;
        }
        let Some(default) = self.defaults.value(key) else {
            let names: Vec<&str> = self.defaults.keys().collect();
            return Some(format!(
                "is not a param of `{}`, which reads {}{}",
                self.name,
                super::doc::list(&names),
                super::doc::did_you_mean(key, &names)
            ));
        };
        let values = match param {
            Param::Const(v) => vec![v.clone()],
            Param::Grid(values) => values.clone(),
            Param::Sample(domain) => domain.extremes(),
            // As written (its constants, and its domains as the file writes them).
            Param::Nested(space) => {
                vec![space.to_value().unwrap_or(Value::Map(Default::default()))]
            }
            Param::Dependent(_) => Vec::new(),
        };
        let range = self.ranges.iter().find(|(k, _)| k == key).map(|(_, r)| r);
        values.iter().find_map(|v| self.check_value(key, default, range, v))
    }

    fn check_value(
        &self,
        key: &str,
        default: &Value,
        range: Option<&RangeInclusive<f64>>,
        v: &Value,
    ) -> Option<String> {
        let same_type = match (default, v) {
            (Value::Float(_), Value::Int(_) | Value::Float(_)) => true,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        };
        if !same_type {
            let wanted = match default {
                Value::Int(_) => {
                    "an integer (a constant, randint, qrandint, lograndint, or a choice of \
                     integers)"
                }
                Value::Float(_) => "a number",
                Value::Bool(_) => "true or false",
                Value::Str(_) => "a string",
                _ => "a value like its default",
            };
            return Some(format!(
                "gives {} ({}); `{key}` of `{}` is {wanted}",
                short(v),
                v.type_name(),
                self.name
            ));
        }
        let (Some(range), Some(x)) = (range, v.as_f64()) else { return None };
        (!range.contains(&x)).then(|| {
            format!(
                "gives {}; `{key}` of `{}` must lie in [{}, {}]",
                short(v),
                self.name,
                bound(*range.start()),
                bound(*range.end())
            )
        })
    }
}

/// A range's end as a message shows it: `1`, `0.5`, `1e-12`.
fn bound(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 { format!("{x:.0}") } else { short(&Value::Float(x)) }
}

/// A value as a message shows it: a number of many digits in exponent form (`1e308`).
fn short(v: &Value) -> String {
    match v {
        Value::Float(x) if x.abs() >= 1e15 || (*x != 0.0 && x.abs() < 1e-4) => format!("{x:e}"),
        // As a sweep file writes them.
        Value::Map(_) | Value::List(_) => super::doc::value_text(v),
        other => other.to_string(),
    }
}

/// Adds datasets, columns and a preprocessor to a trainer (`TorchTrainer::datasets`..).
pub type AddData = fn(TorchTrainer) -> crate::error::Result<TorchTrainer>;

/// A trainable's model, rebuilt from a trial's params, for `rtune export`'s TorchScript.
pub use crate::model::Model;

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
            .metrics("digits-mlp", &["loss", "val_loss", "val_acc", "params"])
            .metrics("synthetic-curve", &["score", "loss"])
            .range("digits-mlp", "lr", 1e-12..=10.0)
            .range("digits-mlp", "hidden", 1.0..=65_536.0)
            .range("digits-mlp", "batch_size", 1.0..=1_048_576.0)
            .range("digits-mlp", "epochs", 1.0..=1_000_000.0)
            .range("synthetic-curve", "rate", 0.0..=1_000.0)
            .range("synthetic-curve", "plateau", -1e9..=1e9)
            .range("synthetic-curve", "noise", 0.0..=1e9)
            .range("synthetic-curve", "iterations", 1.0..=1e9)
            .range("synthetic-curve", "seed", 0.0..=i64::MAX as f64)
            .range("synthetic-curve", "sleep_s", 0.0..=86_400.0)
            .range("synthetic-curve", "fail_at", 0.0..=1e9)
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
        self.entries.retain(|t| t.name != name);
        self.entries.push(Trainable {
            name,
            about: about.into(),
            train,
            defaults,
            model: None,
            data: None,
            ranges: Vec::new(),
            metrics: Vec::new(),
        });
        self
    }

    /// Declares the metrics `name` reports (see `Trainable::metrics`).
    pub fn metrics(mut self, name: &str, metrics: &[&str]) -> Self {
        if let Some(t) = self.entries.iter_mut().find(|t| t.name == name) {
            t.metrics = metrics.iter().map(|m| m.to_string()).collect();
        }
        self
    }

    /// Declares the values `name`'s numeric `param` accepts: a sweep file giving one outside
    /// (a constant or a domain's bound) is refused before anything runs.
    pub fn range(mut self, name: &str, param: &str, range: RangeInclusive<f64>) -> Self {
        if let Some(t) = self.entries.iter_mut().find(|t| t.name == name) {
            t.ranges.retain(|(k, _)| k != param);
            t.ranges.push((param.to_owned(), range));
        }
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
