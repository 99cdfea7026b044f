//! The Tuner's controller as a synchronous state machine: [`Controller::step`] takes one
//! [`Event`] (a fact: a trial started, reported, finished, failed, paused) and returns the
//! [`Command`]s the async shell must carry out (start, stop, pause a trial, clone a checkpoint
//! into it, end the sweep). It owns the trial table, one [`Trial`] per trial with one status,
//! and is the only code that calls the searcher and the scheduler, so their call contracts hold
//! by construction: `suggest` once per trial, results in order, exactly one completion.
//!
//! A trial that has ended (TERMINATED, ERROR) leaves the table and is kept as its status only:
//! what it reported is in its files, its params in the shell's rows. So a sweep of 10,000
//! trials holds no more than a sweep of the ones still going, and each step looks at those.
//!
//! No clocks, no I/O, no processes: unit tests drive it directly. The shell feeds it events as
//! they happen and is the one that waits for the resource pool, so a started trial may still be
//! waiting for its placement group; `max_concurrent_trials` bounds how many are started at once.

use std::collections::{BTreeMap, BTreeSet};

use rtune_searchers::{
    Decision, Metrics, Objectives, Params, SchedulerState, Searcher, SearcherState, Suggestion,
    TrialId, TrialScheduler, TrialStatus, TrialsView,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::setting::Setting;

/// What the controller needs to know of the sweep's settings.
#[derive(Debug, Clone)]
pub(crate) struct ControllerConfig {
    /// What to optimise: nothing, one metric and its mode, or several (a multi-objective
    /// sweep).
    pub objectives: Objectives,
    /// Metrics every result reports that must be <= 0 for its trial to be feasible.
    pub constraints: Vec<String>,
    /// How many trials to create; `None` until the searcher is finished (or the time budget,
    /// which the shell reports as [`Event::TimeBudgetSpent`]).
    pub num_samples: Option<usize>,
    /// At most this many trials started (running or waiting for resources) at once.
    pub max_concurrent_trials: usize,
    /// Stop the whole sweep at the first trial that fails for good (Ray's `fail_fast`).
    pub fail_fast: bool,
}

/// A fact the shell reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Start the sweep (or look again for trials to start).
    Begin,
    /// The trial reported a result (its workers wait for the reply to this event's commands).
    ResultReported { trial: TrialId, metrics: Metrics },
    /// The trial's train function returned on every worker.
    TrialCompleted(TrialId),
    /// The trial failed for good: its own `FailureConfig` retries are spent.
    TrialFailed { trial: TrialId, error: String },
    /// A trial the controller asked to stop has stopped.
    TrialStopped(TrialId),
    /// A trial the controller asked to pause has saved its checkpoint and released its resources.
    TrialPaused(TrialId),
    /// The sweep's `time_budget_s` ran out.
    TimeBudgetSpent,
    /// Someone (a UI, `Control::stop_trial`) asked to end the trial, as a scheduler could.
    StopRequested(TrialId),
    /// Someone asked to hold the trial: paused (from its checkpoint) and not started again
    /// until resumed.
    PauseRequested(TrialId),
    /// Someone asked to let a held trial run again.
    ResumeRequested(TrialId),
}

impl Event {
    /// The trial the event is about.
    fn trial(&self) -> Option<TrialId> {
        match *self {
            Event::Begin | Event::TimeBudgetSpent => None,
            Event::ResultReported { trial, .. }
            | Event::TrialFailed { trial, .. }
            | Event::TrialCompleted(trial)
            | Event::TrialStopped(trial)
            | Event::TrialPaused(trial)
            | Event::StopRequested(trial)
            | Event::PauseRequested(trial)
            | Event::ResumeRequested(trial) => Some(trial),
        }
    }
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Start (or, with `resume`, continue from its latest checkpoint) a trial with these params.
    StartTrial { trial: TrialId, params: Params, resume: bool },
    /// End the trial (the reporting one: answer its report with "stop").
    StopTrial(TrialId),
    /// Save a checkpoint, release the trial's resources, keep it for later.
    PauseTrial(TrialId),
    /// PBT: stop the trial (it reported), replace its state with `source`'s latest checkpoint,
    /// report it paused; it goes on from there with `params` when started again.
    Exploit { trial: TrialId, source: TrialId, params: Params },
    /// Nothing is running and nothing more will: the sweep is over.
    Finish,
}

/// What a trial reported, as far as the controller needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reported {
    pub count: u64,
    pub last: Option<Metrics>,
}

impl Reported {
    /// What a trial's results, in order, come to.
    pub fn of(results: Vec<Metrics>) -> Reported {
        Reported { count: results.len() as u64, last: results.into_iter().last() }
    }
}

/// One trial of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub status: TrialStatus,
    pub params: Params,
    /// How many results it reported, and the latest (the whole history is in the trial's
    /// files, and an ended trial keeps not even this: see the module docs).
    pub reported: Reported,
    /// Set while the controller waits for the shell to stop or pause it.
    pub stopping: bool,
    /// Its scheduler ended it while it was being paused: it ends when the pause is done.
    pub(crate) ends_when_paused: bool,
    /// Held by the user (`Control::pause_trial`): not started until resumed. Not saved: a
    /// restored sweep runs every trial.
    pub held: bool,
}

/// What [`Controller::snapshot`] saves: with the same settings, searcher and scheduler, enough
/// to go on after the driver died. Trials' results are not in it: they are on disk, in each
/// trial's `result.json`, and come back from there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ControllerState {
    pub searcher: SearcherState,
    pub scheduler: SchedulerState,
    /// The trials not ended (a state saved by an earlier rtune may list ended ones here too).
    pub trials: Vec<SavedTrial>,
    /// The ended trials' statuses.
    #[serde(default)]
    pub ended: Vec<(TrialId, TrialStatus)>,
    pub(crate) next_id: u64,
    pub(crate) no_more_trials: bool,
}

/// One trial of a [`ControllerState`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedTrial {
    pub id: TrialId,
    pub status: TrialStatus,
    pub params: Params,
    /// Why an ended trial failed, in states that listed ended trials here (a trial not ended
    /// has no error: this rtune writes none).
    pub error: Option<String>,
    /// A stop or pause was asked for and not yet carried out.
    pub stopping: bool,
}

/// See the module docs.
pub(crate) struct Controller {
    config: ControllerConfig,
    searcher: Box<dyn Searcher>,
    scheduler: Box<dyn TrialScheduler>,
    /// The trials not ended.
    trials: BTreeMap<TrialId, Trial>,
    /// The ended trials (see the module docs).
    ended: BTreeMap<TrialId, TrialStatus>,
    /// What the scheduler sees as an ended trial's params.
    no_params: Params,
    next_id: u64,
    /// The searcher said `Finished`, the samples are all created, or the budget is spent.
    no_more_trials: bool,
    /// The scheduler was told so (`on_no_more_trials`; again after a restore, which it takes
    /// as once).
    told_no_more_trials: bool,
    finished: bool,
    /// See [`cut_short`](Self::cut_short).
    cut_short: BTreeSet<TrialId>,
}

impl Controller {
    /// A controller for a sweep; validates the settings and hands the metric to the searcher
    /// and the scheduler.
    pub fn new(
        config: ControllerConfig,
        mut searcher: Box<dyn Searcher>,
        mut scheduler: Box<dyn TrialScheduler>,
    ) -> Result<Controller> {
        // Checked as the sweep's settings (`TuneSettings::check`).
        debug_assert!(config.max_concurrent_trials > 0 && config.num_samples != Some(0));
        searcher.validate()?;
        scheduler.validate()?;
        match config.objectives.as_slice() {
            [] => {}
            [one] => {
                searcher.set_metric(&one.metric, one.mode)?;
                scheduler.set_metric(&one.metric, one.mode)?;
            }
            several => {
                let refused = |field, kind: &str, e: rtune_searchers::Error| {
                    Error::config(field, format!("`{kind}`: {e}"))
                };
                searcher
                    .set_objectives(several)
                    .map_err(|e| refused(Setting::SearchAlg, searcher.save_state().kind(), e))?;
                scheduler
                    .set_objectives(several)
                    .map_err(|e| refused(Setting::Scheduler, scheduler.save_state().kind(), e))?;
            }
        }
        if !config.constraints.is_empty() {
            searcher.set_constraints(&config.constraints).map_err(|e| {
                Error::config(
                    Setting::SearchAlg,
                    format!("`{}`: {e}", searcher.save_state().kind()),
                )
            })?;
        }
        Ok(Controller {
            config,
            searcher,
            scheduler,
            trials: BTreeMap::new(),
            ended: BTreeMap::new(),
            no_params: Params::new(),
            next_id: 0,
            no_more_trials: false,
            told_no_more_trials: false,
            finished: false,
            cut_short: BTreeSet::new(),
        })
    }

    /// The evolving part of the sweep: searcher, scheduler, trial table.
    pub fn snapshot(&self) -> ControllerState {
        ControllerState {
            searcher: self.searcher.save_state(),
            scheduler: self.scheduler.save_state(),
            trials: self
                .trials
                .iter()
                .map(|(&id, t)| SavedTrial {
                    id,
                    status: t.status,
                    params: t.params.clone(),
                    error: None,
                    stopping: t.stopping,
                })
                .collect(),
            ended: self.ended.iter().map(|(&id, &status)| (id, status)).collect(),
            next_id: self.next_id,
            no_more_trials: self.no_more_trials,
        }
    }

    /// A controller that goes on from `state` (with the settings, searcher and scheduler of the
    /// sweep that saved it). `reported(id)` gives what a trial reported as its files hold it, up
    /// to where it will go on from. Trials that were running go on from their checkpoints, as
    /// paused ones do; one whose stop was asked for but not carried out ends now, as the
    /// scheduler decided.
    pub fn restore(
        config: ControllerConfig,
        searcher: Box<dyn Searcher>,
        scheduler: Box<dyn TrialScheduler>,
        state: ControllerState,
        mut reported: impl FnMut(TrialId) -> Result<Reported>,
    ) -> Result<Controller> {
        let mut c = Controller::new(config, searcher, scheduler)?;
        c.searcher.restore_state(state.searcher)?;
        c.scheduler.restore_state(state.scheduler)?;
        c.next_id = state.next_id;
        c.no_more_trials = state.no_more_trials;
        c.ended.extend(state.ended);
        let mut stopped = Vec::new();
        for saved in state.trials {
            if saved.status.is_finished() {
                c.ended.insert(saved.id, saved.status);
                continue;
            }
            let status = match saved.status {
                TrialStatus::Running if saved.stopping => {
                    stopped.push(saved.id);
                    TrialStatus::Running
                }
                TrialStatus::Running | TrialStatus::Interrupted => TrialStatus::Paused,
                other => other,
            };
            let trial = Trial {
                status,
                params: saved.params,
                reported: reported(saved.id)?,
                stopping: false,
                ends_when_paused: false,
                held: false,
            };
            c.trials.insert(saved.id, trial);
        }
        for id in stopped {
            let last = c.trial(id)?.reported.last.clone();
            c.end(id, TrialStatus::Terminated, None, last.as_ref())?;
        }
        Ok(c)
    }

    /// The trials not ended.
    #[cfg(test)]
    pub(crate) fn trials(&self) -> &BTreeMap<TrialId, Trial> {
        &self.trials
    }

    /// A trial's status, ended or not; `None` for one never created.
    pub fn status(&self, id: TrialId) -> Option<TrialStatus> {
        self.trials.get(&id).map(|t| t.status).or_else(|| self.ended.get(&id).copied())
    }

    /// Whether the sweep stopped trial `id` before it was done: a scheduler's stop short of
    /// its budget, a stop asked for, fail-fast or the time budget (not kept in the state: a
    /// restored sweep decides again).
    pub(crate) fn cut_short(&self, id: TrialId) -> bool {
        self.cut_short.contains(&id)
    }

    /// How many trials have ended.
    pub(crate) fn ended_count(&self) -> usize {
        self.ended.len()
    }

    /// How many trials were created.
    #[cfg(test)]
    pub(crate) fn created(&self) -> u64 {
        self.next_id
    }

    /// Whether the sweep is over (`Finish` was returned).
    #[cfg(test)]
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// The bracket the scheduler put `trial` in (ASHA, HyperBand), shown with its results.
    pub fn bracket(&self, trial: TrialId) -> Option<usize> {
        self.scheduler.bracket(trial)
    }

    /// The scheduler's decisions so far, for people watching.
    pub(crate) fn scheduler_status(&self) -> rtune_searchers::SchedulerStatus {
        self.scheduler.status()
    }

    /// Handles one event. An `Err` is a mistake the sweep cannot go on with (a metric the
    /// trials never report, a scheduler that refuses its settings); the shell stops everything.
    pub fn step(&mut self, event: Event) -> Result<Vec<Command>> {
        let mut commands = Vec::new();
        match event {
            Event::Begin => {}
            event if event.trial().is_some_and(|id| !self.trials.contains_key(&id)) => {
                let id = event.trial().expect("matched");
                if !self.ended.contains_key(&id) {
                    return Err(unknown(id));
                }
                // An ended trial stays as it was; a report racing its stop is told again.
                if let Event::ResultReported { .. } = event {
                    commands.push(Command::StopTrial(id));
                }
            }
            Event::ResultReported { trial, metrics } => {
                self.on_result(trial, metrics, &mut commands)?
            }
            Event::TrialCompleted(trial) => {
                let last = self.trial(trial)?.reported.last.clone();
                self.end(trial, TrialStatus::Terminated, None, last.as_ref())?;
            }
            Event::TrialFailed { trial, error } => {
                self.end(trial, TrialStatus::Error, Some(error), None)?;
                if self.config.fail_fast {
                    self.no_more_trials = true;
                    self.stop_all(&mut commands);
                }
            }
            Event::TrialStopped(trial) => {
                let last = self.trial(trial)?.reported.last.clone();
                self.end(trial, TrialStatus::Terminated, None, last.as_ref())?;
            }
            Event::TrialPaused(trial) => {
                let t = self.trial_mut(trial)?;
                if t.ends_when_paused {
                    let last = t.reported.last.clone();
                    self.end(trial, TrialStatus::Terminated, None, last.as_ref())?;
                } else {
                    t.status = TrialStatus::Paused;
                    t.stopping = false;
                }
            }
            Event::TimeBudgetSpent => {
                self.no_more_trials = true;
                self.stop_all(&mut commands);
            }
            Event::StopRequested(trial) => {
                self.trial(trial)?;
                self.stop_one(trial, &mut commands)?;
            }
            Event::PauseRequested(trial) => {
                let t = self.trial_mut(trial)?;
                t.held = true;
                if t.status == TrialStatus::Running && !t.stopping {
                    t.stopping = true;
                    commands.push(Command::PauseTrial(trial));
                }
            }
            Event::ResumeRequested(trial) => self.trial_mut(trial)?.held = false,
        }
        self.fill(&mut commands)?;
        if !self.finished && self.no_more_trials && self.trials.is_empty() {
            self.finished = true;
            commands.push(Command::Finish);
        }
        let held = self.trials.values().any(|t| t.held);
        if !self.finished && self.started() == 0 && !held {
            // Nothing runs, so no event will come: waiting would hang the sweep for good.
            let waiting: Vec<String> =
                self.trials.iter().map(|(id, t)| format!("{id} ({:?})", t.status)).collect();
            return Err(Error::Protocol(format!(
                "the sweep cannot go on: no trial runs, and neither the scheduler nor the searcher \
                 starts another (waiting: {})",
                if waiting.is_empty() { "none".into() } else { waiting.join(", ") }
            )));
        }
        Ok(commands)
    }

    fn trial(&self, id: TrialId) -> Result<&Trial> {
        self.trials.get(&id).ok_or_else(|| unknown(id))
    }

    fn trial_mut(&mut self, id: TrialId) -> Result<&mut Trial> {
        self.trials.get_mut(&id).ok_or_else(|| unknown(id))
    }

    fn started(&self) -> usize {
        self.trials.values().filter(|t| t.status == TrialStatus::Running).count()
    }

    /// Whether running elastic trial `trial` (of at most `max_ranks`) may take more of the
    /// pool: every started trial holds its resources (`placed` of them do), none is waiting
    /// (pending or paused) and the searcher has no more to give, since waiting trials come
    /// before growth; and of the running trials below `max_ranks` (and `trial`, placing its
    /// group), `trial` is the one furthest along (the highest `training_iteration`, ASHA's highest rung; the first made on a tie).
    pub(crate) fn room_for_growth(&self, trial: TrialId, placed: usize, max_ranks: usize) -> bool {
        let all_made = self.no_more_trials
            || self.config.num_samples.is_some_and(|n| self.trials.len() + self.ended.len() >= n);
        let waiting = self
            .trials
            .values()
            .any(|t| matches!(t.status, TrialStatus::Pending | TrialStatus::Paused));
        if self.finished || placed < self.started() || !all_made || waiting {
            return false;
        }
        let last = |t: &Trial, key: &str| {
            t.reported.last.as_ref().and_then(|m| m.get(key)).copied().unwrap_or(0.0)
        };
        // The one asking is placing its group, whatever size its last report says (a resumed
        // trial's is its group's before the resume).
        let first = self
            .trials
            .iter()
            .filter(|(_, t)| t.status == TrialStatus::Running)
            .filter(|(id, t)| **id == trial || last(t, "world_size") < max_ranks as f64)
            .max_by(|(a, x), (b, y)| {
                let (x, y) = (last(x, "training_iteration"), last(y, "training_iteration"));
                x.total_cmp(&y).then(b.cmp(a))
            });
        first.is_some_and(|(id, _)| *id == trial)
    }

    /// The held trials, when nothing else runs: the sweep waits for one to be let go.
    pub(crate) fn waiting_on_held(&self) -> Vec<TrialId> {
        if self.finished || self.started() > 0 {
            return Vec::new();
        }
        self.trials.iter().filter(|(_, t)| t.held).map(|(id, _)| *id).collect()
    }

    /// Starts trials while there is room: the scheduler's choice among pending and paused
    /// trials first, else a new one from the searcher (all of them at once for a scheduler that
    /// time-shares the slots).
    fn fill(&mut self, commands: &mut Vec<Command>) -> Result<()> {
        // A scheduler that time-shares the slots (PBT) gets its whole population now, waiting
        // as PENDING: it pauses running trials and runs waiting ones in their place.
        if self.scheduler.time_shares() && self.config.num_samples.is_some() {
            while !self.no_more_trials && self.create_trial()? {}
        }
        loop {
            let not_now = self.start_trials(commands)?;
            // No trial will come (none at all, or none before one ends while none runs: a
            // concurrency limit): the scheduler, told once, may run what waited for more (its
            // stops come out of its stop requests).
            let stuck = not_now && self.started() == 0;
            if self.told_no_more_trials || !(self.no_more_trials || stuck) {
                return Ok(());
            }
            self.told_no_more_trials = true;
            self.scheduler.on_no_more_trials();
            for other in self.scheduler.take_stop_requests() {
                self.stop_one(other, commands)?;
            }
        }
    }

    /// Starts the scheduler's choices while there is room, else new trials from the searcher;
    /// whether the searcher had none now (`NotNow`) when asked.
    fn start_trials(&mut self, commands: &mut Vec<Command>) -> Result<bool> {
        while self.started() < self.config.max_concurrent_trials {
            let view = Runnable(View::of(&self.trials, &self.ended, &self.no_params));
            if let Some(id) = self.scheduler.choose_trial_to_run(&view) {
                let status = self.status(id);
                if !matches!(status, Some(TrialStatus::Pending | TrialStatus::Paused)) {
                    return Err(Error::Protocol(format!(
                        "the scheduler chose trial {id}, which is {status:?}"
                    )));
                }
                let trial = self.trial_mut(id)?;
                let resume = trial.status == TrialStatus::Paused;
                trial.status = TrialStatus::Running;
                commands.push(Command::StartTrial {
                    trial: id,
                    params: trial.params.clone(),
                    resume,
                });
                continue;
            }
            // A pending trial the scheduler declines to run waits for its turn (HyperBand's
            // rounds); creating more behind it would only run ahead of the scheduler.
            let waiting = self.trials.values().any(|t| t.status == TrialStatus::Pending && !t.held);
            if waiting || self.no_more_trials {
                break;
            }
            if !self.create_trial()? {
                return Ok(!self.no_more_trials);
            }
        }
        Ok(false)
    }

    /// Asks the searcher for a new trial; false when it has none now.
    fn create_trial(&mut self) -> Result<bool> {
        if self.config.num_samples.is_some_and(|n| self.trials.len() + self.ended.len() >= n) {
            self.no_more_trials = true;
            return Ok(false);
        }
        let id = TrialId(self.next_id);
        match self.searcher.suggest(id)? {
            Suggestion::Params(params) => {
                self.next_id += 1;
                let trial = Trial {
                    status: TrialStatus::Pending,
                    params,
                    reported: Reported::default(),
                    stopping: false,
                    ends_when_paused: false,
                    held: false,
                };
                self.trials.insert(id, trial);
                let view = View::of(&self.trials, &self.ended, &self.no_params);
                self.scheduler.on_trial_add(&view, id)?;
                Ok(true)
            }
            Suggestion::NotNow => Ok(false),
            Suggestion::Finished => {
                self.no_more_trials = true;
                Ok(false)
            }
        }
    }

    fn on_result(
        &mut self,
        id: TrialId,
        metrics: Metrics,
        commands: &mut Vec<Command>,
    ) -> Result<()> {
        let trial = self.trial(id)?;
        if trial.status != TrialStatus::Running || trial.stopping {
            // A report racing with the stop or pause already asked for: tell it again.
            commands.push(Command::StopTrial(id));
            return Ok(());
        }
        let wanted = self.config.objectives.as_slice().iter().map(|o| (o.metric.as_str(), false));
        let mut wanted = wanted.chain(self.config.constraints.iter().map(|c| (c.as_str(), true)));
        if let Some((name, constraint)) = wanted.find(|(m, _)| !metrics.contains_key(*m)) {
            // The trial's own metrics first, then rtune's.
            let mut reported: Vec<&str> = metrics.keys().map(String::as_str).collect();
            reported.sort_by_key(|m| crate::metrics::added_by_rtune(m));
            let field = match (constraint, self.config.objectives.len()) {
                (true, _) => Setting::Constraints,
                (false, 1) => Setting::Metric,
                _ => Setting::Objectives,
            };
            let hint = crate::config::nearest(name, &reported)
                .map_or_else(String::new, |m| format!("did you mean `{m}`? Else "));
            return Err(Error::config(
                field,
                format!(
                    "names `{name}`, which is not among the metrics a trial reported ({}): \
                     {hint}name one it reports, or have the trainable report `{name}`",
                    reported.join(", ")
                ),
            ));
        }
        let reported = &mut self.trial_mut(id)?.reported;
        reported.count += 1;
        reported.last = Some(metrics);
        // The table holds the result now (the scheduler sees it there too): lent, not copied.
        let metrics = self.trials[&id].reported.last.as_ref().expect("set above");
        self.searcher.on_trial_result(id, metrics)?;
        let view = View::of(&self.trials, &self.ended, &self.no_params);
        let decision = self.scheduler.on_trial_result(&view, id, metrics)?;
        let budget_reached = self.scheduler.budget_reached(metrics);
        match decision {
            Decision::Continue => {}
            Decision::Stop => {
                if !budget_reached {
                    self.cut_short.insert(id);
                }
                self.ask_stop(id, commands)
            }
            Decision::Pause => {
                self.trial_mut(id)?.stopping = true;
                commands.push(Command::PauseTrial(id));
            }
            Decision::Exploit { source, new_params } => {
                // Carried out like a pause: the trial stops, takes over the source's
                // checkpoint, and goes on from it with the new params when started again.
                let trial = self.trial_mut(id)?;
                trial.params = new_params.clone();
                trial.stopping = true;
                commands.push(Command::Exploit { trial: id, source, params: new_params });
            }
        }
        for other in self.scheduler.take_stop_requests() {
            self.stop_one(other, commands)?;
        }
        Ok(())
    }

    /// Ends trial `id` whatever it is doing (a scheduler's request about another trial, the
    /// user's): a waiting one at once, a running one once it has stopped.
    fn stop_one(&mut self, id: TrialId, commands: &mut Vec<Command>) -> Result<()> {
        self.cut_short.insert(id);
        match self.trials.get(&id).map(|t| t.status) {
            // A paused or pending trial holds nothing: it ends here.
            Some(TrialStatus::Paused | TrialStatus::Pending) => {
                let last = self.trial(id)?.reported.last.clone();
                self.end(id, TrialStatus::Terminated, None, last.as_ref())?;
            }
            // Being paused (it reported a pause an instant ago): it ends once it has.
            Some(TrialStatus::Running) if self.trials[&id].stopping => {
                self.trial_mut(id)?.ends_when_paused = true;
            }
            Some(TrialStatus::Running) => self.ask_stop(id, commands),
            _ => {}
        }
        Ok(())
    }

    fn ask_stop(&mut self, id: TrialId, commands: &mut Vec<Command>) {
        if let Some(t) = self.trials.get_mut(&id)
            && !t.stopping
        {
            t.stopping = true;
            commands.push(Command::StopTrial(id));
        }
    }

    /// Stops every running trial and ends every waiting one (fail-fast, budget spent).
    fn stop_all(&mut self, commands: &mut Vec<Command>) {
        let ids: Vec<(TrialId, TrialStatus)> =
            self.trials.iter().map(|(id, t)| (*id, t.status)).collect();
        for (id, status) in ids {
            if !status.is_finished() {
                self.cut_short.insert(id);
            }
            match status {
                TrialStatus::Running => self.ask_stop(id, commands),
                TrialStatus::Pending | TrialStatus::Paused => {
                    let last = self.trials[&id].reported.last.clone();
                    // Ending a trial the scheduler knows of: it is told, like any other end.
                    let _ = self.end(id, TrialStatus::Terminated, None, last.as_ref());
                }
                _ => {}
            }
        }
    }

    /// A trial ends for good: its status, and the searcher's and scheduler's completion call.
    fn end(
        &mut self,
        id: TrialId,
        status: TrialStatus,
        error: Option<String>,
        last: Option<&Metrics>,
    ) -> Result<()> {
        let trial = self.trial_mut(id)?;
        trial.status = status;
        trial.stopping = false;
        let failed = error.is_some();
        self.searcher.on_trial_complete(id, if failed { None } else { last }, failed)?;
        let view = View::of(&self.trials, &self.ended, &self.no_params);
        self.scheduler.on_trial_complete(&view, id, last, failed)?;
        self.trials.remove(&id);
        self.ended.insert(id, status);
        Ok(())
    }
}

fn unknown(id: TrialId) -> Error {
    Error::Protocol(format!("event for trial {id}, which the controller never created"))
}

/// The table as the scheduler sees it: read-only. `get` answers for every trial, an ended
/// one with its status only (no params, no result); `iter` goes over the trials not ended (see
/// [`TrialsView::iter`]).
#[derive(Clone, Copy)]
struct View<'a> {
    trials: &'a BTreeMap<TrialId, Trial>,
    ended: &'a BTreeMap<TrialId, TrialStatus>,
    no_params: &'a Params,
}

impl<'a> View<'a> {
    fn of(
        trials: &'a BTreeMap<TrialId, Trial>,
        ended: &'a BTreeMap<TrialId, TrialStatus>,
        no_params: &'a Params,
    ) -> Self {
        View { trials, ended, no_params }
    }
}

/// The table as the scheduler sees it when choosing what to run: without held trials.
struct Runnable<'a>(View<'a>);

impl TrialsView for Runnable<'_> {
    fn get(&self, id: TrialId) -> Option<rtune_searchers::TrialInfo<'_>> {
        match self.0.trials.get(&id) {
            Some(t) if t.held => None,
            _ => self.0.get(id),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = rtune_searchers::TrialInfo<'_>> + '_> {
        Box::new(self.0.trials.iter().filter(|(_, t)| !t.held).map(|(id, t)| info(*id, t)))
    }
}

impl TrialsView for View<'_> {
    fn get(&self, id: TrialId) -> Option<rtune_searchers::TrialInfo<'_>> {
        match self.trials.get(&id) {
            Some(t) => Some(info(id, t)),
            None => self.ended.get(&id).map(|&status| rtune_searchers::TrialInfo {
                id,
                status,
                last_result: None,
                params: self.no_params,
            }),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = rtune_searchers::TrialInfo<'_>> + '_> {
        Box::new(self.trials.iter().map(|(id, t)| info(*id, t)))
    }
}

fn info(id: TrialId, t: &Trial) -> rtune_searchers::TrialInfo<'_> {
    rtune_searchers::TrialInfo {
        id,
        status: t.status,
        last_result: t.reported.last.as_ref(),
        params: &t.params,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rtune_searchers::{
        Asha, BasicVariant, ConcurrencyLimiter, Domain, Fifo, SearchSpace, grid_search,
    };

    use super::*;
    use rtune_searchers::Mode;

    fn space() -> SearchSpace {
        SearchSpace::new().add("quality", Domain::Uniform { low: 0.0, high: 1.0 })
    }

    fn config(num_samples: usize, max_concurrent_trials: usize) -> ControllerConfig {
        ControllerConfig {
            objectives: Objectives::one("score", Mode::Max),
            constraints: Vec::new(),
            num_samples: Some(num_samples),
            max_concurrent_trials,
            fail_fast: false,
        }
    }

    fn random(n: u64) -> Box<dyn Searcher> {
        Box::new(BasicVariant::new(space()).unwrap().num_samples(n).seed(5))
    }

    /// What the simulated shell saw.
    #[derive(Default)]
    struct Run {
        most_started: usize,
        stop_commands: usize,
        pauses: usize,
        resumes: usize,
        /// (trial, source, params) of every exploit.
        exploits: Vec<(TrialId, TrialId, Params)>,
        /// Every started trial's params, as its latest start gave them.
        params: BTreeMap<TrialId, Params>,
        /// How many results each trial reported.
        reports: BTreeMap<TrialId, u64>,
    }

    impl Run {
        /// The params of the trials started, in id order.
        fn params(&self) -> Vec<Params> {
            self.params.values().cloned().collect()
        }

        /// The best trial by its `quality` param, and how many results it reported.
        fn best(&self) -> (TrialId, u64) {
            let quality = |id: &TrialId| self.params[id].get::<f64>("quality").unwrap();
            let best =
                *self.params.keys().max_by(|a, b| quality(a).total_cmp(&quality(b))).unwrap();
            (best, self.reports[&best])
        }
    }

    /// A shell without processes: started trials report in turn (`score` = quality ×
    /// iteration, one result per step) until `max_t`, failing when `fails` says so; every
    /// command is carried out at once.
    fn simulate(
        c: &mut Controller,
        max_t: u64,
        fails: impl Fn(TrialId, u64) -> bool,
    ) -> Result<Run> {
        let (run, finished) = simulate_steps(c, max_t, fails, 100_000)?;
        assert!(finished, "the simulated sweep never finished");
        Ok(run)
    }

    /// `simulate` for at most `steps` reports; and whether the sweep is over by then.
    fn simulate_steps(
        c: &mut Controller,
        max_t: u64,
        fails: impl Fn(TrialId, u64) -> bool,
        steps: usize,
    ) -> Result<(Run, bool)> {
        let mut run = Run::default();
        let mut running: BTreeMap<TrialId, u64> = BTreeMap::new();
        let mut queue = c.step(Event::Begin)?;
        for _ in 0..steps {
            while let Some(command) = queue.pop() {
                match command {
                    Command::StartTrial { trial, resume, params } => {
                        run.resumes += usize::from(resume);
                        run.params.insert(trial, params);
                        let done = if resume { c.trials()[&trial].reported.count } else { 0 };
                        assert!(running.insert(trial, done).is_none(), "{trial} started twice");
                    }
                    Command::StopTrial(trial) => {
                        run.stop_commands += 1;
                        running.remove(&trial);
                        queue.extend(c.step(Event::TrialStopped(trial))?);
                    }
                    Command::PauseTrial(trial) => {
                        run.pauses += 1;
                        running.remove(&trial);
                        queue.extend(c.step(Event::TrialPaused(trial))?);
                    }
                    Command::Exploit { trial, source, params } => {
                        run.exploits.push((trial, source, params));
                        running.remove(&trial);
                        queue.extend(c.step(Event::TrialPaused(trial))?);
                    }
                    Command::Finish => return Ok((run, true)),
                }
            }
            run.most_started = run.most_started.max(running.len());
            // The running trial with the fewest results reports next.
            let Some((&trial, &done)) = running.iter().min_by_key(|(id, done)| (**done, **id))
            else {
                panic!("nothing runs and the controller did not finish");
            };
            let iteration = done + 1;
            if fails(trial, iteration) {
                running.remove(&trial);
                let error = format!("trial {trial} crashed at {iteration}");
                queue = c.step(Event::TrialFailed { trial, error })?;
                continue;
            }
            let quality = run.params[&trial].get::<f64>("quality").unwrap();
            let metrics = Metrics::from([
                ("training_iteration".to_string(), iteration as f64),
                ("score".to_string(), quality * iteration as f64),
            ]);
            running.insert(trial, iteration);
            *run.reports.entry(trial).or_default() += 1;
            queue = c.step(Event::ResultReported { trial, metrics })?;
            if iteration == max_t && running.contains_key(&trial) {
                running.remove(&trial);
                queue.extend(c.step(Event::TrialCompleted(trial))?);
            }
        }
        Ok((run, false))
    }

    /// Every created trial's status, in id order.
    fn statuses(c: &Controller) -> Vec<TrialStatus> {
        (0..c.created()).map(|id| c.status(TrialId(id)).unwrap()).collect()
    }

    #[test]
    fn fifty_trials_never_exceed_the_concurrency_limit() {
        let mut c = Controller::new(config(50, 4), random(50), Box::new(Fifo::new())).unwrap();
        let run = simulate(&mut c, 3, |_, _| false).unwrap();
        assert_eq!(run.most_started, 4);
        assert_eq!(statuses(&c), vec![TrialStatus::Terminated; 50]);
        assert!(c.trials().is_empty(), "ended trials leave the table");
        assert!(run.reports.len() == 50 && run.reports.values().all(|&n| n == 3));
        assert!(c.is_finished());
    }

    #[test]
    fn asha_stops_the_poor_trials_early() {
        let asha = Asha::new().max_t(9).grace_period(1).reduction_factor(3).seed(1);
        let mut c = Controller::new(config(27, 27), random(27), Box::new(asha)).unwrap();
        let run = simulate(&mut c, 9, |_, _| false).unwrap();
        let lengths: Vec<u64> = run.reports.values().copied().collect();
        assert!(run.stop_commands > 0 && lengths.iter().any(|&n| n < 9), "{lengths:?}");
        assert_eq!(run.best().1, 9, "the best trial runs to max_t");
        assert_eq!(statuses(&c), vec![TrialStatus::Terminated; 27]);
    }

    /// PBT's exploit: a bottom trial takes a top trial's checkpoint (the shell's part) and goes
    /// on with the new params, which the table records.
    #[test]
    fn pbt_exploits_carry_the_source_and_the_new_params() {
        let pbt = rtune_searchers::Pbt::new()
            .time_attr("training_iteration")
            .perturbation_interval(2)
            .hyperparam_mutations(space())
            .seed(3);
        let mut c = Controller::new(config(8, 8), random(8), Box::new(pbt)).unwrap();
        let run = simulate(&mut c, 8, |_, _| false).unwrap();
        assert!(!run.exploits.is_empty(), "no exploit in 8 trials × 8 iterations");
        for (trial, source, params) in &run.exploits {
            assert_ne!(trial, source);
            assert!(params.value("quality").is_some());
        }
        let (trial, _, params) = run.exploits.last().unwrap();
        assert_eq!(&run.params[trial], params, "it went on with the exploited params");
    }

    /// PBT with fewer slots than its population: the whole population is made at once (waiting
    /// as PENDING), trials pause at perturbations and give their slot to waiting ones, never
    /// more than the slots run, and every trial trains to the end.
    #[test]
    fn pbt_time_shares_fewer_slots_than_its_population() {
        let pbt = || {
            rtune_searchers::Pbt::new()
                .time_attr("training_iteration")
                .perturbation_interval(2)
                .hyperparam_mutations(space())
                .seed(3)
        };
        let mut c = Controller::new(config(8, 2), random(8), Box::new(pbt())).unwrap();
        let begun = c.step(Event::Begin).unwrap();
        assert_eq!(begun.len(), 2, "{begun:?}");
        assert_eq!(c.created(), 8, "the population is made at once");
        let pending = statuses(&c).iter().filter(|s| **s == TrialStatus::Pending).count();
        assert_eq!(pending, 6);
        let mut c = Controller::new(config(8, 2), random(8), Box::new(pbt())).unwrap();
        let run = simulate(&mut c, 8, |_, _| false).unwrap();
        assert_eq!(run.most_started, 2);
        assert!(
            run.pauses > 0 && run.resumes > 0,
            "{} pauses, {} resumes",
            run.pauses,
            run.resumes
        );
        assert!(!run.exploits.is_empty(), "no exploit");
        assert_eq!(statuses(&c), vec![TrialStatus::Terminated; 8]);
    }

    /// HyperBand pauses trials at its milestones and the controller resumes the promoted ones.
    #[test]
    fn hyperband_pauses_and_resumes_trials() {
        let hb = rtune_searchers::HyperBand::new().max_t(9).reduction_factor(3);
        let mut c = Controller::new(config(9, 9), random(9), Box::new(hb)).unwrap();
        let run = simulate(&mut c, 9, |_, _| false).unwrap();
        assert!(
            run.pauses > 0 && run.resumes > 0,
            "{} pauses, {} resumes",
            run.pauses,
            run.resumes
        );
        assert!(run.reports.values().any(|&n| n == 9), "someone reaches max_t");
        assert_eq!(statuses(&c), vec![TrialStatus::Terminated; 9]);
    }

    /// HyperBand with one slot: a trial paused at its bracket's first milestone gives its slot
    /// to the next trial of the bracket, made only then, and the round closes once the bracket
    /// holds all its trials (or, past the samples, those it has): of the first bracket's 9
    /// trials (the papers' order), 3 are promoted, not every trial run alone.
    #[test]
    fn hyperband_with_one_slot_fills_each_bracket_first() {
        let hb = rtune_searchers::HyperBand::new().max_t(9).reduction_factor(3);
        let hb = hb.aggressive_first(true);
        let mut c = Controller::new(config(12, 1), random(12), Box::new(hb.clone())).unwrap();
        let begun = c.step(Event::Begin).unwrap();
        assert_eq!((begun.len(), c.created()), (1, 1), "{begun:?}");
        let mut c = Controller::new(config(12, 1), random(12), Box::new(hb)).unwrap();
        let run = simulate(&mut c, 9, |_, _| false).unwrap();
        assert_eq!(run.most_started, 1);
        let mut reports: Vec<u64> = run.reports.values().copied().collect();
        reports.sort_unstable();
        // Bracket 1: 9 trials at 1 iteration, 3 go on to 3, 1 of them to 9. Bracket 2 (5
        // trials to 3 iterations, 2 of them to 9) gets the last 3 of the 12: 2 go on to 9.
        assert_eq!(reports, [1, 1, 1, 1, 1, 1, 3, 3, 3, 9, 9, 9], "{:?}", run.reports);
        assert_eq!(statuses(&c), vec![TrialStatus::Terminated; 12]);
    }

    /// A searcher that has no trial now while none runs (a concurrency limit below a
    /// HyperBand bracket's size) cannot fill the bracket: the scheduler is told no trial will
    /// come, its rounds close with what they have, and the sweep ends instead of waiting.
    #[test]
    fn hyperband_under_a_concurrency_limit_closes_its_rounds() {
        let hb = rtune_searchers::HyperBand::new().max_t(9).reduction_factor(3);
        let limited = ConcurrencyLimiter::new(random(12), 2).unwrap();
        let mut c = Controller::new(config(12, 4), Box::new(limited), Box::new(hb)).unwrap();
        let run = simulate(&mut c, 9, |_, _| false).unwrap();
        assert!(run.pauses > 0, "no round closed");
        assert!(statuses(&c).iter().all(|s| *s == TrialStatus::Terminated), "{:?}", statuses(&c));
    }

    /// A sweep interrupted mid-way and restored from its snapshot (through JSON, as on disk)
    /// ends with the same trials, the same params, every trial once, the running ones resumed.
    #[test]
    fn a_restored_controller_finishes_the_same_sweep() {
        let asha = || Box::new(Asha::new().max_t(6).grace_period(1).reduction_factor(3).seed(1));
        let mut whole = Controller::new(config(9, 3), random(9), asha()).unwrap();
        let whole_run = simulate(&mut whole, 6, |_, _| false).unwrap();

        let mut first = Controller::new(config(9, 3), random(9), asha()).unwrap();
        let (first_run, finished) = simulate_steps(&mut first, 6, |_, _| false, 12).unwrap();
        assert!(!finished);
        let json = serde_json::to_string(&first.snapshot()).unwrap();
        let state: ControllerState = serde_json::from_str(&json).unwrap();
        let was_running: Vec<TrialId> = first
            .trials()
            .iter()
            .filter(|(_, t)| t.status == TrialStatus::Running && !t.stopping)
            .map(|(id, _)| *id)
            .collect();
        assert!(!was_running.is_empty() && first.created() < 9);
        let reported = |id: TrialId| Ok(first.trials()[&id].reported.clone());
        let mut restored =
            Controller::restore(config(9, 3), random(9), asha(), state, reported).unwrap();
        assert!(was_running.iter().all(|id| restored.trials()[id].status == TrialStatus::Paused));
        let run = simulate(&mut restored, 6, |_, _| false).unwrap();
        assert_eq!(run.resumes, was_running.len(), "every running trial goes on");
        let mut params = first_run.params.clone();
        params.extend(run.params.clone());
        let params: Vec<Params> = params.into_values().collect();
        assert_eq!(whole_run.params(), params, "the same 9 trials");
        assert_eq!(statuses(&restored), vec![TrialStatus::Terminated; 9]);
    }

    /// A state saved by an earlier rtune lists the ended trials with the others: they come
    /// back ended (and out of the table), and the sweep ends with its 6 trials.
    #[test]
    fn ended_trials_of_an_earlier_state_come_back_ended() {
        let fifo = || Box::new(Fifo::new());
        let mut first = Controller::new(config(6, 2), random(6), fifo()).unwrap();
        let (_, finished) = simulate_steps(&mut first, 2, |_, _| false, 5).unwrap();
        assert!(!finished);
        let mut state = first.snapshot();
        let ended = std::mem::take(&mut state.ended);
        assert!(!ended.is_empty() && !state.trials.is_empty());
        for &(id, status) in &ended {
            let params = Params::new();
            state.trials.push(SavedTrial { id, status, params, error: None, stopping: false });
        }
        let reported = |id: TrialId| Ok(first.trials()[&id].reported.clone());
        let mut restored =
            Controller::restore(config(6, 2), random(6), fifo(), state, reported).unwrap();
        for (id, status) in ended {
            assert_eq!(restored.status(id), Some(status));
            assert!(!restored.trials().contains_key(&id));
        }
        simulate(&mut restored, 2, |_, _| false).unwrap();
        assert_eq!(statuses(&restored), vec![TrialStatus::Terminated; 6]);
    }

    /// HyperBand ends a trial (the loser of its round) whose own pause is still under way:
    /// the trial ends when the pause is done instead of waiting, paused, for a turn that never
    /// comes (a sweep used to hang there).
    #[test]
    fn a_trial_ended_while_it_pauses_ends_when_paused() {
        let hb = Box::new(rtune_searchers::HyperBand::new().max_t(4).reduction_factor(2));
        let config = ControllerConfig { num_samples: None, ..config(1, 6) };
        let mut c = Controller::new(config, random(6), hb).unwrap();
        assert_eq!(c.step(Event::Begin).unwrap().len(), 6);
        // Trials 3, 4, 5 share HyperBand's second bracket (first milestone 2); score = id.
        let report = |c: &mut Controller, t: u64, it: f64| {
            let m = Metrics::from([
                ("training_iteration".to_string(), it),
                ("score".to_string(), t as f64),
            ]);
            c.step(Event::ResultReported { trial: TrialId(t), metrics: m }).unwrap()
        };
        for t in 3..6 {
            assert!(report(&mut c, t, 1.0).is_empty());
        }
        assert_eq!(report(&mut c, 4, 2.0), vec![Command::PauseTrial(TrialId(4))]);
        c.step(Event::TrialPaused(TrialId(4))).unwrap();
        assert_eq!(report(&mut c, 3, 2.0), vec![Command::PauseTrial(TrialId(3))]);
        // Trial 5 completes the round: 5 and 4 go on, 3 (still pausing) is the loser.
        let commands = report(&mut c, 5, 2.0);
        assert!(matches!(commands[..], [Command::StartTrial { trial: TrialId(4), .. }]));
        c.step(Event::TrialPaused(TrialId(3))).unwrap();
        assert_eq!(c.status(TrialId(3)), Some(TrialStatus::Terminated));
    }

    /// Running elastic trials grow only once no trial waits: not while the searcher has more
    /// to start in a slot that frees, nor while a started trial has not placed its workers;
    /// then the trial furthest along first, unless it has all the ranks it may have.
    #[test]
    fn trials_grow_only_once_none_waits_furthest_along_first() {
        let (one, two) = (TrialId(1), TrialId(2));
        let mut c = Controller::new(config(3, 2), random(3), Box::new(Fifo::new())).unwrap();
        let started = c.step(Event::Begin).unwrap();
        assert_eq!(started.len(), 2);
        assert!(!c.room_for_growth(one, 2, 4), "a third trial is still to come");
        let third = c.step(Event::TrialCompleted(TrialId(0))).unwrap();
        assert!(matches!(third[..], [Command::StartTrial { trial: TrialId(2), .. }]));
        assert!(!c.room_for_growth(one, 1, 4), "trial 2 has not placed its workers yet");
        assert!(c.room_for_growth(one, 2, 4), "every trial made and running; 1 came first");
        assert!(!c.room_for_growth(two, 2, 4), "trial 1 is as far along, and came first");
        let report = |c: &mut Controller, trial, iteration: f64, world: f64| {
            let metrics = Metrics::from([
                ("training_iteration".to_string(), iteration),
                ("score".to_string(), 0.5),
                ("world_size".to_string(), world),
            ]);
            c.step(Event::ResultReported { trial, metrics }).unwrap();
        };
        report(&mut c, two, 3.0, 1.0);
        assert!(c.room_for_growth(two, 2, 4) && !c.room_for_growth(one, 2, 4), "2 is further");
        report(&mut c, two, 4.0, 4.0);
        assert!(c.room_for_growth(one, 2, 4), "2 has all it may have: 1 is next");
        // 2 placing a group again (resumed, its last report from the group before): it may
        // take all the room again.
        assert!(c.room_for_growth(two, 2, 4), "2 asks, and is furthest along");
        c.step(Event::TrialCompleted(one)).unwrap();
        c.step(Event::TrialCompleted(two)).unwrap();
        assert!(!c.room_for_growth(two, 0, 4), "the sweep is over");
    }

    #[test]
    fn a_failed_trial_is_an_error_and_the_sweep_goes_on() {
        let mut c = Controller::new(config(6, 2), random(6), Box::new(Fifo::new())).unwrap();
        simulate(&mut c, 4, |trial, it| trial == TrialId(2) && it == 3).unwrap();
        assert_eq!(c.status(TrialId(2)), Some(TrialStatus::Error));
        assert_eq!(statuses(&c).iter().filter(|s| **s == TrialStatus::Terminated).count(), 5);
    }

    #[test]
    fn fail_fast_ends_the_sweep_at_the_first_failure() {
        let config = ControllerConfig { fail_fast: true, ..config(10, 2) };
        let mut c = Controller::new(config, random(10), Box::new(Fifo::new())).unwrap();
        simulate(&mut c, 4, |trial, it| trial == TrialId(1) && it == 2).unwrap();
        assert_eq!(c.status(TrialId(1)), Some(TrialStatus::Error));
        // Trial 0 was running: stopped; nothing after trial 2 was created.
        assert!(c.created() <= 3, "{} trials", c.created());
        assert!(statuses(&c).iter().all(|s| s.is_finished()));
    }

    #[test]
    fn a_searcher_that_says_not_now_is_waited_for() {
        let limited = ConcurrencyLimiter::new(random(8), 2).unwrap();
        let mut c =
            Controller::new(config(8, 4), Box::new(limited), Box::new(Fifo::new())).unwrap();
        let run = simulate(&mut c, 2, |_, _| false).unwrap();
        assert_eq!(run.most_started, 2, "the searcher allows 2 at once, the controller 4");
        assert_eq!(statuses(&c), vec![TrialStatus::Terminated; 8]);
    }

    #[test]
    fn a_finite_searcher_ends_an_open_ended_sweep() {
        let grid = SearchSpace::new().add("quality", grid_search([0.1, 0.5, 0.9]));
        let searcher = Box::new(BasicVariant::new(grid).unwrap());
        let config = ControllerConfig { num_samples: None, ..config(1, 2) };
        let mut c = Controller::new(config, searcher, Box::new(Fifo::new())).unwrap();
        let run = simulate(&mut c, 2, |_, _| false).unwrap();
        let seen: BTreeSet<String> =
            run.params().iter().map(|p| p.get::<f64>("quality").unwrap().to_string()).collect();
        assert_eq!(seen, BTreeSet::from(["0.1".into(), "0.5".into(), "0.9".into()]));
    }

    #[test]
    fn a_spent_time_budget_stops_the_running_trials() {
        let config = ControllerConfig { num_samples: None, ..config(1, 2) };
        let mut c = Controller::new(config, random(1_000), Box::new(Fifo::new())).unwrap();
        let started = c.step(Event::Begin).unwrap();
        assert_eq!(started.len(), 2);
        let commands = c.step(Event::TimeBudgetSpent).unwrap();
        assert_eq!(commands, vec![Command::StopTrial(TrialId(0)), Command::StopTrial(TrialId(1))]);
        assert!(c.step(Event::TrialStopped(TrialId(0))).unwrap().is_empty());
        assert_eq!(c.step(Event::TrialStopped(TrialId(1))).unwrap(), vec![Command::Finish]);
        assert_eq!(c.created(), 2, "no trial started after the budget");
    }

    #[test]
    fn a_user_stop_ends_a_running_or_a_waiting_trial_and_the_sweep_goes_on() {
        let mut c = Controller::new(config(4, 2), random(4), Box::new(Fifo::new())).unwrap();
        assert_eq!(c.step(Event::Begin).unwrap().len(), 2);
        // A running trial is asked to stop, once, and ends TERMINATED when it has.
        let commands = c.step(Event::StopRequested(TrialId(1))).unwrap();
        assert_eq!(commands, vec![Command::StopTrial(TrialId(1))]);
        assert!(c.step(Event::StopRequested(TrialId(1))).unwrap().is_empty());
        let metrics = Metrics::from([("score".to_owned(), 0.5)]);
        let raced = c.step(Event::ResultReported { trial: TrialId(1), metrics }).unwrap();
        assert_eq!(raced, vec![Command::StopTrial(TrialId(1))], "a racing report is told again");
        let next = c.step(Event::TrialStopped(TrialId(1))).unwrap();
        assert!(matches!(next[..], [Command::StartTrial { trial: TrialId(2), .. }]), "{next:?}");
        assert_eq!(c.status(TrialId(1)), Some(TrialStatus::Terminated));
        // A finished trial stays as it was; an unknown one is a mistake.
        assert!(c.step(Event::StopRequested(TrialId(1))).unwrap().is_empty());
        assert!(c.step(Event::PauseRequested(TrialId(1))).unwrap().is_empty());
        assert_eq!(c.status(TrialId(1)), Some(TrialStatus::Terminated));
        assert!(c.step(Event::StopRequested(TrialId(99))).is_err());
    }

    #[test]
    fn a_held_trial_waits_until_resumed_and_the_sweep_waits_for_it() {
        let mut c = Controller::new(config(2, 1), random(2), Box::new(Fifo::new())).unwrap();
        assert_eq!(c.step(Event::Begin).unwrap().len(), 1);
        // Holding the running trial pauses it; the next trial takes its place.
        let commands = c.step(Event::PauseRequested(TrialId(0))).unwrap();
        assert_eq!(commands, vec![Command::PauseTrial(TrialId(0))]);
        let next = c.step(Event::TrialPaused(TrialId(0))).unwrap();
        assert!(matches!(next[..], [Command::StartTrial { trial: TrialId(1), .. }]), "{next:?}");
        // Only the held trial is left: the sweep waits for it instead of failing or ending.
        assert!(c.step(Event::TrialCompleted(TrialId(1))).unwrap().is_empty());
        assert_eq!(c.status(TrialId(0)), Some(TrialStatus::Paused));
        // Resumed, it goes on from its checkpoint, and the sweep ends with it.
        let resumed = c.step(Event::ResumeRequested(TrialId(0))).unwrap();
        assert!(
            matches!(resumed[..], [Command::StartTrial { trial: TrialId(0), resume: true, .. }]),
            "{resumed:?}"
        );
        assert_eq!(c.step(Event::TrialCompleted(TrialId(0))).unwrap(), vec![Command::Finish]);
    }

    #[test]
    fn metric_mistakes_are_named() {
        let mut c = Controller::new(config(4, 1), random(4), Box::new(Fifo::new())).unwrap();
        c.step(Event::Begin).unwrap();
        let metrics = Metrics::from([("loss".to_string(), 0.3), ("acc".to_string(), 0.9)]);
        let e = c.step(Event::ResultReported { trial: TrialId(0), metrics }).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("`score`") && e.contains("acc, loss"), "{e}");
    }
}
