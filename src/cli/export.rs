//! `rtune export DIR --best --to PATH`: a trial's checkpoint as a folder that stands on its own
//! (the checkpoint's files, `params.json`, `metrics.json` and a model card, `README.md`),
//! written whole or not at all.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rtune_searchers::{Mode, Params};

use super::builtins::Model;
use super::inspect::{find_trial, number, param_text};
use crate::data::{DATA_SCHEMA_FILE, DataSchema};
use crate::outcome::Checkpoint;
use crate::train::TorchPredictor;
use crate::tune::{ResultGrid, Scope, TrialResult};

/// What to export, from the command line.
pub(super) struct ExportArgs<'a> {
    pub dir: &'a Path,
    /// A trial by id, index or directory name; None: the best trial.
    pub trial: Option<&'a str>,
    /// Rank by this metric and mode instead of the sweep's.
    pub metric: Option<&'a str>,
    pub mode: Option<Mode>,
    pub to: &'a Path,
    /// The trainable's model, when the CLI knows it: the export then holds TorchScript too.
    pub model: Option<&'a Model>,
}

/// Exports the chosen checkpoint; returns where it went and a line about it.
pub(super) fn export(args: &ExportArgs<'_>) -> Result<String> {
    if args.to.exists() {
        bail!("{} already exists; export to a new folder", args.to.display());
    }
    let grid = ResultGrid::from_path(args.dir)?;
    let trial = match args.trial {
        Some(which) => find_trial(&grid, which)?,
        None => grid
            .best_result(args.metric, args.mode, Scope::Last)
            .with_context(|| format!("cannot choose the best trial of {}", args.dir.display()))?,
    };
    let (metric, mode) = match (args.metric.or(grid.metric.as_deref()), args.mode.or(grid.mode)) {
        (Some(metric), Some(mode)) => (Some(metric), mode),
        _ => (None, Mode::Max),
    };
    let (checkpoint, metrics) = checkpoint_of(trial, metric, mode).with_context(|| {
        format!(
            "trial {} has no checkpoint to export (its train function reported none, or none was \
             kept)",
            trial.trial_id
        )
    })?;
    let name = args.to.file_name().context("the export folder needs a name")?.to_string_lossy();
    let partial = args.to.with_file_name(format!(".{name}.partial"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial)
            .with_context(|| format!("cannot remove the leftover {}", partial.display()))?;
    }
    checkpoint.export(&partial)?;
    // What the model was trained with: the trainable's defaults with the trial's params.
    let params: Params = std::fs::read(trial.path.join("params.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_else(|| trial.params.clone());
    std::fs::write(partial.join("params.json"), serde_json::to_vec_pretty(&params)?)?;
    let torchscript = match args.model {
        Some(model) => {
            let exported = Checkpoint::from_directory(&partial)?;
            let predictor =
                TorchPredictor::from_checkpoint_boxed(&exported, |p| (model.build)(p, &params))?;
            let shape: Vec<i64> =
                [1].into_iter().chain(model.input_shape.iter().copied()).collect();
            let example =
                tch::Tensor::zeros(shape.as_slice(), (tch::Kind::Float, tch::Device::Cpu));
            predictor.save_torchscript(partial.join(TORCHSCRIPT_FILE), &example)?;
            true
        }
        None => false,
    };
    std::fs::write(partial.join("metrics.json"), serde_json::to_vec_pretty(&metrics)?)?;
    let written = Written {
        source: checkpoint.path(),
        params: &params,
        metrics: &metrics,
        files: list_files(&partial),
        schema: DataSchema::read(&partial)?,
    };
    let card = model_card(&grid, trial, &written, metric, args.to);
    std::fs::write(partial.join("README.md"), card)?;
    crate::storage::fsync_tree(&partial)?;
    std::fs::rename(&partial, args.to)
        .with_context(|| format!("cannot move the export to {}", args.to.display()))?;
    let shown = metric
        .and_then(|m| Some(format!(" ({m}={})", number(metrics.get(m)?.as_f64()?))))
        .unwrap_or_default();
    let with = if torchscript { " with TorchScript (model.pt)" } else { "" };
    Ok(format!(
        "exported trial {}'s {}{shown}{with} to {}",
        trial.trial_id,
        checkpoint.path().file_name().map_or(String::new(), |n| n.to_string_lossy().into()),
        args.to.display()
    ))
}

/// The trial's checkpoint to export and its metrics: among its kept checkpoints the one whose
/// `metric` is best, else the first it keeps (its checkpoint score's best, or its newest).
fn checkpoint_of(
    trial: &TrialResult,
    metric: Option<&str>,
    mode: Mode,
) -> Option<(Checkpoint, serde_json::Value)> {
    let result = trial.result.as_ref()?;
    let finite = |m: &crate::metrics::Metrics| {
        metric.and_then(|name| m.get(name)).copied().filter(|v| v.is_finite())
    };
    let ranked = result
        .best_checkpoints
        .iter()
        .filter_map(|(c, m)| Some((c, m, mode.sign() * finite(m)?)))
        .reduce(|best, c| if c.2 > best.2 { c } else { best })
        .map(|(c, m, _)| (c, m));
    let (checkpoint, metrics) = match ranked {
        Some((c, m)) => (c.clone(), Some(m)),
        None => match result.best_checkpoints.first() {
            Some((c, m)) => (c.clone(), Some(m)),
            None => (result.checkpoint.clone()?, None),
        },
    };
    let metrics = match metrics {
        Some(m) => serde_json::Value::Object(crate::metrics::to_json(m)),
        None => serde_json::Value::Object(checkpoint.metadata().ok()?.metrics),
    };
    Some((checkpoint, metrics))
}

/// The export's README: what it is, how good, with which params, and how to load it.
/// What an export holds, for its model card.
struct Written<'a> {
    /// The checkpoint it came from.
    source: &'a Path,
    params: &'a Params,
    metrics: &'a serde_json::Value,
    /// Its files (relative paths), the card aside.
    files: Vec<String>,
    /// The input columns and fitted preprocessor, for a model trained on datasets.
    schema: Option<DataSchema>,
}

fn model_card(
    grid: &ResultGrid,
    trial: &TrialResult,
    written: &Written<'_>,
    metric: Option<&str>,
    to: &Path,
) -> String {
    let metrics = written.metrics;
    let experiment = grid.path.file_name().map_or(String::new(), |n| n.to_string_lossy().into());
    let iteration = metrics["training_iteration"].as_f64().map_or("?".into(), number);
    let score = metric
        .and_then(|m| Some(format!("{m} = {}", number(metrics.get(m)?.as_f64()?))))
        .unwrap_or_else(|| "no metric".into());
    let params: Vec<String> = written
        .params
        .flatten()
        .iter()
        .map(|(k, v)| format!("| `{k}` | {} |", param_text(v)))
        .collect();
    let date = crate::storage::date_string(crate::storage::unix_time());
    format!(
        "# Trial {id} of the sweep `{experiment}`\n\n\
         Exported by rtune {version} on {date} from `{source}`.\n\n\
         **{score}** at training iteration {iteration} ({mode}).\n\n\
         ## Params\n\n| param | value |\n| --- | --- |\n{params}\n\n\
         ## Files\n\n{files}\
         - `params.json`: the params above; `metrics.json`: everything reported with this \
         checkpoint.\n{loading}",
        id = trial.trial_id,
        version = env!("CARGO_PKG_VERSION"),
        source = written.source.display(),
        mode = grid.mode.map_or("no mode".into(), |m| format!("{m:?}").to_lowercase()),
        params = params.join("\n"),
        files = written
            .files
            .iter()
            .filter(|f| !["params.json", "metrics.json"].contains(&f.as_str()))
            .map(|f| format!("- `{f}`\n"))
            .collect::<String>(),
        loading = loading(to, &written.files) + &preprocessing(written.schema.as_ref(), to),
    )
}

/// What the model's inputs are, for a model trained on datasets.
fn preprocessing(schema: Option<&DataSchema>, to: &Path) -> String {
    let Some(schema) = schema else { return String::new() };
    let label = schema.label.as_deref().map_or(String::new(), |l| format!(" to predict `{l}`"));
    format!(
        "\n## Inputs\n\n\
         Trained on the columns {features}{label}. `{DATA_SCHEMA_FILE}` holds them and the \
         preprocessing fitted on the training data; the model's input is the {n} columns after \
         it ({inputs}). `TorchPredictor::inputs(&frame)` applies it to a polars frame, and \
         `rtune predict --model {dir} --input FILE --output FILE` to a parquet or CSV file. From \
         Python, apply the fitted steps in `{DATA_SCHEMA_FILE}` in order (a scaler: \
         `(x - offset) / scale` per column) before calling the model.\n",
        features = code_list(&schema.features),
        n = schema.model_inputs.len(),
        inputs = code_list(&schema.model_inputs),
        dir = to.display(),
    )
}

/// `a`, `b`, … (the first 8).
fn code_list(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(8).map(|n| format!("`{n}`")).collect();
    match names.len().saturating_sub(8) {
        0 => shown.join(", "),
        more => format!("{}, and {more} more", shown.join(", ")),
    }
}

/// How to load the weights and the TorchScript module, for an export that has them.
fn loading(to: &Path, files: &[String]) -> String {
    let name = to.display();
    let has = |f: &str| files.iter().any(|x| x == f);
    let mut text = String::new();
    if has(TORCHSCRIPT_FILE) {
        text.push_str(&format!(
            "\n## TorchScript\n\n\
             `{TORCHSCRIPT_FILE}` is the model traced from rtune's (eval mode), for PyTorch alone:\n\n\
             ```python\n\
             import torch\n\
             model = torch.jit.load(\"{name}/{TORCHSCRIPT_FILE}\")\n\
             outputs = model(inputs)  # a float tensor, one row per example\n\
             ```\n"
        ));
    }
    if !has("model.safetensors") {
        return text;
    }
    text + &format!(
        "\n## Loading it\n\n\
         From Rust, with the code that built the model in training:\n\n\
         ```rust\n\
         let predictor = rtune::train::TorchPredictor::from_export(\"{name}\", |p| build_model(p))?;\n\
         let outputs = predictor.predict(&inputs)?;\n\
         ```\n\n\
         From Python (`pip install safetensors torch`):\n\n\
         ```python\n\
         from safetensors.torch import load_file\n\
         weights = load_file(\"{name}/model.safetensors\")  # name -> tensor\n\
         ```\n"
    )
}

/// The TorchScript module's file in an export.
pub const TORCHSCRIPT_FILE: &str = "model.pt";

/// The files of a folder, sorted, relative to it.
fn list_files(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path: PathBuf = entry.path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if let Ok(rel) = path.strip_prefix(base) {
                out.push(rel.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
