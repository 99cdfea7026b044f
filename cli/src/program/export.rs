//! `rtune export DIR --best --to PATH`: chooses a trial (the best by the sweep's metric or
//! another, or one named) and the checkpoint of it to export, and has the binary's [`Torch`]
//! write it (`rtune::model::Export`): the checkpoint's files, `params.json`, `metrics.json`, a
//! model card and, for a trainable whose model the binary registers, TorchScript; written whole
//! or not at all.

use std::path::Path;

use crate::inspect::find_trial;
use anyhow::{Context, Result, bail};
use rtune_searchers::{Mode, Params, TrialStatus};

use rtune_driver::error::Error;
use rtune_driver::outcome::Checkpoint;
use rtune_driver::storage::PARAMS_FILE;
use rtune_driver::storage::checkpoint::ExportCard;
use rtune_driver::tune::{ResultGrid, Scope, TrialResult};

use super::Torch;
use crate::ui::format::number;

/// What to export, from the command line.
pub(super) struct ExportArgs<'a> {
    pub dir: &'a Path,
    /// A trial by id, index or directory name; None: the best trial.
    pub trial: Option<&'a str>,
    /// Rank by this metric and mode instead of the sweep's.
    pub metric: Option<&'a str>,
    pub mode: Option<Mode>,
    pub to: &'a Path,
    /// The registered trainable the sweep ran, if it was one: the export then holds
    /// TorchScript too when the binary knows its model.
    pub trainable: Option<&'a str>,
}

/// Exports the chosen checkpoint; returns where it went and a line about it.
pub(super) fn export(args: &ExportArgs<'_>, torch: &dyn Torch) -> Result<String> {
    if args.to.exists() {
        bail!("{} already exists; export to a new folder", args.to.display());
    }
    let grid = ResultGrid::from_path(args.dir)?;
    let objectives = grid.objectives.as_slice();
    // One of the sweep's objectives has its mode; another metric says nothing of which way is
    // better.
    let mode = args.mode.or_else(|| args.metric.and_then(|m| grid.objectives.mode_of(m)));
    if let (Some(metric), None) = (args.metric, mode) {
        let sweeps = match objectives {
            [] => "none".to_owned(),
            some => some.iter().map(|o| format!("`{}`", o.metric)).collect::<Vec<_>>().join(", "),
        };
        return Err(Error::config(
            "--mode",
            format!(
                "is needed with --metric `{metric}`, which is not what the sweep optimises \
                 ({sweeps}): give --mode min or --mode max"
            ),
        )
        .into());
    }
    if let (None, None, [_, _, ..]) = (args.trial, args.metric, objectives) {
        let names: Vec<&str> = objectives.iter().map(|o| o.metric.as_str()).collect();
        bail!(
            "{} is a sweep with {} objectives ({}), and no trial is best in all: export a trial \
             of its Pareto front with --trial ID (`rtune show {}` marks it), or the best by one \
             objective with --metric NAME",
            args.dir.display(),
            names.len(),
            names.join(", "),
            args.dir.display()
        );
    }
    let trial = match args.trial {
        Some(which) => find_trial(&grid, which)?,
        None => best_trial(&grid, args.metric, mode, args.dir)?,
    };
    let sweep = (grid.objectives.metric(), grid.objectives.mode());
    let (metric, mode) = match (args.metric.or(sweep.0), mode.or(sweep.1)) {
        (Some(metric), Some(mode)) => (Some(metric), mode),
        _ => (None, Mode::Max),
    };
    let (checkpoint, metrics) = checkpoint_of(&grid, trial, metric, mode).with_context(|| {
        format!(
            "trial {} has no checkpoint to export (its train function reported none, or none was \
             kept)",
            trial.trial_id()
        )
    })?;
    // What the model was trained with: the trainable's defaults with the trial's params.
    let params: Params = std::fs::read(trial.path().join(PARAMS_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_else(|| trial.params().clone());
    let experiment = grid.path.file_name().map_or(String::new(), |n| n.to_string_lossy().into());
    let card = ExportCard {
        params: Some(params),
        metrics: Some(metrics.clone()),
        metric: metric.map(|m| (m.to_owned(), mode)),
        title: Some(format!("Trial {} of the sweep `{experiment}`", trial.trial_id())),
    };
    let torchscript = torch.export(&checkpoint, args.to, card, args.trainable)?;
    let shown = metric
        .and_then(|m| Some(format!(" ({m}={})", number(metrics.get(m)?.as_f64()?))))
        .unwrap_or_default();
    let with = if torchscript { " with TorchScript (model.pt)" } else { "" };
    let among = match (args.trial, grid.constraints.is_empty()) {
        (None, false) => format!(", the best feasible one ({})", grid.constraints_text()),
        _ => String::new(),
    };
    Ok(format!(
        "exported trial {}'s {}{shown}{among}{with} to {}",
        trial.trial_id(),
        checkpoint.path().file_name().map_or(String::new(), |n| n.to_string_lossy().into()),
        args.to.display()
    ))
}

/// The best trial of `grid` by `metric` and `mode` (the sweep's when None) among those that
/// did not fail: a failed trial is exported only when named (`--trial`).
fn best_trial<'g>(
    grid: &'g ResultGrid,
    metric: Option<&str>,
    mode: Option<Mode>,
    dir: &Path,
) -> Result<&'g TrialResult> {
    let failed = grid.trials.iter().filter(|t| t.status() == TrialStatus::Error).count();
    if failed == grid.trials.len() {
        bail!(
            "every trial of {} failed ({failed} ERROR): there is no best one to export; export a \
             failed trial's checkpoint by naming it (--trial ID; `rtune show {}` lists them)",
            dir.display(),
            dir.display()
        );
    }
    let unfailed = ResultGrid {
        trials: grid.trials.iter().filter(|t| t.status() != TrialStatus::Error).cloned().collect(),
        ..grid.clone()
    };
    let best = unfailed
        .best_result_by(metric, mode, Scope::Last)
        .with_context(|| format!("cannot choose the best trial of {}", dir.display()))?;
    grid.trials.iter().find(|t| t.trial_id() == best.trial_id()).context("the best trial")
}

/// The trial's checkpoint to export and its metrics: its best by the sweep's rule
/// (`ResultGrid::checkpoint_ranking`), `metric` in `mode` standing for the sweep's metric.
fn checkpoint_of(
    grid: &ResultGrid,
    trial: &TrialResult,
    metric: Option<&str>,
    mode: Mode,
) -> Option<(Checkpoint, serde_json::Map<String, serde_json::Value>)> {
    let ranking = grid.checkpoint_ranking(metric.map(|m| (m, mode)));
    let checkpoint = trial.checkpoint_by(&ranking).ok()?.clone();
    let recorded = trial.result()?.best_checkpoints.iter().find(|(c, _)| *c == checkpoint);
    let metrics = match recorded {
        Some((_, m)) => rtune_driver::metrics::to_json(m),
        None => checkpoint.metadata().ok()?.metrics,
    };
    Some((checkpoint, metrics))
}

/// An export in a temporary folder of its own, which goes when this is dropped.
pub(super) struct TemporaryExport {
    folder: std::path::PathBuf,
    model: std::path::PathBuf,
}

impl TemporaryExport {
    /// The exported model's folder.
    pub(super) fn model(&self) -> &Path {
        &self.model
    }
}

impl Drop for TemporaryExport {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

/// The best checkpoint of the experiment in `dir`, as `rtune export DIR --best` chooses it,
/// exported to a temporary folder (`rtune predict --best`, `rtune serve --best`); what was exported is said on
/// stderr.
pub(super) fn best_to_temporary(
    dir: &Path,
    registry: &crate::program::Trainables,
    torch: &dyn Torch,
    command: &str,
) -> Result<TemporaryExport, crate::exit::Exit> {
    let name = format!("rtune-{command}-{}-{:08x}", std::process::id(), rand::random::<u32>());
    let folder = std::env::temp_dir().join(name);
    let exported = TemporaryExport { model: folder.join("best-model"), folder };
    let trainable = super::sweeping::trainable(dir, registry);
    let args = ExportArgs {
        dir,
        trial: None,
        metric: None,
        mode: None,
        to: &exported.model,
        trainable: trainable.as_deref(),
    };
    let said = export(&args, torch).map_err(crate::exit::input_error)?;
    eprintln!("rtune {command} --best: {said}");
    Ok(exported)
}
