//! What a scheduler may know about trials: ids, statuses, last results and params, through a
//! read-only [`TrialsView`]. The controller owns the real trial table; schedulers never see it
//! (nor the resource pool), they only read this view and return decisions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::id::TrialId;
use crate::metrics::Metrics;
use crate::params::Params;

/// A trial's lifecycle status, one enum in one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TrialStatus {
    /// Created, never started.
    Pending,
    /// Running on workers.
    Running,
    /// Stopped for now, may be resumed from its checkpoint.
    Paused,
    /// Finished (completed or stopped by a scheduler).
    Terminated,
    /// Failed.
    Error,
    /// What the views show for a trial that was RUNNING or PENDING when its sweep's driver
    /// stopped (interrupted, or killed): it goes on from its latest checkpoint when the sweep
    /// is resumed. Never decided by a controller.
    Interrupted,
}

impl TrialStatus {
    /// Whether the trial is done for good.
    pub fn is_finished(self) -> bool {
        matches!(self, TrialStatus::Terminated | TrialStatus::Error)
    }

    /// Its name as Ray writes it (`PENDING`, `RUNNING`, `PAUSED`, `TERMINATED`, `ERROR`; and
    /// `INTERRUPTED`), for what people read: tables, progress lines, result tables.
    pub fn name(self) -> &'static str {
        match self {
            TrialStatus::Pending => "PENDING",
            TrialStatus::Running => "RUNNING",
            TrialStatus::Paused => "PAUSED",
            TrialStatus::Terminated => "TERMINATED",
            TrialStatus::Error => "ERROR",
            TrialStatus::Interrupted => "INTERRUPTED",
        }
    }
}

/// A read-only look at one trial.
#[derive(Clone, Copy, Debug)]
pub struct TrialInfo<'a> {
    /// Its id.
    pub id: TrialId,
    /// Its status.
    pub status: TrialStatus,
    /// Its last reported result, if any.
    pub last_result: Option<&'a Metrics>,
    /// Its params.
    pub params: &'a Params,
}

/// Read-only access to the trials of a sweep, as schedulers get it.
pub trait TrialsView {
    /// One trial. A table may answer for an ended trial (TERMINATED, ERROR) with its status
    /// only: no params, no result.
    fn get(&self, id: TrialId) -> Option<TrialInfo<'_>>;
    /// The trials in id (creation) order. A table may leave out the ended ones (rtune's
    /// Tuner does, so that a long sweep's steps look at the trials still going only).
    fn iter(&self) -> Box<dyn Iterator<Item = TrialInfo<'_>> + '_>;
    /// Whether any trial has one of `statuses`.
    fn any_with_status(&self, statuses: &[TrialStatus]) -> bool {
        self.iter().any(|t| statuses.contains(&t.status))
    }
}

/// One row of a [`TrialTable`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// Status.
    pub status: TrialStatus,
    /// Last result.
    pub last_result: Option<Metrics>,
    /// Params.
    pub params: Params,
}

/// A plain owned trial table implementing [`TrialsView`]: for tests, simulations and any
/// caller that has no table of its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialTable {
    trials: BTreeMap<TrialId, TrialRecord>,
}

impl TrialTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a pending trial (replaces one with the same id).
    pub fn add(&mut self, id: TrialId, params: Params) {
        self.trials
            .insert(id, TrialRecord { status: TrialStatus::Pending, last_result: None, params });
    }

    /// Set a trial's status (ignored for unknown ids).
    pub fn set_status(&mut self, id: TrialId, status: TrialStatus) {
        if let Some(t) = self.trials.get_mut(&id) {
            t.status = status;
        }
    }

    /// Record a result as the trial's last one.
    pub fn set_result(&mut self, id: TrialId, result: Metrics) {
        if let Some(t) = self.trials.get_mut(&id) {
            t.last_result = Some(result);
        }
    }

    /// Replace a trial's params (after a PBT exploit).
    pub fn set_params(&mut self, id: TrialId, params: Params) {
        if let Some(t) = self.trials.get_mut(&id) {
            t.params = params;
        }
    }

    /// A trial's record.
    pub fn record(&self, id: TrialId) -> Option<&TrialRecord> {
        self.trials.get(&id)
    }

    /// Number of trials.
    pub fn len(&self) -> usize {
        self.trials.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.trials.is_empty()
    }
}

impl TrialsView for TrialTable {
    fn get(&self, id: TrialId) -> Option<TrialInfo<'_>> {
        self.trials.get(&id).map(|r| info(id, r))
    }

    fn iter(&self) -> Box<dyn Iterator<Item = TrialInfo<'_>> + '_> {
        Box::new(self.trials.iter().map(|(id, r)| info(*id, r)))
    }
}

fn info(id: TrialId, r: &TrialRecord) -> TrialInfo<'_> {
    TrialInfo { id, status: r.status, last_result: r.last_result.as_ref(), params: &r.params }
}
