//! The tree libraries' backends, the worker's half: a rank of a group of more than one joins
//! its library's collective before the train function runs and leaves it after.
//!
//! XGBoost's: rank 0 starts the library's tracker on its collective address (where every rank
//! reaches it) and broadcasts the tracker's worker arguments over rtune's ring; every rank
//! then joins with them and its rank as its task id (zero-padded: the tracker orders ranks by
//! task id as text), so XGBoost's ranks are rtune's. The library then all-reduces histograms,
//! quantile sketches and evaluation sums over its own connections.

use rtune_driver::error::{Error, Result};

use super::{Backend, Start};
use crate::xgboost::{Communicator, Tracker};

pub(crate) struct XGBoostBackend {
    /// Left before the tracker is waited for (rank 0).
    communicator: Option<Communicator>,
    tracker: Option<Tracker>,
}

impl XGBoostBackend {
    pub(super) fn on_start(start: &Start<'_>) -> Result<Self> {
        let shape = start.group.shape();
        if shape.world == 1 {
            return Ok(XGBoostBackend { communicator: None, tracker: None });
        }
        let failed = |e: String| Error::Worker(format!("XGBoost's collective: {e}"));
        let timeout_s = start.timeout.as_secs().max(1);
        let (tracker, mut args) = match shape.rank {
            0 => {
                let (tracker, args) =
                    Tracker::start(shape.world, start.master_host, timeout_s).map_err(failed)?;
                (Some(tracker), args.into_bytes())
            }
            _ => (None, Vec::new()),
        };
        start.group.borrow_mut().broadcast_bytes(&mut args, 0)?;
        let args = String::from_utf8(args)
            .map_err(|_| failed("the tracker's worker arguments are not UTF-8".into()))?;
        let communicator = Communicator::join(&args, shape.rank, timeout_s).map_err(failed)?;
        Ok(XGBoostBackend { communicator: Some(communicator), tracker })
    }
}

impl Backend for XGBoostBackend {
    fn name(&self) -> &'static str {
        rtune_driver::group::TreeBackend::XGBOOST
    }

    fn on_shutdown(&mut self) {
        self.communicator = None;
        self.tracker = None;
    }
}
