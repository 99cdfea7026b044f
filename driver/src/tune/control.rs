//! `Control`: a handle to a running sweep for a signal handler or a UI (interrupt it; stop,
//! hold or resume one trial). The sweep's shell (`sweep`) hears what it asks.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// A handle to a running sweep, for a signal handler or a UI: clone it before handing it to
/// the tuner (`rtune::Tuner::control`) and keep the clone.
///
/// * [`interrupt`](Control::interrupt) stops the sweep where it is and leaves it resumable
///   (Ray's Ctrl-C in `Tuner.fit`): the experiment's state is saved as it is, the running trials
///   are stopped (their latest checkpoints kept) and nothing new starts; `fit` then returns
///   `Error::Interrupted` and `Tuner::restore` goes on with the trials as they were.
/// * [`stop_trial`](Control::stop_trial) ends one trial as a scheduler would (TERMINATED, its
///   results and checkpoints kept); the sweep goes on.
/// * [`pause_trial`](Control::pause_trial) holds one trial: a running one is paused (from its
///   latest checkpoint, PAUSED) and no held trial starts until
///   [`resume_trial`](Control::resume_trial). While only held trials are left the sweep waits.
///   Holds are not saved: a restored sweep runs every trial.
#[derive(Clone, Default, Debug)]
pub struct Control(Arc<ControlState>);

#[derive(Default, Debug)]
struct ControlState {
    asked: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
    /// Requests about single trials (by id), not yet handed to the sweep.
    requests: Mutex<Vec<(TrialRequest, String)>>,
    requests_notify: tokio::sync::Notify,
}

/// What [`Control`] may ask about one trial.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum TrialRequest {
    Stop,
    Pause,
    Resume,
}

impl TrialRequest {
    pub(crate) fn verb(self) -> &'static str {
        match self {
            TrialRequest::Stop => "stop",
            TrialRequest::Pause => "pause",
            TrialRequest::Resume => "resume",
        }
    }
}

impl Control {
    pub fn new() -> Self {
        Control::default()
    }

    /// Asks the sweep to stop; it returns once its running trials have stopped.
    pub fn interrupt(&self) {
        self.0.asked.store(true, Ordering::SeqCst);
        self.0.notify.notify_one();
    }

    pub fn is_interrupted(&self) -> bool {
        self.0.asked.load(Ordering::SeqCst)
    }

    /// Asks the sweep to end trial `trial_id` (e.g. `"a1b2c_00003"`); an id the sweep does not
    /// have, or a trial already ended, is ignored (with a warning in the log).
    pub fn stop_trial(&self, trial_id: &str) {
        self.ask(TrialRequest::Stop, trial_id);
    }

    /// Asks the sweep to hold trial `trial_id` (see the type's docs).
    pub fn pause_trial(&self, trial_id: &str) {
        self.ask(TrialRequest::Pause, trial_id);
    }

    /// Asks the sweep to let a held trial run again.
    pub fn resume_trial(&self, trial_id: &str) {
        self.ask(TrialRequest::Resume, trial_id);
    }

    fn ask(&self, request: TrialRequest, trial_id: &str) {
        let mut requests = self.0.requests.lock().unwrap_or_else(|p| p.into_inner());
        requests.push((request, trial_id.to_owned()));
        self.0.requests_notify.notify_one();
    }

    pub(crate) async fn wait(&self) {
        while !self.is_interrupted() {
            self.0.notify.notified().await;
        }
    }

    /// The requests about single trials since the last call, once there are some.
    pub(crate) async fn trial_requests(&self) -> Vec<(TrialRequest, String)> {
        loop {
            let asked =
                std::mem::take(&mut *self.0.requests.lock().unwrap_or_else(|p| p.into_inner()));
            if !asked.is_empty() {
                return asked;
            }
            self.0.requests_notify.notified().await;
        }
    }
}
