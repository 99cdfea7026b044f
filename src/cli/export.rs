//! `rtune export DIR --best --to PATH`: a trial's checkpoint as a folder that stands on its own
//! (the checkpoint's files, `params.json`, `metrics.json` and a model card, `README.md`),
//! written whole or not at all.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rtune_searchers::Mode;

use super::inspect::{find_trial, number, param_text};
use crate::outcome::Checkpoint;
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
    let params = serde_json::to_vec_pretty(&trial.params)?;
    std::fs::write(partial.join("params.json"), params)?;
    std::fs::write(partial.join("metrics.json"), serde_json::to_vec_pretty(&metrics)?)?;
    let card = model_card(&grid, trial, &checkpoint, &metrics, metric, args.to);
    std::fs::write(partial.join("README.md"), card)?;
    crate::storage::fsync_tree(&partial)?;
    std::fs::rename(&partial, args.to)
        .with_context(|| format!("cannot move the export to {}", args.to.display()))?;
    let shown = metric
        .and_then(|m| Some(format!(" ({m}={})", number(metrics.get(m)?.as_f64()?))))
        .unwrap_or_default();
    Ok(format!(
        "exported trial {}'s {}{shown} to {}",
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
        Some(m) => m.iter().map(|(k, &v)| (k.clone(), crate::metrics::number_or_tag(v))).collect(),
        None => serde_json::Value::Object(checkpoint.metadata().ok()?.metrics),
    };
    Some((checkpoint, metrics))
}

/// The export's README: what it is, how good, with which params, and how to load it.
fn model_card(
    grid: &ResultGrid,
    trial: &TrialResult,
    checkpoint: &Checkpoint,
    metrics: &serde_json::Value,
    metric: Option<&str>,
    to: &Path,
) -> String {
    let experiment = grid.path.file_name().map_or(String::new(), |n| n.to_string_lossy().into());
    let iteration = metrics["training_iteration"].as_f64().map_or("?".into(), number);
    let score = metric
        .and_then(|m| Some(format!("{m} = {}", number(metrics.get(m)?.as_f64()?))))
        .unwrap_or_else(|| "no metric".into());
    let params: Vec<String> = trial
        .params
        .flatten()
        .iter()
        .map(|(k, v)| format!("| `{k}` | {} |", param_text(v)))
        .collect();
    let files: Vec<String> = list_files(checkpoint.path());
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
        source = checkpoint.path().display(),
        mode = grid.mode.map_or("no mode".into(), |m| format!("{m:?}").to_lowercase()),
        params = params.join("\n"),
        files = files.iter().map(|f| format!("- `{f}`\n")).collect::<String>(),
        loading = if files.iter().any(|f| f == "model.safetensors") {
            loading(to)
        } else {
            String::new()
        },
    )
}

/// How to load the weights, for a checkpoint that has them.
fn loading(to: &Path) -> String {
    let name = to.display();
    format!(
        "\n## Loading it\n\n\
         From Rust (build the same model on a `VarStore` first):\n\n\
         ```rust\n\
         let checkpoint = rtune::Checkpoint::from_directory(\"{name}\")?;\n\
         checkpoint.load_var_store(&mut vs)?;\n\
         ```\n\n\
         From Python (`pip install safetensors torch`):\n\n\
         ```python\n\
         from safetensors.torch import load_file\n\
         weights = load_file(\"{name}/model.safetensors\")  # name -> tensor\n\
         ```\n"
    )
}

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
