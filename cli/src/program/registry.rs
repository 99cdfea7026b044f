//! The train functions a CLI binary offers by name (`[trainable] builtin = "NAME"` in a sweep
//! file), as the command line knows them: their places in the binary (`TrainFnId`) and what
//! they declare. A user's own binary adds its functions through `rtune::cli::Registry`
//! (`rtune::cli::main(Registry::builtin().with(..))`), which fills this in. The builtin ones,
//! the demo's `digits-mlp` and the scheduler-exercising `synthetic-curve`, are declared here
//! ([`Trainables::builtin`]) and written in `rtune::builtins`.
//!
//! A trainable declares the params it reads by its defaults (each default's type is the
//! param's) and, for numbers, the range it accepts (`Trainables::range`): a sweep file naming
//! another param, a value of another type, or a value or domain bound outside a range is
//! refused before anything runs. One registered without defaults declares nothing; its params
//! are checked as it runs (a param it never reads is a warning).

use std::ops::RangeInclusive;

use rtune_driver::train::{TorchTrainer, TrainFnId, TreeBackend};
use rtune_searchers::{Param, Params, Value};

/// A train function the CLI can run by name (`[trainable] builtin = "NAME"`).
#[derive(Debug, Clone)]
pub struct Trainable {
    pub name: String,
    /// One line for `--help` and error messages.
    pub about: String,
    pub train: TrainFnId,
    /// Its `train_loop_config` before the param space is merged in (the param space wins).
    pub defaults: Params,
    /// Gives its trainer the datasets (and preprocessor) it trains on.
    pub data: Option<AddData>,
    /// The ranges its numeric params must lie in (checked before a sweep runs).
    pub ranges: Vec<(String, RangeInclusive<f64>)>,
    /// The metrics it reports (rtune's automatic ones aside); empty: not declared. A sweep
    /// file's metric names (tune.metric, a scheduler's time_attr, run.stop, a checkpoint's
    /// score) are checked against them before anything runs.
    pub metrics: Vec<String>,
    /// The tree library whose collective its group joins (None: Torch's backend).
    pub backend: Option<TreeBackend>,
    /// Asks the library whether it takes a trial's params (a tree builtin's probe).
    pub probe: Option<Probe>,
}

/// What a library says of a trial's params (`Probed`).
pub type Probe = fn(&Params) -> Probed;

/// A library's answer to params: why it refuses them, (param, the library's message) each,
/// the param empty for a problem of the library itself (not installed), none when it takes
/// them; and then the evaluation metrics a round reports of each dataset (`mlogloss`: a
/// dataset `valid` reports `valid-mlogloss`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Probed {
    pub problems: Vec<(String, String)>,
    pub metrics: Vec<String>,
}

impl Trainable {
    /// Its trainer: the function, its defaults as `train_loop_config`, its backend.
    pub(crate) fn trainer(&self) -> TorchTrainer {
        let trainer = TorchTrainer::of(self.train).train_loop_config(self.defaults.clone());
        match self.backend {
            Some(backend) => trainer.backend(backend),
            None => trainer,
        }
    }

    /// Whether its defaults declare every param it reads (it has some).
    pub(crate) fn declares_params(&self) -> bool {
        !self.defaults.is_empty()
    }

    /// Why a sweep cannot rank, schedule or stop by `metric`, or None: it is neither one this
    /// train function declares it reports nor one of rtune's automatic ones.
    pub(crate) fn check_metric(&self, metric: &str) -> Option<String> {
        let auto = rtune_driver::metrics::AUTO_METRICS;
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
            crate::doc::list(&names),
            crate::doc::did_you_mean(metric, &names)
        ))
    }

    /// What its library's probe says of `space`: each param tried at each of its values (a
    /// domain at its extremes), one at a time over the others' first; the metrics are the
    /// first values'.
    pub(crate) fn probe_space(&self, space: &rtune_searchers::SearchSpace) -> Option<Probed> {
        let probe = self.probe?;
        let candidates: Vec<(&str, Vec<Value>)> =
            space.iter().map(|(key, param)| (key, candidate_values(param))).collect();
        let mut base = self.defaults.clone();
        for (key, values) in &candidates {
            if let Some(first) = values.first() {
                base = base.with(*key, first.clone());
            }
        }
        let mut found = probe(&base);
        for (key, values) in &candidates {
            for value in values.iter().skip(1) {
                let tried = base.clone().with(*key, value.clone());
                for problem in probe(&tried).problems.into_iter().filter(|(k, _)| k == key) {
                    if !found.problems.contains(&problem) {
                        found.problems.push(problem);
                    }
                }
            }
        }
        Some(found)
    }

    /// This trainable as reporting `metrics` (what a probe found it reports).
    pub(crate) fn reporting(&self, metrics: Vec<String>) -> Trainable {
        Trainable { metrics, ..self.clone() }
    }

    /// Why `param` cannot be given as `key` to this train function, or None: a param it does
    /// not read (naming the nearest it does), a value of another type than its default's, or a
    /// value (or domain bound) outside its range.
    pub(crate) fn check_param(&self, key: &str, param: &Param) -> Option<String> {
        if !self.declares_params() {
            return None;
        }
        let Some(default) = self.defaults.value(key) else {
            let names: Vec<&str> = self.defaults.keys().collect();
            return Some(format!(
                "is not a param of `{}`, which reads {}{}",
                self.name,
                crate::doc::list(&names),
                crate::doc::did_you_mean(key, &names)
            ));
        };
        let values = match param {
            // As written (its constants, and its domains as the file writes them).
            Param::Nested(space) => {
                vec![space.to_value().unwrap_or(Value::Map(Default::default()))]
            }
            other => candidate_values(other),
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

/// The values a param takes that a check tries: a constant, a grid's values, a domain's
/// extremes; none for a nested space or a value computed from others.
fn candidate_values(param: &Param) -> Vec<Value> {
    match param {
        Param::Const(v) => vec![v.clone()],
        Param::Grid(values) => values.clone(),
        Param::Sample(domain) => domain.extremes(),
        Param::Nested(_) | Param::Dependent(_) => Vec::new(),
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
        Value::Map(_) | Value::List(_) => crate::doc::value_text(v),
        other => other.to_string(),
    }
}

/// Adds datasets, columns and a preprocessor to a trainer (`TorchTrainer::datasets`..).
pub type AddData = fn(TorchTrainer) -> rtune_driver::error::Result<TorchTrainer>;

/// The train functions a CLI binary offers, by name.
#[derive(Debug, Clone, Default)]
pub struct Trainables {
    entries: Vec<Trainable>,
}

/// The builtin train functions, as `rtune::builtins` writes them.
#[derive(Debug, Clone, Copy)]
pub struct Builtins {
    pub digits_mlp: TrainFnId,
    /// The digits' datasets, for `digits-mlp`'s trainer.
    pub digits_data: AddData,
    pub synthetic_curve: TrainFnId,
    /// XGBoost's train function and its probe.
    pub xgboost: TrainFnId,
    pub xgboost_probe: Probe,
    /// LightGBM's train function and its probe.
    pub lightgbm: TrainFnId,
    pub lightgbm_probe: Probe,
}

impl Trainables {
    /// No train functions.
    pub fn empty() -> Self {
        Trainables::default()
    }

    /// `digits-mlp` and `synthetic-curve` (see the module docs), run by `builtins`.
    pub fn builtin(builtins: Builtins) -> Self {
        Trainables::empty()
            .with(
                "digits-mlp",
                "data-parallel MLP on the shipped 8x8 digits (lr, hidden, batch_size, epochs)",
                builtins.digits_mlp,
                Params::new()
                    .with("lr", 1e-3)
                    .with("hidden", 256)
                    .with("batch_size", 32)
                    .with("epochs", 20),
            )
            .with(
                "synthetic-curve",
                "learning-curve simulator for schedulers (rate, plateau, noise, iterations)",
                builtins.synthetic_curve,
                Params::new()
                    .with("rate", 0.3)
                    .with("plateau", 1.0)
                    .with("noise", 0.02)
                    .with("iterations", 20)
                    .with("seed", 0)
                    .with("sleep_s", 0.0)
                    .with("fail_at", 0)
                    .with("panic_at", 0)
                    .with("slow_rank", -1)
                    .with("work_s", 0.0)
                    .with("work_serial", 0.0)
                    .with("checkpoint_kb", 0.0)
                    .with("checkpoint_every", 1),
            )
            .with(
                "xgboost",
                "XGBoost on the [datasets] (its own params: eta, max_depth, objective, \
                 num_class..., and num_boost_round)",
                builtins.xgboost,
                Params::new(),
            )
            .with(
                "lightgbm",
                "LightGBM on the [datasets] (its own params: learning_rate, num_leaves, \
                 objective, num_class..., and num_boost_round)",
                builtins.lightgbm,
                Params::new(),
            )
            .tree("xgboost", TreeBackend::XGBoost, builtins.xgboost_probe)
            .tree("lightgbm", TreeBackend::LightGBM, builtins.lightgbm_probe)
            .data("digits-mlp", builtins.digits_data)
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
            .range("synthetic-curve", "panic_at", 0.0..=1e9)
            .range("synthetic-curve", "slow_rank", -1.0..=1e5)
            .range("synthetic-curve", "work_s", 0.0..=86_400.0)
            .range("synthetic-curve", "work_serial", 0.0..=1.0)
            .range("synthetic-curve", "checkpoint_kb", 0.0..=1e7)
            .range("synthetic-curve", "checkpoint_every", 0.0..=1e9)
    }

    /// Adds (or replaces) a train function under `name`. Its `defaults` declare the params it
    /// reads: a sweep file may give those (of the same types) and no others. With no defaults
    /// it declares nothing, and a param it never reads is said as the sweep runs.
    pub fn with(
        mut self,
        name: impl Into<String>,
        about: impl Into<String>,
        train: TrainFnId,
        defaults: Params,
    ) -> Self {
        let name = name.into();
        self.entries.retain(|t| t.name != name);
        self.entries.push(Trainable {
            name,
            about: about.into(),
            train,
            defaults,
            data: None,
            ranges: Vec::new(),
            metrics: Vec::new(),
            backend: None,
            probe: None,
        });
        self
    }

    /// Runs `name` on a tree library's backend, its params checked by `probe`.
    pub fn tree(mut self, name: &str, backend: TreeBackend, probe: Probe) -> Self {
        if let Some(t) = self.entries.iter_mut().find(|t| t.name == name) {
            t.backend = Some(backend);
            t.probe = Some(probe);
        }
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

    pub fn get(&self, name: &str) -> Option<&Trainable> {
        self.entries.iter().find(|t| t.name == name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|t| t.name.as_str()).collect()
    }
}

/// Trainables for the command line's own tests: the builtins' declarations, whose train
/// functions never run here.
#[cfg(test)]
pub(crate) fn declared_builtins() -> Trainables {
    struct NoContext;
    // SAFETY: the tests only read sweep files against these; no worker ever calls them.
    unsafe impl rtune_driver::train::TrainContextType for NoContext {}
    fn never(_: &mut NoContext) -> anyhow::Result<()> {
        unreachable!("the command line's tests run no trial")
    }
    fn no_data(trainer: TorchTrainer) -> rtune_driver::error::Result<TorchTrainer> {
        Ok(trainer)
    }
    fn takes_all(_: &Params) -> Probed {
        Probed::default()
    }
    let never = TrainFnId::of(never);
    Trainables::builtin(Builtins {
        digits_mlp: never,
        digits_data: no_data,
        synthetic_curve: never,
        xgboost: never,
        xgboost_probe: takes_all,
        lightgbm: never,
        lightgbm_probe: takes_all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registering_replaces_by_name() {
        let r = declared_builtins().with(
            "synthetic-curve",
            "mine",
            declared_builtins().get("digits-mlp").unwrap().train,
            Params::new(),
        );
        assert_eq!(r.names(), ["digits-mlp", "xgboost", "lightgbm", "synthetic-curve"]);
        assert_eq!(r.get("synthetic-curve").unwrap().about, "mine");
    }
}
