//! The sweep's shell: the async loop that feeds the controller its events and carries out
//! its commands, starts trials as tasks (`trial_task`), calls the callbacks, writes the
//! experiment's state snapshot (throttled) and answers `Control`.
//!
//! The shell is thin: trials run as tasks; each report of a trial is handed to the controller
//! (behind one lock, for the moment it takes) and its decision goes back to the workers in the
//! reply to that report; commands the shell carries out (starting trials, finishing) come back
//! to the loop through a channel. A paused trial (HyperBand) goes on in its own directory from
//! its latest checkpoint; a trial that exploits another (PBT) is paused, takes over the
//! source's latest checkpoint into its own directory, and goes on from it with its new params.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rtune_searchers::{Params, TrialId, TrialStatus};

use tokio::sync::mpsc;

use super::control::{Control, TrialRequest};
use super::controller::{Command, Controller, Event};
use super::experiment::{
    DRIVER_LOG, ERROR_FILE, EndedRows, FORMAT, RESULTS_PARQUET, SavedExperiment, SavedTrialRow,
    find_trial_dir, read_experiment, short_params, trial_dir_name,
};
use super::result_grid::ResultGrid;
pub(super) use super::snapshots::Snapshots;
use super::trial::{LiveTrial, TrialResult};
use super::trial_task::{Halt, Heard, Running, TrialTask};
use crate::callback::{Callback, ExperimentInfo, TrialInfo};
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::outcome::TrainResult;
use crate::record::read_run;
use crate::runtime::Driver;
use crate::storage::remote::Remote;
use crate::storage::sync::{Periodic, Syncer};
use crate::storage::unix_time;
use crate::train::TorchTrainer;

pub(super) struct Sweep {
    /// The experiment's lease: this driver's while the sweep runs, given back when it is
    /// dropped.
    pub(super) lease: super::lease::Lease,
    pub(super) trainer: TorchTrainer,
    pub(super) run: RunConfig,
    pub(super) path: PathBuf,
    pub(super) experiment: String,
    /// The sweep as callbacks are told it when it begins: its objectives and constraints, its
    /// space and settings, whether an earlier driver ran it, its trial count and trials' size
    /// (a restored sweep's ended trials are added then).
    pub(super) info: ExperimentInfo,
    pub(super) time_budget: Option<Duration>,
    /// Time spent by earlier drivers of a restored sweep.
    pub(super) spent_before: Duration,
    pub(super) began: Instant,
    pub(super) controller: Arc<Mutex<Controller>>,
    /// The trials started and not ended (see `retire`); their statuses are the controller's.
    pub(super) trials: BTreeMap<TrialId, LiveTrial>,
    /// The same trials as their tasks share them: where commands about them are carried out.
    pub(super) running: Running,
    /// The controller said the sweep is over.
    pub(super) finished: bool,
    /// The rows of the trials that ended.
    pub(super) ended: EndedRows,
    pub(super) snapshots: Snapshots,
    /// A trial reported since the last snapshot (set by the report path, taken by the loop).
    pub(super) reports_unsaved: Arc<AtomicBool>,
    pub(super) control: Control,
    /// Interrupted: the state file keeps the snapshot taken then; the trials are stopping.
    pub(super) frozen: bool,
    /// The scheduler status callbacks heard last.
    pub(super) shown_status: Option<rtune_searchers::SchedulerStatus>,
    /// When the scheduler's status was last looked at: at most once a second (it is asked for
    /// after every message the loop handles, reports included).
    pub(super) status_checked: Option<Instant>,
    /// The log said that only held trials are left (and nothing ran since).
    pub(super) held_hinted: bool,
    /// The params never read that the log has warned of.
    pub(super) unread_warned: std::collections::BTreeSet<String>,
    /// The controller's count of ended trials when idle ends were last looked for.
    pub(super) ended_seen: usize,
    /// What ends the sweep once its running trials stop (a callback that failed, a state file
    /// that cannot be written, the controller's error): the first such error, the sweep's.
    pub(super) fatal: Option<Error>,
}

impl Sweep {
    fn step(&self, event: Event) -> Result<Vec<Command>> {
        self.controller.lock().unwrap_or_else(|p| p.into_inner()).step(event)
    }

    /// Runs the sweep; one on an object store is mirrored there every `sync_period`, and once
    /// more at its end, whatever the end.
    pub(super) async fn run(&mut self, driver: &'static Driver) -> Result<ResultGrid> {
        let Some(remote) = Remote::of_run(&self.run) else { return self.run_here(driver).await };
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned());
        let remote = remote?.join(&name.unwrap_or_default());
        crate::storage::staging::mark(&self.path, &remote)?;
        super::experiment::prune_staging(&self.path);
        let syncer = Arc::new(tokio::sync::Mutex::new(Syncer::new(remote, self.path.clone())));
        let period = self.run.sync_period.max(Duration::from_millis(100));
        let passes = Periodic::start(syncer.clone(), period);
        let outcome = self.run_here(driver).await;
        passes.stop().await;
        let mut syncer = syncer.lock().await;
        match syncer.sync().await {
            Ok(_) => outcome,
            Err(e) => {
                let staged = self.path.display();
                tracing::error!("{e}; everything is in {staged}, which `rtune resume` takes");
                outcome.and(Err(e))
            }
        }
    }

    async fn run_here(&mut self, driver: &'static Driver) -> Result<ResultGrid> {
        let (heard_tx, mut heard) = mpsc::unbounded_channel::<Heard>();
        self.began = Instant::now();
        let log = self.path.join(DRIVER_LOG);
        let _log = crate::log::tee_to(&log).map_err(|e| Error::io(&log, e))?;
        tracing::info!("sweep {} in {}", self.experiment, self.path.display());
        let mut experiment = self.info.clone();
        if experiment.restored {
            // The trials that ended before this driver began, for the views to start from.
            match read_experiment(&self.path, &self.run, false) {
                Ok((_, trials)) => {
                    let ended = trials.into_values().filter(|t| t.status().is_finished());
                    experiment.ended_before = ended.map(TrialResult::into_ended).collect();
                }
                Err(e) => tracing::warn!("the views begin without the trials ended before: {e}"),
            }
        }
        self.call_back(|c| c.on_experiment_begin(&experiment));
        if let Some(e) = self.fatal.take() {
            // A callback that cannot begin (a tracker refusing its settings): nothing runs.
            return Err(e);
        }
        let begun = self.step(Event::Begin);
        self.carry_out(driver, begun, &heard_tx);
        let budget = self
            .time_budget
            .map(|b| tokio::time::Instant::now() + b.saturating_sub(self.spent_before));
        let mut budget_spent = false;
        // The controller says when the sweep is over (`Command::Finish`, carried out above or
        // in the loop): nothing runs then, and nothing more will.
        while !self.finished {
            if self.frozen && self.running.is_empty() {
                break;
            }
            let message = tokio::select! {
                message = heard.recv() => message.expect("the loop holds a sender"),
                _ = async { tokio::time::sleep_until(budget.expect("checked")).await },
                    if budget.is_some() && !budget_spent => {
                    budget_spent = true;
                    let spent = self.step(Event::TimeBudgetSpent);
                    self.carry_out(driver, spent, &heard_tx);
                    continue;
                }
                _ = crate::sys::sleep_until(self.snapshots.wake_at(!self.running.is_empty())),
                    if !self.frozen => {
                    if self.reports_unsaved.swap(false, Ordering::SeqCst) {
                        self.snapshots.dirty = true;
                    }
                    if self.snapshots.dirty {
                        self.save_state();
                    } else {
                        self.snapshots.checked = Instant::now();
                    }
                    continue;
                }
                asked = self.control.trial_requests(), if !self.frozen => {
                    for (request, trial_id) in asked {
                        self.on_request(driver, request, &trial_id, &heard_tx);
                    }
                    continue;
                }
                _ = self.control.wait(), if !self.frozen => {
                    self.freeze(true);
                    if self.running.is_empty() {
                        break;
                    }
                    continue;
                }
            };
            if self.frozen {
                // Only the running trials' ends matter now; they are not recorded as ended,
                // so that restore goes on with them from their latest checkpoints.
                if let Heard::Ended { trial, .. } = message {
                    self.running.remove(trial);
                }
                if self.running.is_empty() {
                    break;
                }
                continue;
            }
            match message {
                Heard::Command(command) => self.carry_out(driver, Ok(vec![command]), &heard_tx),
                Heard::Started(trial) => {
                    // PENDING until now: started by the controller, waiting for its resources.
                    if let Some(t) = self.trials.get_mut(&trial)
                        && !t.placed
                    {
                        t.placed = true;
                        let info = self.info(trial);
                        self.call_back(|c| c.on_trial_start(&info));
                    }
                }
                Heard::Reported { trial, metrics } => {
                    let info = self.info(trial);
                    self.call_back(|c| c.on_trial_result(&info, &metrics));
                }
                Heard::Ended { trial, halted, outcome } => {
                    let exploited = self.running.remove(trial);
                    let mut event = self.record_end(trial, halted, outcome);
                    if let Some(source) = exploited
                        && event == Event::TrialPaused(trial)
                        && let Err(e) = self.exploit(trial, source)
                    {
                        event = self.record_failure(trial, format!("PBT's exploit: {e}"));
                    }
                    // As the controller ends it (a pause it asked to stop at is an end), before
                    // what it does next (starting other trials) is carried out.
                    let error = match &event {
                        Event::TrialFailed { error, .. } => Some(error.clone()),
                        _ => None,
                    };
                    let after = self.step(event);
                    let info = self.info(trial);
                    let stopped = info.status == TrialStatus::Terminated && self.cut_short(trial);
                    let info = TrialInfo { stopped, ..info };
                    match (info.status, error) {
                        (TrialStatus::Paused, _) => {
                            self.call_back(|c| c.on_trial_pause(&info));
                        }
                        (_, Some(error)) => {
                            self.call_back(|c| c.on_trial_error(&info, &error));
                        }
                        // Paused, and at once resumed by the same step (its scheduler went on
                        // with it): a pause, not an end.
                        (status, None) if !status.is_finished() => {
                            let info = TrialInfo { status: TrialStatus::Paused, ..info };
                            self.call_back(|c| c.on_trial_pause(&info));
                        }
                        _ => self.call_back(|c| c.on_trial_complete(&info)),
                    }
                    self.carry_out(driver, after, &heard_tx);
                    if self.status(trial).is_finished() {
                        self.retire(trial);
                    }
                }
                Heard::Fatal(e) => self.abort(e),
            }
            self.settle_idle_ends();
            self.snapshots.dirty = true;
            if Instant::now() >= self.snapshots.due_at() {
                self.save_state();
            }
            self.show_scheduler(false);
            self.hint_if_only_held();
            if self.fatal.is_some() && self.running.is_empty() {
                break;
            }
        }
        if self.frozen {
            tracing::info!("sweep {} interrupted; it goes on with rtune resume", self.experiment);
            // The sweep is interrupted whatever a callback says of it.
            if let Some(error) = self.fatal.as_ref().map(|e| e.to_string())
                && let Err(e) = self.run.callbacks.each(|c| c.on_experiment_error(&error))
            {
                tracing::warn!("{e}");
            }
            if let Err(e) = self.run.callbacks.each(|c| c.on_experiment_interrupt()) {
                tracing::warn!("{e}");
            }
            let lost = self.lease.lost();
            return Err(lost
                .or(self.fatal.take())
                .unwrap_or_else(|| Error::Interrupted { path: self.path.clone() }));
        }
        self.save_state();
        // Every trial as the experiment's files hold it (the ended ones are in memory no more).
        let trials = match read_experiment(&self.path, &self.run, false) {
            Ok((_, trials)) => trials,
            Err(e) => return Err(self.fatal.take().unwrap_or(e)),
        };
        let grid = ResultGrid {
            path: self.path.clone(),
            objectives: self.info.objectives.clone(),
            constraints: self.info.constraints.clone(),
            checkpoint_score: self.checkpoint_score(),
            trials: trials.into_values().collect(),
        }
        .ranking_checkpoints();
        let count = |s: TrialStatus| grid.trials.iter().filter(|t| t.status == s).count();
        tracing::info!(
            "sweep {} ended: {} trials, {} terminated, {} errors{}",
            self.experiment,
            grid.trials.len(),
            count(TrialStatus::Terminated),
            count(TrialStatus::Error),
            self.fatal.as_ref().map(|e| format!("; stopped by: {e}")).unwrap_or_default()
        );
        self.show_scheduler(true);
        let infos: Vec<TrialInfo> = grid.trials.iter().map(trial_info).collect();
        if let Some(error) = self.fatal.as_ref().map(|e| e.to_string()) {
            self.call_back(|c| c.on_experiment_error(&error));
        }
        self.call_back(|c| c.on_experiment_end(&infos));
        if let Some(e) = self.fatal.take() {
            return Err(e);
        }
        grid.write_parquet(self.path.join(RESULTS_PARQUET))?;
        Ok(grid)
    }

    /// Says once (until something runs again) when only held trials are left: the sweep waits
    /// for someone to let one go, which a sweep without its view would never show.
    fn hint_if_only_held(&mut self) {
        let held = self.controller.lock().unwrap_or_else(|p| p.into_inner()).waiting_on_held();
        if held.is_empty() || self.frozen {
            self.held_hinted = false;
            return;
        }
        if !self.held_hinted {
            self.held_hinted = true;
            let ids: Vec<String> = held
                .iter()
                .map(|t| self.trials.get(t).map_or_else(|| t.0.to_string(), |t| t.trial_id.clone()))
                .collect();
            tracing::warn!(
                "only held trials are left ({}): the sweep waits until one is let go (p in \
                 `rtune watch {}`, or Control::resume_trial), or the sweep is stopped (Ctrl-C, \
                 or `rtune stop {}`)",
                ids.join(", "),
                self.path.display(),
                self.path.display()
            );
        }
    }

    /// Replaces `experiment_state.json` (atomically): every trial's status, params, directory,
    /// error and last result, and the controller's snapshot, as they are now.
    fn save_state(&mut self) {
        let began = Instant::now();
        // What it saves holds every report made until now.
        self.reports_unsaved.store(false, Ordering::SeqCst);
        let (trials, controller) = {
            let controller = self.controller.lock().unwrap_or_else(|p| p.into_inner());
            let trials: Vec<SavedTrialRow> = self
                .trials
                .iter()
                .map(|(&index, t)| SavedTrialRow::of(index, status_of(&controller, index, t), t))
                .collect();
            (trials, controller.snapshot())
        };
        let state = SavedExperiment {
            format: FORMAT,
            name: self.path.file_name().map(|n| n.to_string_lossy().into_owned()),
            experiment_id: self.experiment.clone(),
            objectives: self.info.objectives.clone(),
            constraints: self.info.constraints.clone(),
            checkpoint_score: self.checkpoint_score(),
            rtune_version: env!("CARGO_PKG_VERSION").to_owned(),
            timestamp: unix_time(),
            time_spent_s: (self.spent_before + self.began.elapsed()).as_secs_f64(),
            trials,
            controller,
            stopped_by: self.fatal.as_ref().filter(|e| e.is_mistake()).map(Error::in_sweep_terms),
        };
        if let Err(e) = state.write(&self.path, &self.ended) {
            self.fatal.get_or_insert(e);
        }
        let now = Instant::now();
        self.snapshots = Snapshots { dirty: false, last: now, cost: began.elapsed(), checked: now };
    }

    /// Interrupted: saves the state as it is now (the snapshot restore goes on from) and asks
    /// every running trial to stop; nothing new starts and nothing more is recorded.
    /// `said`: say so in the log (an interrupt; an abort says why itself).
    fn freeze(&mut self, said: bool) {
        // Asked first: an attempt that fails from here on (its workers killed with the sweep)
        // is seen as the run's stop, not retried, however long the state takes to save.
        self.running.ask_all(Halt::Pause);
        if said {
            let n = self.running.len();
            tracing::warn!("interrupted: stopping {n} running trial(s), resumable");
        }
        self.save_state();
        self.frozen = true;
    }

    /// A user's request about one trial (by id), handed to the controller.
    fn on_request(
        &mut self,
        driver: &'static Driver,
        request: TrialRequest,
        trial_id: &str,
        heard: &mpsc::UnboundedSender<Heard>,
    ) {
        let verb = request.verb();
        let Some((&id, _)) = self.trials.iter().find(|(_, t)| t.trial_id == trial_id) else {
            tracing::warn!("asked to {verb} trial {trial_id}, which this sweep does not have");
            return;
        };
        tracing::info!("trial {trial_id}: {verb} asked by the user");
        let event = match request {
            TrialRequest::Stop => Event::StopRequested(id),
            TrialRequest::Pause => Event::PauseRequested(id),
            TrialRequest::Resume => Event::ResumeRequested(id),
        };
        let commands = self.step(event);
        self.carry_out(driver, commands, heard);
    }

    /// Tells the callbacks the scheduler's status when it changed, at most once a second
    /// unless `now`.
    fn show_scheduler(&mut self, now: bool) {
        let due = self.status_checked.is_none_or(|at| at.elapsed().as_secs() >= 1);
        if !(now || due) {
            return;
        }
        self.status_checked = Some(Instant::now());
        let status = self.controller.lock().unwrap_or_else(|p| p.into_inner()).scheduler_status();
        if status.kind.is_empty() || self.shown_status.as_ref() == Some(&status) {
            return;
        }
        self.call_back(|c| c.on_scheduler_status(&status));
        self.shown_status = Some(status);
    }

    /// A trial not ended as callbacks see it.
    fn info(&self, trial: TrialId) -> TrialInfo {
        let t = &self.trials[&trial];
        TrialInfo {
            trial_id: t.trial_id.clone(),
            status: self.status(trial),
            params: t.params.clone(),
            path: t.path.clone(),
            stopped: false,
            checkpoint: None,
        }
    }

    /// `CheckpointConfig`'s score attribute and order, when the sweep's trials have one.
    fn checkpoint_score(&self) -> Option<(String, rtune_searchers::Mode)> {
        let config = &self.run.checkpoint_config;
        config.score_attribute.clone().map(|attribute| (attribute, config.score_order))
    }

    /// A started trial's status as the sweep shows it (see `status_of`).
    fn status(&self, trial: TrialId) -> TrialStatus {
        let controller = self.controller.lock().unwrap_or_else(|p| p.into_inner());
        match self.trials.get(&trial) {
            Some(t) => status_of(&controller, trial, t),
            None => controller.status(trial).unwrap_or(TrialStatus::Pending),
        }
    }

    /// An ended trial leaves memory: its row goes to the ones every snapshot copies from disk
    /// (its results are in its files already), so that a sweep of many trials stays as small
    /// as one of the trials still going.
    ///
    /// A row that cannot be written (a full disk) keeps the trial in memory, and in the
    /// snapshots, and ends the sweep.
    fn retire(&mut self, trial: TrialId) {
        let status = self.status(trial);
        let Some(t) = self.trials.get(&trial) else { return };
        match self.ended.push(&SavedTrialRow::of(trial, status, t)) {
            Ok(()) => drop(self.trials.remove(&trial)),
            Err(e) => drop(self.fatal.get_or_insert(Error::io(&self.path, e))),
        }
    }

    fn cut_short(&self, trial: TrialId) -> bool {
        self.controller.lock().unwrap_or_else(|p| p.into_inner()).cut_short(trial)
    }

    /// Trials the controller ended while they held no workers (paused ones a scheduler stops,
    /// waiting ones at fail-fast or the time budget): no task reports their end, so they are
    /// told to the callbacks and retired here, once the controller's count of ended trials
    /// moves.
    fn settle_idle_ends(&mut self) {
        let ended = self.controller.lock().unwrap_or_else(|p| p.into_inner()).ended_count();
        if ended == self.ended_seen {
            return;
        }
        self.ended_seen = ended;
        let idle: Vec<TrialId> = self
            .trials
            .keys()
            .copied()
            .filter(|&t| !self.running.contains(t) && self.status(t).is_finished())
            .collect();
        for trial in idle {
            let info = TrialInfo { stopped: self.cut_short(trial), ..self.info(trial) };
            self.call_back(|c| c.on_trial_complete(&info));
            self.retire(trial);
        }
    }

    /// Calls every callback with `f`; a failure ends the sweep once the running trials stop.
    fn call_back(&mut self, f: impl FnMut(&dyn Callback) -> Result<()>) {
        if let Err(e) = self.run.callbacks.each(f) {
            self.abort(e);
        }
    }

    /// Carries out the controller's commands, in order: those about running trials where
    /// every command is (`Running::dispatch`), then starting a trial or finishing the sweep,
    /// which only the shell does.
    fn carry_out(
        &mut self,
        driver: &'static Driver,
        commands: Result<Vec<Command>>,
        heard: &mpsc::UnboundedSender<Heard>,
    ) {
        let commands = match commands {
            Ok(commands) => commands,
            // The sweep's mistake (a metric no trial reports): the running trials stop.
            Err(e) => return self.abort(e),
        };
        for command in commands {
            match self.running.dispatch(command) {
                None => {}
                Some(Command::StartTrial { trial, params, resume }) => {
                    let new = !self.trials.contains_key(&trial);
                    // A sweep that is ending with an error starts no new trial (resumed, the
                    // sweep starts it afresh).
                    if new && self.fatal.is_some() {
                        continue;
                    }
                    self.start(driver, trial, params, resume, heard.clone(), self.fatal.is_some());
                    if new && self.trials.contains_key(&trial) {
                        let info = self.info(trial);
                        self.call_back(|c| c.on_trial_add(&info));
                    }
                }
                Some(Command::Finish) => self.finished = true,
                Some(other) => unreachable!("dispatch carries out {other:?}"),
            }
        }
    }

    /// Ends the sweep with `e`: as an interrupt does (the running trials stop resumably and
    /// are not recorded as ended: they are cut short, not finished), and the state file says
    /// why when `e` is a mistake in the settings, which resuming unchanged would meet again.
    fn abort(&mut self, e: Error) {
        if !self.frozen {
            // Said by whoever gets the sweep's error (the command line prints it); the log
            // keeps it with what it did.
            let (n, why) = (self.running.len(), e.in_sweep_terms());
            tracing::info!("stopping {n} running trial(s), cut short, resumable: {why}");
            self.fatal.get_or_insert(e);
            self.freeze(false);
        } else {
            self.fatal.get_or_insert(e);
        }
    }

    /// Starts trial `trial` as a task (see `trial_task`): a `TorchTrainer` run in its own
    /// directory whose every report goes to the controller. A resumed trial goes on in its
    /// directory, from its latest checkpoint. A trial started while the sweep is ending
    /// (`stopping`) is asked to stop at its first report.
    fn start(
        &mut self,
        driver: &'static Driver,
        trial: TrialId,
        sampled: Params,
        resume: bool,
        heard: mpsc::UnboundedSender<Heard>,
        stopping: bool,
    ) {
        // A trial the controller had started but the shell had not when the state was saved
        // (a killed or interrupted driver) has no files to go on from: it starts afresh.
        let resume = resume && self.trials.contains_key(&trial);
        let mut params = self.trainer.params().clone();
        for (key, value) in sampled.iter() {
            params.insert(key, value.clone());
        }
        let (trial_id, path) = match self.trials.get(&trial) {
            Some(t) => (t.trial_id.clone(), t.path.clone()),
            None => {
                let trial_id = format!("{}_{:05}", self.experiment, trial.0);
                (trial_id, self.path.join(trial_dir_name(&self.experiment, trial, &sampled)))
            }
        };
        let mut run = self.run.clone();
        run.name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        run.storage_path = Some(self.path.clone());
        let store_url = run.name.as_deref().and_then(|trial| self.trial_store_url(trial));
        let mut trainer = self
            .trainer
            .clone()
            .train_loop_config(params)
            .run_config(run)
            .for_trial(trial_id.clone())
            .store_url(store_url);
        if resume {
            trainer = trainer.picking_up();
        }
        let span = tracing::info_span!("trial", id = %trial_id);
        span.in_scope(|| {
            let how = if resume { "goes on" } else { "starts" };
            tracing::info!("{how} with {}", short_params(&sampled));
        });
        let bracket = self.controller.lock().unwrap_or_else(|p| p.into_inner()).bracket(trial);
        self.trials.insert(
            trial,
            LiveTrial {
                trial_id,
                params: sampled,
                path: path.clone(),
                bracket,
                // Running once its workers start (`Heard::Started`): it may wait for them.
                placed: false,
                result: None,
                error: None,
            },
        );
        let halt = self.running.insert(trial);
        if stopping {
            halt.ask(Halt::Stop);
        }
        let task = TrialTask {
            trial,
            trainer,
            path,
            halt,
            running: self.running.clone(),
            controller: self.controller.clone(),
            heard,
            with_callbacks: !self.run.callbacks.is_empty(),
            reports_unsaved: self.reports_unsaved.clone(),
        };
        task.spawn(driver, span);
    }

    /// Keeps what a trial's run returned; the controller's event for its end.
    fn record_end(&mut self, trial: TrialId, halted: Halt, outcome: Result<TrainResult>) -> Event {
        let event = self.keep_end(trial, halted, outcome);
        // Its history is in its files, where the sweep's `ResultGrid` is read from.
        let entry = self.trials.get_mut(&trial).expect("started trials are recorded");
        if let Some(result) = entry.result.as_mut() {
            result.metrics_history = Vec::new();
            // Said once per param: every trial would say the same (with strict_params, each
            // trial's error says it).
            let new: Vec<String> = result
                .unread_params
                .iter()
                .filter(|k| result.error.is_none() && !self.unread_warned.contains(*k))
                .cloned()
                .collect();
            if !new.is_empty() {
                let mut params = self.trainer.params().clone();
                for (key, value) in entry.params.iter() {
                    params.insert(key, value.clone());
                }
                tracing::warn!("{}", crate::train::unread_note(&new, &params));
                self.unread_warned.extend(new);
            }
        }
        event
    }

    /// Keeps what a trial's run returned, or why it failed, in its entry.
    fn keep_end(&mut self, trial: TrialId, halted: Halt, outcome: Result<TrainResult>) -> Event {
        let entry = self.trials.get_mut(&trial).expect("started trials are recorded");
        match outcome {
            Ok(result) => {
                entry.result = Some(result);
                match halted {
                    Halt::Pause => Event::TrialPaused(trial),
                    Halt::Stop => Event::TrialStopped(trial),
                    Halt::Go => Event::TrialCompleted(trial),
                }
            }
            Err(e) => {
                let error = match e {
                    Error::TrainingFailed(result) => {
                        let message = result.error.clone().unwrap_or_default();
                        entry.result = Some(*result);
                        message
                    }
                    other => other.to_string(),
                };
                self.record_failure(trial, error)
            }
        }
    }

    /// The trial failed for good with `error` (also written to its `error.txt`).
    fn record_failure(&mut self, trial: TrialId, error: String) -> Event {
        let entry = self.trials.get_mut(&trial).expect("started trials are recorded");
        entry.error = Some(error.clone());
        let _ = std::fs::write(entry.path.join(ERROR_FILE), &error);
        Event::TrialFailed { trial, error }
    }

    /// The directory of a started trial, looked for in the experiment directory when the trial
    /// has ended (and left memory): PBT's source may end between its choice and the exploit.
    fn dir_of(&self, trial: TrialId) -> Result<Option<PathBuf>> {
        match self.trials.get(&trial) {
            Some(t) => Ok(Some(t.path.clone())),
            None => find_trial_dir(&self.path, &self.experiment, trial),
        }
    }

    /// On an object store: the folder there of the trial whose directory is named `trial`,
    /// `<storage>/<experiment>/<trial>`.
    fn trial_store_url(&self, trial: &str) -> Option<String> {
        let (url, experiment) = self.run.store_url().zip(self.path.file_name())?;
        Some(format!("{}/{}/{trial}", url.trim_end_matches('/'), experiment.to_string_lossy()))
    }

    /// PBT's exploit of a paused `trial`: it takes over `source`'s latest recorded checkpoint
    /// (read from the source's files: it may still be running). A source without one leaves
    /// the trial its own state; it goes on with the new params either way.
    fn exploit(&mut self, trial: TrialId, source: TrialId) -> Result<()> {
        let (Some(from), Some(to)) = (self.dir_of(source)?, self.dir_of(trial)?) else {
            return Err(Error::Protocol(format!("exploit of {trial} from unknown {source}")));
        };
        match read_run(&from, &self.run)?.checkpoint {
            Some(checkpoint) => {
                let taken = crate::storage::checkpoint::exploit_into(&checkpoint, &to)?;
                let name = checkpoint.path().file_name().unwrap_or_default().to_string_lossy();
                tracing::info!("trial {trial} takes over trial {source}'s {name}");
                // On a store, the copy there is made inside the store, from the source's.
                let source_url = crate::storage::remote::uploaded_to(checkpoint.path());
                let trial_dir = to.file_name().unwrap_or_default().to_string_lossy();
                let target_url = self.trial_store_url(&trial_dir);
                if let (Some(store), Some(source_url), Some(target_url)) =
                    (Remote::of_run(&self.run), source_url, target_url)
                {
                    let target = store?.at(&target_url)?;
                    let exploited = taken.path().file_name().unwrap_or_default().to_string_lossy();
                    let copy = crate::storage::remote::blocking(async {
                        target.copy_folder(&target.at(&source_url)?, &exploited).await
                    })?;
                    crate::storage::remote::mark_uploaded(taken.path(), copy.url())?;
                    tracing::info!("copied {source_url} to {} in the store", copy.url());
                }
            }
            None => tracing::warn!(
                "trial {trial} was to take over trial {source}'s checkpoint, which has \
                 none yet; it goes on from its own with the new params"
            ),
        }
        Ok(())
    }
}

/// A started trial's status as the sweep shows it: the controller's, except that a trial the
/// controller runs is PENDING until its workers start (it waits for its resources).
fn status_of(controller: &Controller, trial: TrialId, t: &LiveTrial) -> TrialStatus {
    match controller.status(trial) {
        Some(TrialStatus::Running) if !t.placed => TrialStatus::Pending,
        Some(status) => status,
        None => TrialStatus::Pending,
    }
}

/// An ended trial, as the experiment's files hold it, as callbacks see it.
fn trial_info(t: &TrialResult) -> TrialInfo {
    TrialInfo {
        trial_id: t.trial_id.clone(),
        status: t.status,
        params: t.params.clone(),
        path: t.path.clone(),
        stopped: false,
        checkpoint: t.checkpoint().ok().map(|c| c.path().to_owned()),
    }
}
