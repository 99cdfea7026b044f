//! When a sweep's state snapshot (`experiment_state.json`) is written: throttled by what the
//! last write cost.

use std::time::{Duration, Instant};

/// When the state snapshot is written: after a change, but at most once per 20 times what the
/// last write cost, so persistence takes at most about 5% of the driver's time however large
/// the experiment grows.
///
/// Trials starting and ending are changes the loop hears of (`dirty`). Reports are not: they
/// come by the thousand per second, and waking the loop for each cost the report path a
/// thread wake-up (about 8% of the driver's CPU at 8 trials x 5,000 reports). They mark
/// `Sweep::reports_unsaved` instead, which the loop looks at every `REPORTS_CHECKED_EVERY` while
/// trials run.
pub(crate) struct Snapshots {
    pub(super) dirty: bool,
    pub(super) last: Instant,
    pub(super) cost: Duration,
    /// When the loop last found no report since the last snapshot.
    pub(super) checked: Instant,
}

/// How often a running sweep looks for reports not in the snapshot yet.
const REPORTS_CHECKED_EVERY: Duration = Duration::from_millis(100);

impl Snapshots {
    pub(super) fn new() -> Self {
        let now = Instant::now();
        Snapshots { dirty: true, last: now, cost: Duration::ZERO, checked: now }
    }

    pub(super) fn due_at(&self) -> Instant {
        self.last + self.cost * 20
    }

    /// When the loop should wake to write the snapshot or look for reports: None while nothing
    /// changed and no trial runs.
    pub(super) fn wake_at(&self, running: bool) -> Option<Instant> {
        if self.dirty {
            Some(self.due_at())
        } else if running {
            Some(self.due_at().max(self.checked + REPORTS_CHECKED_EVERY))
        } else {
            None
        }
    }
}
