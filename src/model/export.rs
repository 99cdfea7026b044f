//! A checkpoint as a folder that stands on its own, for whoever uses the model next (what
//! `Checkpoint::export` and `rtune export` write): the checkpoint's files (the weights as
//! `model.safetensors`, `metadata.json`, the fitted `preprocessor.json` of a model trained on
//! datasets, the train function's own files), `params.json` (what the model was trained with),
//! `metrics.json` (what was reported with the checkpoint), a model card (`README.md`: the score,
//! the params, the files, how to load it from Rust and Python) and, given the code that builds
//! the model, the model traced to TorchScript (`model.pt`) for PyTorch's `torch.jit.load`.
//!
//! It is written to a hidden folder beside the target and renamed into place once complete and
//! fsynced, so a failed export leaves nothing behind and a finished one is never half there.
//! Choosing *which* checkpoint to export (the best trial, by which metric) is the caller's: the
//! `ResultGrid` or `rtune export`.

use std::fs;
use std::path::Path;

use rtune_searchers::{Mode, Params};
use tch::nn;

use super::TorchPredictor;
use rtune_driver::data::{DATA_SCHEMA_FILE, DataSchema};
use rtune_driver::error::{Error, IoContext, Result};
use rtune_driver::metrics::{number_text, param_text};
use rtune_driver::outcome::Checkpoint;
use rtune_driver::storage::checkpoint::{ExportCard, copy_dir_where, is_training_state};
use rtune_driver::storage::{self, PARAMS_FILE};

/// The TorchScript module's file in an export.
pub const TORCHSCRIPT_FILE: &str = "model.pt";
/// The metrics reported with the exported checkpoint.
pub const METRICS_FILE: &str = "metrics.json";

/// How to rebuild a trainable's model from its params (the same code as in training), and the
/// shape of one input row, for tracing it to TorchScript.
#[derive(Debug, Clone)]
pub struct Model {
    pub build: fn(&nn::Path, &Params) -> Result<Box<dyn nn::ModuleT>>,
    pub input_shape: Vec<i64>,
}

/// What goes into an export beyond the checkpoint's own files: its model card ([`ExportCard`],
/// each part with a default read from the checkpoint and the run directory it lies in) and the
/// code that builds its model.
#[derive(Debug, Clone, Default)]
pub struct Export {
    card: ExportCard,
    model: Option<Model>,
}

impl From<ExportCard> for Export {
    fn from(card: ExportCard) -> Self {
        Export { card, model: None }
    }
}

impl Export {
    /// The checkpoint's files, with the params of the run it came from (its `params.json`),
    /// the metrics reported with it, and a model card.
    pub fn new() -> Self {
        Export::default()
    }

    /// The params the model was trained with (default: the run directory's `params.json`).
    pub fn params(mut self, params: Params) -> Self {
        self.card.params = Some(params);
        self
    }

    /// The metrics to record with it (default: those reported with the checkpoint).
    pub fn metrics(mut self, metrics: serde_json::Map<String, serde_json::Value>) -> Self {
        self.card.metrics = Some(metrics);
        self
    }

    /// The metric the model was chosen by, shown first in the model card.
    pub fn metric(mut self, name: impl Into<String>, mode: Mode) -> Self {
        self.card.metric = Some((name.into(), mode));
        self
    }

    /// The code that builds the model: the export then holds it as TorchScript (`model.pt`).
    pub fn model(mut self, model: Model) -> Self {
        self.model = Some(model);
        self
    }

    /// The model card's heading (default: the checkpoint's and its run's names).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.card.title = Some(title.into());
        self
    }

    /// Writes `checkpoint` with all of the above to `dest`, a folder that must not exist yet.
    pub fn write(&self, checkpoint: &Checkpoint, dest: impl AsRef<Path>) -> Result<Checkpoint> {
        let dest = dest.as_ref();
        if dest.exists() {
            return Err(Error::Checkpoint {
                path: dest.to_owned(),
                message: "already exists; export to a new folder".into(),
            });
        }
        let name = dest.file_name().ok_or_else(|| Error::Checkpoint {
            path: dest.to_owned(),
            message: "the export folder needs a name".into(),
        })?;
        let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        fs::create_dir_all(parent).at(parent)?;
        let partial = parent.join(format!(".{}.partial", name.to_string_lossy()));
        if partial.exists() {
            fs::remove_dir_all(&partial).at(&partial)?;
        }
        let written = self.fill(checkpoint, &partial, dest).and_then(|()| {
            storage::fsync_tree(&partial)?;
            fs::rename(&partial, dest).at(dest)?;
            storage::fsync_dir(parent)
        });
        if let Err(e) = written {
            let _ = fs::remove_dir_all(&partial);
            return Err(e);
        }
        Checkpoint::from_directory(dest)
    }

    /// Writes everything into `partial` (which becomes `dest`).
    fn fill(&self, checkpoint: &Checkpoint, partial: &Path, dest: &Path) -> Result<()> {
        // What prediction needs: not the optimizer's state, nor the folder's bookkeeping.
        let wanted = |relative: &str| {
            !is_training_state(relative) && !relative.split('/').any(|p| p.starts_with('.'))
        };
        copy_dir_where(checkpoint.model_files()?, partial, &wanted)?;
        let metadata = checkpoint.metadata()?;
        let run_dir = checkpoint.path().parent();
        let card = &self.card;
        let params = match &card.params {
            Some(p) => p.clone(),
            None => read_params(run_dir)?,
        };
        write_json(&partial.join(PARAMS_FILE), &params)?;
        let mut metrics = card.metrics.clone().unwrap_or(metadata.metrics);
        metrics
            .entry("training_iteration")
            .or_insert_with(|| serde_json::Value::from(metadata.training_iteration));
        write_json(&partial.join(METRICS_FILE), &metrics)?;
        if let Some(model) = &self.model {
            let copied = Checkpoint::from_directory(partial)?;
            let predictor =
                TorchPredictor::from_checkpoint_boxed(&copied, |p| (model.build)(p, &params))?;
            let shape: Vec<i64> =
                [1].into_iter().chain(model.input_shape.iter().copied()).collect();
            let example =
                tch::Tensor::zeros(shape.as_slice(), (tch::Kind::Float, tch::Device::Cpu));
            predictor.save_torchscript(partial.join(TORCHSCRIPT_FILE), &example)?;
        }
        let card = Card {
            title: card.title.clone().unwrap_or_else(|| default_title(checkpoint.path())),
            source: checkpoint.path(),
            params: &params,
            metrics: &metrics,
            metric: card.metric.as_ref().map(|(m, mode)| (m.as_str(), *mode)),
            files: rtune_driver::sys::relative_files(partial),
            schema: DataSchema::read(partial)?,
            to: dest,
        };
        fs::write(partial.join("README.md"), card.text()).at(partial.join("README.md"))
    }
}

/// `checkpoint.export(dest)?`: [`Export`] with its defaults. A trait of this crate because
/// checkpoints themselves are `rtune-driver`'s; `use rtune::ExportCheckpoint`.
pub trait ExportCheckpoint {
    /// Exports the checkpoint to `dest` (a new folder) with the params of its run, its metrics
    /// and a model card; see [`Export`] for TorchScript and the rest.
    fn export(&self, dest: impl AsRef<Path>) -> Result<Checkpoint>;
}

impl ExportCheckpoint for Checkpoint {
    fn export(&self, dest: impl AsRef<Path>) -> Result<Checkpoint> {
        Export::new().write(self, dest)
    }
}

/// The params of the run a checkpoint lies in (none where it lies elsewhere).
fn read_params(run_dir: Option<&Path>) -> Result<Params> {
    let Some(path) = run_dir.map(|d| d.join(PARAMS_FILE)).filter(|p| p.is_file()) else {
        return Ok(Params::new());
    };
    let bytes = fs::read(&path).at(&path)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::Checkpoint { message: format!("not a params file: {e}"), path })
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Checkpoint {
        path: path.to_owned(),
        message: format!("cannot write JSON: {e}"),
    })?;
    fs::write(path, bytes).at(path)
}

/// `checkpoint_000012 of <the run's folder name>`.
fn default_title(checkpoint: &Path) -> String {
    let name = |p: Option<&Path>| {
        p.and_then(Path::file_name).map_or(String::new(), |n| n.to_string_lossy().into_owned())
    };
    let run = name(checkpoint.parent());
    let own = name(Some(checkpoint));
    if run.is_empty() { format!("Checkpoint `{own}`") } else { format!("`{own}` of `{run}`") }
}

/// What the model card is made of.
struct Card<'a> {
    title: String,
    /// The checkpoint it came from.
    source: &'a Path,
    params: &'a Params,
    metrics: &'a serde_json::Map<String, serde_json::Value>,
    metric: Option<(&'a str, Mode)>,
    /// The export's files (relative paths), the card aside.
    files: Vec<String>,
    /// The input columns and fitted preprocessor, for a model trained on datasets.
    schema: Option<DataSchema>,
    /// Where the export will be.
    to: &'a Path,
}

impl Card<'_> {
    fn text(&self) -> String {
        let value = |m: &str| self.metrics.get(m).and_then(serde_json::Value::as_f64);
        let iteration = value("training_iteration").map_or("?".into(), number_text);
        let score = self
            .metric
            .and_then(|(m, _)| Some(format!("{m} = {}", number_text(value(m)?))))
            .unwrap_or_else(|| "no metric".into());
        let mode = self.metric.map_or("no mode".into(), |(_, m)| format!("{m:?}").to_lowercase());
        let params: Vec<String> = self
            .params
            .flatten()
            .iter()
            .map(|(k, v)| format!("| `{k}` | {} |", param_text(v)))
            .collect();
        let files: String = self
            .files
            .iter()
            .filter(|f| ![PARAMS_FILE, METRICS_FILE].contains(&f.as_str()))
            .map(|f| format!("- `{f}`\n"))
            .collect();
        format!(
            "# {title}\n\n\
             Exported by rtune {version} on {date} from `{source}`.\n\n\
             **{score}** at training iteration {iteration} ({mode}).\n\n\
             ## Params\n\n| param | value |\n| --- | --- |\n{params}\n\n\
             ## Files\n\n{files}\
             - `{PARAMS_FILE}`: the params above; `{METRICS_FILE}`: everything reported with \
             this checkpoint.\n{loading}{inputs}",
            title = self.title,
            version = env!("CARGO_PKG_VERSION"),
            date = storage::date_string(storage::unix_time()),
            source = self.source.display(),
            params = params.join("\n"),
            loading = self.loading(),
            inputs = self.inputs(),
        )
    }

    /// How to load the weights and the TorchScript module, or the tree model, for an export
    /// that has them.
    fn loading(&self) -> String {
        let name = self.to.display();
        let has = |f: &str| self.files.iter().any(|x| x == f);
        let mut text = String::new();
        if has(TORCHSCRIPT_FILE) {
            text.push_str(&format!(
                "\n## TorchScript\n\n\
                 `{TORCHSCRIPT_FILE}` is the model traced from rtune's (eval mode), for PyTorch \
                 alone:\n\n\
                 ```python\n\
                 import torch\n\
                 model = torch.jit.load(\"{name}/{TORCHSCRIPT_FILE}\")\n\
                 outputs = model(inputs)  # a float tensor, one row per example\n\
                 ```\n"
            ));
        }
        if has(crate::xgboost::MODEL_FILE) {
            let model = crate::xgboost::MODEL_FILE;
            text.push_str(&format!(
                "\n## XGBoost\n\n\
                 `{model}` is the model in XGBoost's UBJSON format, which its own packages load \
                 (`pip install xgboost`):\n\n\
                 ```python\n\
                 import xgboost\n\
                 booster = xgboost.Booster(model_file=\"{name}/{model}\")\n\
                 outputs = booster.predict(xgboost.DMatrix(inputs))  # inputs: after the preprocessor\n\
                 ```\n\n\
                 From Rust: `rtune::model::TreeModel::load(\"{name}\".as_ref())?.predict(&inputs, rows)?`.\n"
            ));
        }
        if has(crate::lightgbm::MODEL_FILE) {
            let model = crate::lightgbm::MODEL_FILE;
            text.push_str(&format!(
                "\n## LightGBM\n\n\
                 `{model}` is the model in LightGBM's text format, which its own packages load \
                 (`pip install lightgbm`):\n\n\
                 ```python\n\
                 import lightgbm\n\
                 booster = lightgbm.Booster(model_file=\"{name}/{model}\")\n\
                 outputs = booster.predict(inputs)  # inputs: after the preprocessor\n\
                 ```\n\n\
                 From Rust: `rtune::model::TreeModel::load(\"{name}\".as_ref())?.predict(&inputs, rows)?`.\n"
            ));
        }
        if !has(storage::checkpoint::MODEL_FILE) {
            return text;
        }
        text + &format!(
            "\n## Loading it\n\n\
             From Rust, with the code that built the model in training:\n\n\
             ```rust\n\
             let predictor = rtune::model::TorchPredictor::from_export(\"{name}\", |p| build_model(p))?;\n\
             let outputs = predictor.predict(&inputs)?;\n\
             ```\n\n\
             From Python (`pip install safetensors torch`):\n\n\
             ```python\n\
             from safetensors.torch import load_file\n\
             weights = load_file(\"{name}/model.safetensors\")  # name -> tensor\n\
             ```\n"
        )
    }

    /// What the model's inputs are, for a model trained on datasets.
    fn inputs(&self) -> String {
        let Some(schema) = &self.schema else { return String::new() };
        let label = schema.label.as_deref().map_or(String::new(), |l| format!(" to predict `{l}`"));
        format!(
            "\n## Inputs\n\n\
             Trained on the columns {features}{label}. `{DATA_SCHEMA_FILE}` holds them and the \
             preprocessing fitted on the training data; the model's input is the {n} columns \
             after it ({inputs}). `TorchPredictor::inputs(&frame)` applies it to a polars frame, \
             and `rtune predict --model {dir} --input FILE --output FILE` to a parquet or CSV \
             file. From Python, apply the fitted steps in `{DATA_SCHEMA_FILE}` in order (a \
             scaler: `(x - offset) / scale` per column) before calling the model.\n",
            features = code_list(&schema.features),
            n = schema.model_inputs.len(),
            inputs = code_list(&schema.model_inputs),
            dir = self.to.display(),
        )
    }
}

/// `a`, `b`, … (the first 8).
fn code_list(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(8).map(|n| format!("`{n}`")).collect();
    match names.len().saturating_sub(8) {
        0 => shown.join(", "),
        more => format!("{}, and {more} more", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use tch::nn::Module;
    use tch::{Device, Kind, Tensor};

    use super::*;

    /// A run directory with params and one checkpoint of a 3→2 linear model named `fc`.
    fn run_with_checkpoint() -> (tempfile::TempDir, Checkpoint, Tensor) {
        let run = tempfile::tempdir().unwrap();
        std::fs::write(run.path().join(PARAMS_FILE), r#"{"lr": 0.01, "hidden": 2}"#).unwrap();
        let dir = run.path().join("checkpoint_000004");
        std::fs::create_dir(&dir).unwrap();
        tch::manual_seed(7);
        let vs = nn::VarStore::new(Device::Cpu);
        let fc = nn::linear(vs.root() / "fc", 3, 2, Default::default());
        vs.save(dir.join(storage::checkpoint::MODEL_FILE)).unwrap();
        let metadata = r#"{"training_iteration": 4, "timestamp": 0.0,
            "metrics": {"val_loss": 0.25}, "rtune_version": "test"}"#;
        std::fs::write(dir.join(storage::checkpoint::METADATA_FILE), metadata).unwrap();
        let x = Tensor::randn([4, 3], (Kind::Float, Device::Cpu));
        let want = fc.forward(&x);
        (run, Checkpoint::from_directory(dir).unwrap(), Tensor::cat(&[x, want], 1))
    }

    fn linear_model() -> Model {
        Model {
            build: |p, params| {
                let outputs = params.get::<i64>("hidden")?;
                Ok(Box::new(nn::linear(p / "fc", 3, outputs, Default::default())))
            },
            input_shape: vec![3],
        }
    }

    #[test]
    fn an_export_stands_on_its_own() {
        let (run, checkpoint, io) = run_with_checkpoint();
        let dest = run.path().join("out").join("best");
        let exported = checkpoint.export(&dest).unwrap();
        assert_eq!(exported.path(), dest);
        let read = |f: &str| std::fs::read_to_string(dest.join(f)).unwrap();
        let params: Params = serde_json::from_str(&read(PARAMS_FILE)).unwrap();
        assert_eq!(params.get::<f64>("lr").unwrap(), 0.01);
        let metrics: serde_json::Value = serde_json::from_str(&read(METRICS_FILE)).unwrap();
        assert_eq!(metrics, serde_json::json!({"val_loss": 0.25, "training_iteration": 4}));
        let card = read("README.md");
        assert!(card.starts_with("# `checkpoint_000004` of `"), "{card}");
        assert!(card.contains("| `lr` | 0.0100 |") && card.contains("at training iteration 4"));
        assert!(card.contains("- `model.safetensors`") && !card.contains(TORCHSCRIPT_FILE));
        // The weights are the checkpoint's.
        let predictor =
            TorchPredictor::from_export(&dest, |p| nn::linear(p / "fc", 3, 2, Default::default()))
                .unwrap();
        let (x, want) = (io.narrow(1, 0, 3), io.narrow(1, 3, 2));
        assert!(predictor.predict(&x).unwrap().allclose(&want, 0.0, 0.0, false));
        let again = checkpoint.export(&dest).unwrap_err().to_string();
        assert!(again.contains("already exists"), "{again}");
        let left: Vec<_> = std::fs::read_dir(run.path().join("out")).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "only the export is there: {left:?}");
    }

    #[test]
    fn torchscript_and_the_chosen_metric_go_with_a_model() {
        let (run, checkpoint, io) = run_with_checkpoint();
        let dest = run.path().join("best");
        Export::new()
            .model(linear_model())
            .metric("val_loss", Mode::Min)
            .title("Trial 3 of the sweep `s`")
            .write(&checkpoint, &dest)
            .unwrap();
        let card = std::fs::read_to_string(dest.join("README.md")).unwrap();
        assert!(card.starts_with("# Trial 3 of the sweep `s`"), "{card}");
        assert!(card.contains("**val_loss = 0.2500** at training iteration 4 (min)"), "{card}");
        assert!(card.contains("torch.jit.load"), "{card}");
        let traced = tch::CModule::load(dest.join(TORCHSCRIPT_FILE)).unwrap();
        let (x, want) = (io.narrow(1, 0, 3), io.narrow(1, 3, 2));
        assert!(traced.forward_ts(&[x]).unwrap().allclose(&want, 1e-6, 1e-6, false));
    }

    #[test]
    fn a_failed_export_leaves_nothing() {
        let (run, checkpoint, _) = run_with_checkpoint();
        let dest = run.path().join("best");
        // The params say 5 outputs; the checkpoint's weights have 2.
        let wrong = Export::new()
            .params(Params::new().with("hidden", 5))
            .model(linear_model())
            .write(&checkpoint, &dest)
            .unwrap_err()
            .to_string();
        assert!(wrong.contains("cannot load model"), "{wrong}");
        assert!(!dest.exists() && !run.path().join(".best.partial").exists());
        let missing = Export::new().params(Params::new()).model(linear_model());
        let e = missing.write(&checkpoint, &dest).unwrap_err().to_string();
        assert!(e.contains("hidden"), "{e}");
        assert!(!dest.exists() && !run.path().join(".best.partial").exists());
    }
}
