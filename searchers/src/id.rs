//! Trial ids: the bottom of the crate. Errors, the trial table, searchers and schedulers all
//! name trials; this module imports nothing of the crate, so none of them imports another just
//! for the id.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A trial's id. A `u64` newtype: the controller numbers trials in creation order, ids are
/// `Copy`, cheap to hash and to order, and iteration in id order is creation order (FIFO).
/// Displayed as the bare number; the controller formats directory names itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrialId(pub u64);

impl fmt::Display for TrialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u64> for TrialId {
    fn from(v: u64) -> Self {
        TrialId(v)
    }
}
