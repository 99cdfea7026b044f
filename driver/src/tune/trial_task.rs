//! One trial of a sweep as a task: a `TorchTrainer` run in the trial's directory whose every
//! report goes through the controller, with the controller's decision about the trial answered
//! to its workers in the reply to that report. And `Running`, the trials started and not
//! ended, which the shell and the trial tasks share: every command about a running trial is
//! carried out there, by [`Running::dispatch`], wherever the controller gave it.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use rtune_searchers::{Metrics, TrialId};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::controller::{Command, Controller, Event};
use crate::error::{Error, Result};
use crate::outcome::TrainResult;
use crate::runtime::Driver;
use crate::train::{Steering, TorchTrainer};

/// What a running trial is asked, answered to its next report: go on, stop, or pause (stop,
/// to go on later from its latest checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Halt {
    Go,
    Stop,
    Pause,
}

impl Halt {
    fn from_u8(value: u8) -> Halt {
        match value {
            1 => Halt::Stop,
            2 => Halt::Pause,
            _ => Halt::Go,
        }
    }
}

/// A trial's `Halt`, shared by the shell and its task. The first request stands.
#[derive(Debug, Clone, Default)]
pub(super) struct HaltFlag(Arc<AtomicU8>);

impl HaltFlag {
    pub(super) fn ask(&self, what: Halt) {
        let _ =
            self.0.compare_exchange(Halt::Go as u8, what as u8, Ordering::SeqCst, Ordering::SeqCst);
    }

    pub(super) fn get(&self) -> Halt {
        Halt::from_u8(self.0.load(Ordering::SeqCst))
    }
}

/// The trials started and not ended, shared by the shell and the trial tasks.
#[derive(Debug, Clone, Default)]
pub(super) struct Running(Arc<Mutex<RunningTrials>>);

#[derive(Debug, Default)]
struct RunningTrials {
    halts: BTreeMap<TrialId, HaltFlag>,
    /// Those whose resources are reserved (their workers started at least once).
    placed: std::collections::BTreeSet<TrialId>,
    /// Trials asked to pause that then take over another's checkpoint (PBT) → the source.
    exploits: BTreeMap<TrialId, TrialId>,
}

impl Running {
    fn lock(&self) -> std::sync::MutexGuard<'_, RunningTrials> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Trial `trial` starts; its flag.
    pub(super) fn insert(&self, trial: TrialId) -> HaltFlag {
        let flag = HaltFlag::default();
        self.lock().halts.insert(trial, flag.clone());
        flag
    }

    /// Trial `trial` ended; the trial whose checkpoint it is to take over, if PBT asked.
    pub(super) fn remove(&self, trial: TrialId) -> Option<TrialId> {
        let mut running = self.lock();
        running.halts.remove(&trial);
        running.placed.remove(&trial);
        running.exploits.remove(&trial)
    }

    /// Trial `trial` holds its resources now.
    fn mark_placed(&self, trial: TrialId) {
        self.lock().placed.insert(trial);
    }

    /// How many running trials hold their resources.
    fn placed(&self) -> usize {
        self.lock().placed.len()
    }

    pub(super) fn contains(&self, trial: TrialId) -> bool {
        self.lock().halts.contains_key(&trial)
    }

    pub(super) fn len(&self) -> usize {
        self.lock().halts.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks every running trial `what`.
    pub(super) fn ask_all(&self, what: Halt) {
        for flag in self.lock().halts.values() {
            flag.ask(what);
        }
    }

    /// Carries out a command of the controller about running trials: one that stops or pauses
    /// a trial is asked of it here (a trial that ended meanwhile has nothing left to do). Gives
    /// back the commands only the shell carries out (starting a trial, finishing the sweep).
    pub(super) fn dispatch(&self, command: Command) -> Option<Command> {
        let mut running = self.lock();
        match command {
            Command::StopTrial(trial) => running.halts.get(&trial).inspect(|f| f.ask(Halt::Stop)),
            Command::PauseTrial(trial) => running.halts.get(&trial).inspect(|f| f.ask(Halt::Pause)),
            Command::Exploit { trial, source, .. } => {
                running.exploits.insert(trial, source);
                running.halts.get(&trial).inspect(|f| f.ask(Halt::Pause))
            }
            Command::StartTrial { .. } | Command::Finish => return Some(command),
        };
        None
    }
}

/// What the shell hears from the trial tasks.
pub(super) enum Heard {
    /// A command only the shell carries out (`Running::dispatch` gave it back), from a report.
    Command(Command),
    /// A trial's report was recorded (and went through the controller unless the trial was
    /// being stopped), for the callbacks. Without callbacks, reports do not wake the shell: they
    /// mark `reports_unsaved`, which its snapshot timer looks at.
    Reported { trial: TrialId, metrics: Metrics },
    /// The trial's resources are reserved and its workers start: it is running, no longer
    /// waiting (sent before each of its attempts).
    Started(TrialId),
    Ended {
        trial: TrialId,
        /// What the run ended on (`Halt::Go`: it ended on its own).
        halted: Halt,
        outcome: Result<TrainResult>,
    },
    /// A mistake the sweep cannot go on with (from the controller, during a report).
    Fatal(Error),
}

/// One trial's task, as the shell hands it over.
pub(super) struct TrialTask {
    pub trial: TrialId,
    pub trainer: TorchTrainer,
    pub path: PathBuf,
    pub(crate) halt: HaltFlag,
    pub running: Running,
    pub controller: Arc<Mutex<Controller>>,
    pub heard: mpsc::UnboundedSender<Heard>,
    /// Whether reports go to the shell for the callbacks (else they only mark
    /// `reports_unsaved`).
    pub(crate) with_callbacks: bool,
    pub(crate) reports_unsaved: Arc<AtomicBool>,
}

impl TrialTask {
    /// Runs the trial as a task on the driver's runtime, in `span`; its end goes to the shell.
    pub(super) fn spawn(self, driver: &'static Driver, span: tracing::Span) {
        tokio::spawn(self.run(driver).instrument(span));
    }

    async fn run(self, driver: &'static Driver) {
        let TrialTask {
            trial,
            trainer,
            path,
            halt,
            running,
            controller,
            heard,
            with_callbacks,
            reports_unsaved,
        } = self;
        let mut steering = TrialSteering {
            trial,
            halt,
            running,
            controller,
            heard: heard.clone(),
            with_callbacks,
            reports_unsaved,
            answered: Halt::Go,
            cut_short: Cell::new(false),
        };
        let outcome = trainer.run_trial(driver, path, &mut steering).await;
        // What the run ended on: the answer to its last report, or the request its failed
        // attempt ended it on before an answer told its workers.
        let halted = if steering.cut_short.get() { steering.halt.get() } else { steering.answered };
        match &outcome {
            Ok(_) if halted == Halt::Pause => tracing::info!("paused"),
            Ok(_) if halted == Halt::Stop => tracing::info!("stopped"),
            Ok(_) => tracing::info!("completed"),
            Err(e) => tracing::warn!(target: crate::log::TRIAL_FAILED, "failed: {e}"),
        }
        let _ = heard.send(Heard::Ended { trial, halted, outcome });
    }
}

/// How a sweep steers one trial's run: every report goes through the controller, and the
/// trial's `Halt` is the answer.
struct TrialSteering {
    trial: TrialId,
    halt: HaltFlag,
    running: Running,
    controller: Arc<Mutex<Controller>>,
    heard: mpsc::UnboundedSender<Heard>,
    with_callbacks: bool,
    reports_unsaved: Arc<AtomicBool>,
    /// What the last report was answered (what the run ends on, when it does not end on its
    /// own): a request made after it never reached the workers.
    answered: Halt,
    /// Whether the run ended on the trial's halt before an answer told its workers (see
    /// `Steering::halting`).
    cut_short: Cell<bool>,
}

impl Steering for TrialSteering {
    fn decide(&mut self, metrics: &Metrics) -> Result<bool> {
        let trial = self.trial;
        if self.with_callbacks {
            let _ = self.heard.send(Heard::Reported { trial, metrics: metrics.clone() });
        } else {
            self.reports_unsaved.store(true, Ordering::Relaxed);
        }
        if self.halt.get() == Halt::Go {
            let event = Event::ResultReported { trial, metrics: metrics.clone() };
            let commands = self.controller.lock().unwrap_or_else(|p| p.into_inner()).step(event);
            match commands {
                // Carried out before the reply: a decision about this trial is answered to the
                // report that led to it.
                Ok(commands) => {
                    for command in commands {
                        if let Some(rest) = self.running.dispatch(command) {
                            let _ = self.heard.send(Heard::Command(rest));
                        }
                    }
                }
                Err(e) => {
                    let _ = self.heard.send(Heard::Fatal(e));
                    self.halt.ask(Halt::Stop);
                }
            }
        }
        self.answered = self.halt.get();
        Ok(self.answered != Halt::Go)
    }

    fn started(&mut self) {
        self.running.mark_placed(self.trial);
        let _ = self.heard.send(Heard::Started(self.trial));
    }

    fn may_grow(&self, max_ranks: usize) -> bool {
        // The trial asking holds its resources (its first attempt asks before `started`).
        self.running.mark_placed(self.trial);
        let placed = self.running.placed();
        let controller = self.controller.lock().unwrap_or_else(|p| p.into_inner());
        controller.room_for_growth(self.trial, placed, max_ranks)
    }

    fn halting(&self) -> bool {
        let halting = self.halt.get() != Halt::Go;
        self.cut_short.set(halting);
        halting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtune_searchers::Params;

    /// Commands about running trials are asked of them where the controller gave them; the
    /// first request stands; a trial that ended is left alone; the rest go to the shell.
    #[test]
    fn commands_about_running_trials_are_carried_out_in_one_place() {
        let running = Running::default();
        let (a, b) = (TrialId(1), TrialId(2));
        let (flag_a, flag_b) = (running.insert(a), running.insert(b));
        assert_eq!(running.dispatch(Command::PauseTrial(a)), None);
        assert_eq!(running.dispatch(Command::StopTrial(a)), None);
        assert_eq!(flag_a.get(), Halt::Pause, "the first request stands");
        let exploit = Command::Exploit { trial: b, source: a, params: Params::new() };
        assert_eq!(running.dispatch(exploit), None);
        assert_eq!(flag_b.get(), Halt::Pause);
        assert_eq!(running.remove(b), Some(a), "the exploit's source is kept for the end");
        assert_eq!(running.dispatch(Command::StopTrial(b)), None, "ended: nothing to do");
        let start = Command::StartTrial { trial: TrialId(3), params: Params::new(), resume: false };
        assert_eq!(running.dispatch(start.clone()), Some(start));
        assert_eq!(running.dispatch(Command::Finish), Some(Command::Finish));
        assert_eq!(running.len(), 1);
        running.ask_all(Halt::Stop);
        assert_eq!(flag_a.get(), Halt::Pause);
    }
}
