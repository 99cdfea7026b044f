//! The commands that run sweeps (`run`, `resume`, `validate`, `stop`): reading the sweep file,
//! the experiment it makes or goes on with, how it is shown while it runs (the terminal UI, the
//! progress lines, the stream `rtune watch` follows), signals, and the exit code at the end.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use rtune_searchers::TrialStatus;

use super::{SweepSpec, Target, Trainables};
use crate::args::Output;
use crate::exit::{EXIT_INTERRUPTED, EXIT_INVALID, EXIT_TRIALS_FAILED, Exit, in_sweep_terms};
use crate::{doc, inspect, ui};
use rtune_driver::config::RunConfig;
use rtune_driver::monitor::{MetricsServer, Monitor};
use rtune_driver::outcome::error_summary;
use rtune_driver::tune::{Control, ResultGrid, SWEEP_FILE, SweepState, Tuner};

/// `println!` for the sweep commands, whose reader may go away while the sweep goes on (`rtune
/// run .. | head`): what cannot be written is dropped (SIGPIPE is ignored here, see
/// `crate::commands::end_quietly_on_broken_pipe`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Refuses a `--json` file that could not be written, before the sweep runs.
fn check(output: &Output) -> Result<(), Exit> {
    output.check().map_err(|e| Exit(EXIT_INVALID, anyhow::anyhow!(e)))
}

/// The sweep file `rtune run` ran, kept in the experiment for `rtune resume`.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct SweepCopy {
    /// The file's absolute path.
    file: String,
    text: String,
    set: Vec<String>,
}

pub(super) fn run(
    file: &Path,
    sets: &[String],
    output: &Output,
    registry: &Trainables,
    target: &Target,
) -> Result<i32, Exit> {
    check(output)?;
    let (source, spec) = read_spec(file, sets, registry, target.cluster.is_none())?;
    // What is refused is refused before anything is said or made.
    let metrics = metrics_endpoint(&spec, output)?;
    let mut run = target.run_config(&spec);
    let mut name = spec.run.name.clone().unwrap_or_else(|| {
        let stem = file.file_stem().map_or("sweep".into(), |s| s.to_string_lossy().into_owned());
        format!("{stem}_{}", rtune_driver::storage::date_string(rtune_driver::storage::unix_time()))
    });
    run.name = Some(name.clone());
    let mut path = rtune_driver::tune::experiment_path(&run);
    if rtune_driver::tune::experiment_exists(&run)? {
        // On a store, what the store holds decides (the staging copy here is brought up to
        // date to tell it).
        if let Some(store) = rtune_driver::tune::experiment_store(&run) {
            rtune_driver::storage::staging::local_copy(Path::new(store?.url()))?;
        }
        if target.resume_existing {
            say!("{} already holds this experiment (a requeued job): resuming it", path.display());
            return resume(&path, None, output, registry, target);
        }
        if recorded_nothing(&path) {
            // A sweep that stopped before its first result (a mistake found when it began):
            // its fix runs under the same name.
            say!("replacing {}: its sweep recorded no result", path.display());
            rtune_driver::tune::remove_experiment(&run)
                .with_context(|| format!("cannot replace {}", path.display()))?;
        } else {
            // The name is taken by another sweep: this run gets a fresh folder beside it.
            let taken = path.clone();
            for n in 2.. {
                run.name = Some(format!("{name}-{n}"));
                path = rtune_driver::tune::experiment_path(&run);
                let taken = match run.store_url() {
                    Some(_) => rtune_driver::tune::experiment_exists(&run)?,
                    None => path.exists(),
                };
                if !taken {
                    break;
                }
            }
            name = run.name.clone().expect("named above");
            say!("{}: this run is {name}", name_taken(&taken));
        }
    }
    // Absolute: `rtune resume` from another folder finds what the file's paths are relative to.
    let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_owned());
    let copy = SweepCopy {
        file: absolute.display().to_string(),
        text: source.text.clone(),
        set: sets.to_vec(),
    };
    let copy = serde_json::to_vec_pretty(&copy)?;
    let control = Control::new();
    say!(
        "sweep {} ({}, search {}) in {}",
        source.name,
        samples(spec.trial_count()),
        spec.search_said(),
        path.display()
    );
    let (run, screen) = reporting(run, &spec, output, metrics, &name, &path, &control);
    let began = Instant::now();
    let outcome = watch_signals(control.clone(), || {
        spec.tuner(run, control.clone()).experiment_file(SWEEP_FILE, copy).fit()
    });
    screen.close();
    finish(outcome, &path, output, began)
}

/// `rtune stop DIR`: asks the sweep's driver to stop it resumably; waits for it to stop.
pub(super) fn stop(dir: &Path, no_wait: bool) -> anyhow::Result<i32> {
    if !Tuner::can_restore(dir) {
        return Err(inspect::not_an_experiment(dir));
    }
    let remote = ui::stream::attach(dir).with_context(|| {
        format!(
            "no sweep is running in {} (it ended, or was interrupted: `rtune resume {}` goes on)",
            dir.display(),
            dir.display()
        )
    })?;
    remote.interrupt_now()?;
    say!("asked the sweep in {} to stop; its trials keep their checkpoints", dir.display());
    if !no_wait {
        while ui::stream::driver_alive(dir) {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        say!("stopped: `rtune resume {}` goes on with it", dir.display());
    }
    Ok(0)
}

/// `rtune validate`: what `run` checks before it starts, and a line on what it would run.
pub(super) fn validate(file: &Path, sets: &[String], registry: &Trainables) -> Result<i32, Exit> {
    let (source, spec) = read_spec(file, sets, registry, true)?;
    let mut run = spec.run_config();
    run.name = Some(spec.run.name.clone().unwrap_or_else(|| "validate".into()));
    let checked = spec.tuner(run.clone(), Control::new()).validate().map_err(in_sweep_terms)?;
    let trainable = spec.builtin.as_deref().map_or("a command".to_owned(), |b| format!("`{b}`"));
    say!(
        "{}: valid; it runs {} of {trainable} ({}, {} at a time) with search {} and scheduler \
         `{}`",
        source.name,
        samples(checked.trials),
        match spec.scaling.num_workers {
            _ if spec.scaling.is_elastic() => format!(
                "elastic groups of {} to {} workers",
                spec.scaling.ranks(),
                spec.scaling.max_ranks()
            ),
            0 => "in this process, one at a time: local mode".to_owned(),
            1 => "1 worker each".to_owned(),
            n => format!("{n} workers each"),
        },
        checked.max_concurrent_trials,
        spec.search_said(),
        spec.scheduler.kind
    );
    say!("{}", super::plan::plan(&spec, registry));
    if let Some(name) = &spec.run.name {
        let path =
            rtune_driver::tune::experiment_path(&RunConfig { name: Some(name.clone()), ..run });
        if rtune_driver::tune::holds_experiment(&path) && !recorded_nothing(&path) {
            say!(
                "note: {}: `rtune run` would run this one beside it as {name}-2 (or the next \
                 free number)",
                name_taken(&path)
            );
        }
    }
    Ok(0)
}

/// What `run` and `validate` say of the experiment already in `path`: what it is, and what
/// goes on with it or ends it.
fn name_taken(path: &Path) -> String {
    let dir = path.display();
    match rtune_driver::tune::sweep_state(path) {
        SweepState::Running(holder) => format!(
            "{dir} holds a sweep another driver is running ({holder}; `rtune stop {dir}` ends it)"
        ),
        SweepState::Interrupted => {
            format!("{dir} holds an interrupted sweep (`rtune resume {dir}` goes on with it)")
        }
        SweepState::Stopped(_) => format!("{dir} holds a sweep stopped on a mistake"),
        SweepState::Finished => format!("{dir} holds a finished sweep"),
    }
}

/// Reads and checks the sweep file (exit 2 on any mistake); `here`: for a sweep run on this
/// machine, whether a trial fits it too.
fn read_spec(
    file: &Path,
    sets: &[String],
    registry: &Trainables,
    here: bool,
) -> Result<(doc::Source, SweepSpec), Exit> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the sweep file {}", file.display()))
        .map_err(|e| Exit(EXIT_INVALID, e))?;
    let source = doc::Source { name: file.display().to_string(), text };
    let spec = if here {
        SweepSpec::read_to_run_here(&source, sets, registry)?
    } else {
        SweepSpec::read(&source, sets, registry)?
    };
    Ok((source, spec))
}

/// Whether the experiment in `path` holds nothing to lose: no driver runs it, and none of its
/// trials recorded a result (or a checkpoint, which comes with one).
fn recorded_nothing(path: &Path) -> bool {
    if ui::stream::driver_alive(path) {
        return false;
    }
    match ResultGrid::from_path(path) {
        Ok(grid) => grid.trials.iter().all(|t| t.history().is_empty()),
        Err(_) => false,
    }
}

/// `rtune resume DIR --sweep FILE`: the corrected sweep file, to replace the copy kept in `dir`
/// (see `Command::Resume`), when it changes nothing that decided what was recorded: its copy,
/// its name and the sweep it reads as.
fn replacement(
    dir: &Path,
    file: &Path,
    sets: &[String],
    registry: &Trainables,
) -> Result<(SweepCopy, SweepSpec), Exit> {
    let (_, old) = read_sweep(dir, registry)?;
    let (source, new) = read_spec(file, sets, registry, false)?;
    let differences = super::plan::recorded_differences(&old, &new);
    if !differences.is_empty() {
        let lines: Vec<String> = differences
            .iter()
            .map(|(key, was, is)| format!("  `{key}`: {was} in the experiment, {is} in the file"))
            .collect();
        return Err(Exit(
            EXIT_INVALID,
            anyhow::anyhow!(
                "{} differs from the sweep in {} in what decided what was recorded, which a \
                 resume keeps (run the file as a new sweep instead):\n{}",
                source.name,
                dir.display(),
                lines.join("\n")
            ),
        ));
    }
    let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_owned());
    let copy =
        SweepCopy { file: absolute.display().to_string(), text: source.text, set: sets.to_vec() };
    Ok((copy, new))
}

/// The sweep `rtune run` ran in `dir`, from the copy of its file kept there: the file's path
/// and the sweep.
fn read_sweep(dir: &Path, registry: &Trainables) -> Result<(String, SweepSpec), Exit> {
    let copy_path = dir.join(SWEEP_FILE);
    let copy: SweepCopy = match std::fs::read(&copy_path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not rtune's sweep copy", copy_path.display()))
            .map_err(|e| Exit(EXIT_INVALID, e))?,
        Err(e) => {
            let hint = if Tuner::can_restore(dir) {
                "; it was not started by `rtune run`: go on with it from Rust with Tuner::restore"
            } else {
                "; is it an experiment directory (see `rtune ls`)?"
            };
            return Err(Exit(
                EXIT_INVALID,
                anyhow::anyhow!("cannot read {}: {e}{hint}", copy_path.display()),
            ));
        }
    };
    let source = doc::Source { name: copy.file, text: copy.text };
    let spec = SweepSpec::read(&source, &copy.set, registry)?;
    Ok((source.name, spec))
}

/// `rtune resume DIR [--sweep FILE --set ..]`: goes on with the interrupted sweep in `dir`
/// (with `corrected`, the sweep file and its `--set`s, replacing the kept copy first). Another
/// driver's sweep is refused, and a finished one has nothing to resume, before anything is
/// written.
pub(super) fn resume(
    dir: &Path,
    corrected: Option<(&Path, &[String])>,
    output: &Output,
    registry: &Trainables,
    target: &Target,
) -> Result<i32, Exit> {
    check(output)?;
    match rtune_driver::tune::sweep_state(dir) {
        SweepState::Running(holder) => {
            let path = dir.display().to_string();
            return Err(in_sweep_terms(rtune_driver::error::Error::Held { path, holder }));
        }
        SweepState::Finished => {
            let shown = dir.display();
            if rtune_driver::callback::MlflowLogger::unsent_in(dir) > 0 {
                say!("{shown} finished; sending its MLflow server what the sweep's end could not");
                return crate::commands::sync(dir).map(|()| 0).map_err(|(code, e)| Exit(code, e));
            }
            say!("{shown} finished; nothing to resume (`rtune show {shown}` shows it)");
            return Ok(0);
        }
        // Unchanged, it would meet its mistake again at once.
        SweepState::Stopped(mistake) if corrected.is_none() => {
            let shown = dir.display();
            return Err(Exit(
                EXIT_INVALID,
                anyhow::anyhow!(
                    "{shown} stopped on a mistake in its settings: {mistake}\n  resuming it \
                     unchanged meets it again: fix the sweep file and run it as a new sweep \
                     (`rtune run FIXED.toml`), or `rtune resume {shown} --sweep FIXED.toml` \
                     where the fix changes nothing this sweep recorded"
                ),
            ));
        }
        SweepState::Interrupted | SweepState::Stopped(_) => {}
    }
    let (replacing, (file, spec)) = match corrected {
        Some((file, sets)) => {
            let (copy, spec) = replacement(dir, file, sets, registry)?;
            (Some(copy.clone()), (copy.file, spec))
        }
        None => (None, read_sweep(dir, registry)?),
    };
    let metrics = metrics_endpoint(&spec, output)?;
    // The experiment's lease before anything is said or written: a driver that lost it to
    // another (both resuming at once) is refused having done nothing.
    let tuner = Tuner::restore(dir, spec.trainer()).map_err(in_sweep_terms)?;
    if let Some(copy) = replacing {
        let json = serde_json::to_vec_pretty(&copy)?;
        rtune_driver::storage::atomic_write(&dir.join(SWEEP_FILE), &json)
            .map_err(|e| Exit(crate::exit::EXIT_FAILED, e.into()))?;
        say!("going on with {file} (it replaces the sweep file kept in {})", dir.display());
    }
    say!("resuming sweep {file} in {}", dir.display());
    let control = Control::new();
    let name = dir.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let run = target.run_config(&spec);
    let (run, screen) = reporting(run, &spec, output, metrics, &name, dir, &control);
    let began = Instant::now();
    let outcome = watch_signals(control.clone(), || {
        tuner.tune_config(spec.tune_config()).run_config(run).control(control.clone()).fit()
    });
    screen.close();
    finish(outcome, dir, output, began)
}

/// The registered trainable that `rtune run` swept in `dir`, if it was one.
pub(super) fn trainable(dir: &Path, registry: &Trainables) -> Option<String> {
    read_sweep(dir, registry).ok()?.1.builtin
}

/// `12 trials`, `1 trial`, or `trials until the time budget is spent`.
fn samples(trials: Option<u64>) -> String {
    match trials {
        None => "trials until the time budget is spent".into(),
        Some(1) => "1 trial".into(),
        Some(n) => format!("{n} trials"),
    }
}

/// How a running sweep is shown: the terminal UI on a terminal (unless `--no-tui`), else plain
/// progress lines; and to `rtune watch`, through the live stream whatever this terminal shows.
fn reporting(
    run: RunConfig,
    spec: &SweepSpec,
    output: &Output,
    metrics: Option<(MetricsServer, Monitor)>,
    name: &str,
    path: &Path,
    control: &Control,
) -> (RunConfig, Screen) {
    // The rest of what is shown (a resumed sweep's trials that ended included) comes with the
    // sweep's begin event.
    let model = ui::model::Model::new(name.to_owned(), path.to_owned(), Default::default());
    let mut run = run;
    if let Some((_, monitor)) = &metrics {
        // The trackers' backlogs (MLflow's) show at each scrape.
        monitor.follow_backlogs(&run.callbacks.0);
        run = run.callback(monitor.clone());
    }
    let metrics_address = metrics.as_ref().map(|(server, _)| server.address());
    // Watching is a convenience: a sweep runs on without it.
    let served =
        rtune_driver::runtime::Driver::get().map_err(anyhow::Error::from).and_then(|driver| {
            ui::stream::serve(
                path,
                model.clone(),
                control.clone(),
                driver.handle(),
                metrics_address,
            )
        });
    let server = match served {
        Ok((server, broadcast)) => {
            run = run.callback(ui::model::Following(broadcast));
            Some(server)
        }
        Err(e) => {
            tracing::warn!("no live stream for rtune watch ({e:#}); it reads the files instead");
            None
        }
    };
    let progress = ui::progress::Progress::new(std::io::stdout(), Duration::from_secs(5));
    let metrics = metrics.map(|(server, _)| server);
    // Local mode's train function prints to this terminal: plain lines, not a screen.
    if output.no_tui || spec.scaling.is_local() || !ui::tui::owns_terminal() {
        progress.know(model);
        let screen = Screen { ui: None, server, metrics };
        return (run.callback(ui::model::Following(progress)), screen);
    }
    let (feed, events) = ui::tui::Feed::new();
    let thread = ui::tui::live(model, events, control.clone(), progress);
    let screen = Screen { ui: Some((feed.clone(), thread)), server, metrics };
    (run.callback(ui::model::Following(feed)), screen)
}

/// The sweep's metrics endpoint, where `--metrics` or `[run] metrics` put it (else on loopback,
/// a free port), and its monitor, which follows the sweep. An address the user chose that
/// cannot be served is their mistake (exit 2, before anything runs); the default one failing
/// is said in the log, and the sweep runs without it.
fn metrics_endpoint(
    spec: &SweepSpec,
    output: &Output,
) -> Result<Option<(MetricsServer, Monitor)>, Exit> {
    let chosen = output
        .metrics
        .as_ref()
        .map(|a| ("--metrics", a))
        .or(spec.metrics.as_ref().map(|a| ("run.metrics", a)));
    let address = chosen.map_or(rtune_driver::monitor::DEFAULT_ADDRESS, |(_, a)| a.as_str());
    // On a cluster, the pool is the head's to show.
    let monitor = if spec.run.cluster.is_some() { Monitor::new(|| None) } else { Monitor::local() };
    let token = std::env::var(rtune_driver::config::TOKEN_ENV).ok();
    let served = rtune_driver::runtime::Driver::get().and_then(|driver| {
        rtune_driver::monitor::serve(monitor.clone(), address, token, driver.handle())
    });
    match (served, chosen) {
        (Ok(server), _) => Ok(Some((server, monitor))),
        (Err(rtune_driver::error::Error::Config { message, .. }), Some((key, _))) => {
            Err(Exit(EXIT_INVALID, anyhow::anyhow!("invalid `{key}`: {message}")))
        }
        (Err(e), _) => {
            tracing::warn!("no metrics endpoint for this sweep: {e}");
            Ok(None)
        }
    }
}

/// The live terminal UI, if one is shown, and the stream to `rtune watch`.
struct Screen {
    ui: Option<(ui::tui::Feed, std::thread::JoinHandle<()>)>,
    server: Option<ui::stream::Server>,
    /// The metrics endpoint, served until the sweep is over.
    metrics: Option<MetricsServer>,
}

impl Screen {
    /// The sweep is over: the UI gives the terminal back, the stream ends.
    fn close(self) {
        if let Some((feed, thread)) = self.ui {
            feed.end();
            let _ = thread.join();
        }
        drop(self.server);
        drop(self.metrics);
    }
}

/// Runs `sweep` while SIGINT and SIGTERM interrupt it: the first asks it to stop resumable, a
/// second ends the process at once (what is recorded stays recorded: every file rtune writes
/// is appended or replaced atomically).
fn watch_signals<T>(control: Control, sweep: impl FnOnce() -> T) -> T {
    use tokio::signal::unix::{SignalKind, signal};
    // The handlers are in place before the sweep starts; a thread waits on them.
    let handlers =
        tokio::runtime::Builder::new_current_thread().enable_all().build().and_then(|runtime| {
            let streams = runtime.block_on(async {
                Ok::<_, std::io::Error>((
                    signal(SignalKind::interrupt())?,
                    signal(SignalKind::terminate())?,
                ))
            })?;
            Ok((runtime, streams))
        });
    match handlers {
        Ok((runtime, (mut int, mut term))) => {
            std::thread::spawn(move || {
                runtime.block_on(async {
                    let mut asked = 0;
                    loop {
                        tokio::select! {
                            _ = int.recv() => {}
                            _ = term.recv() => {}
                        }
                        asked += 1;
                        if asked == 1 {
                            eprintln!(
                                "rtune: stopping the sweep, resumable (again to stop at once; \
                                 what is recorded is kept)"
                            );
                            control.interrupt();
                        } else {
                            eprintln!("rtune: stopped at once");
                            std::process::exit(EXIT_INTERRUPTED);
                        }
                    }
                })
            });
        }
        Err(e) => tracing::warn!("cannot watch for Ctrl-C: {e}"),
    }
    sweep()
}

/// Prints the results, writes the JSON summary, and picks the exit code.
fn finish(
    outcome: rtune_driver::error::Result<ResultGrid>,
    path: &Path,
    output: &Output,
    began: Instant,
) -> Result<i32, Exit> {
    // A sweep that ended with an error still shows (and summarises) what its files hold;
    // one refused because another driver runs it, nothing.
    let (grid, error) = match outcome {
        Ok(grid) => (grid, None),
        Err(e @ rtune_driver::error::Error::Held { .. }) => return Err(in_sweep_terms(e)),
        Err(e) => match ResultGrid::from_path(path) {
            Ok(grid) => (grid, Some(e)),
            Err(_) => return Err(in_sweep_terms(e)),
        },
    };
    say!("{}", inspect::trials_table(&grid, 10));
    for (key, trials) in grid.unread_params() {
        eprintln!(
            "rtune: warning: param `{key}` was never read by the train function ({trials} of {} \
             trials): a search over it changes nothing (check its name; [run] strict_params = \
             true makes this an error)",
            grid.trials.len()
        );
    }
    // A trial that ended without a result is as good as a failed one.
    let silent = grid
        .trials
        .iter()
        .filter(|t| t.status() == TrialStatus::Terminated && t.history().is_empty())
        .count();
    if silent > 0 {
        eprintln!(
            "rtune: warning: {silent} trial(s) ended without reporting a result (see `rtune show \
             {} TRIAL` and each trial's logs), counted as failed",
            path.display()
        );
    }
    let failed = grid.trials.iter().filter(|t| t.status() == TrialStatus::Error).count() + silent;
    if let Some(out) = &output.json {
        let summary = inspect::summary(&grid, began.elapsed().as_secs_f64());
        let text = serde_json::to_vec_pretty(&summary)?;
        std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
    }
    if let Some(e) = error {
        return Err(in_sweep_terms(e));
    }
    let feasible = grid.trials.iter().any(|t| grid.feasible(t));
    let reported = grid.trials.iter().any(|t| !t.history().is_empty());
    if !grid.constraints.is_empty() && !feasible && reported {
        eprintln!(
            "rtune: warning: no trial met the constraints ({}): the sweep has no best trial, and \
             `rtune export {} --best` refuses (export one with --trial ID)",
            grid.constraints_text(),
            path.display()
        );
    }
    let errors: Vec<String> =
        grid.errors().iter().filter_map(|t| t.error()).map(error_summary).collect();
    if errors.len() >= 2
        && errors.len() == grid.trials.len()
        && errors.iter().all(|e| *e == errors[0])
    {
        eprintln!("rtune: all {} trials failed the same way: {}", errors.len(), errors[0]);
    }
    if failed > 0 && !output.allow_failures {
        let how = if silent > 0 { "failed or never reported" } else { "failed" };
        eprintln!(
            "rtune: {failed} trial(s) {how} (see `rtune show {} TRIAL` and each trial's \
             error.txt); --allow-failures exits 0 anyway",
            path.display()
        );
        return Ok(EXIT_TRIALS_FAILED);
    }
    Ok(0)
}
