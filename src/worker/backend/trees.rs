//! The tree libraries' backends, the worker's half: a rank of a group of more than one joins
//! its library's collective before the train function runs and leaves it after.
//!
//! XGBoost's: rank 0 starts the library's tracker on its collective address (where every rank
//! reaches it) and broadcasts the tracker's worker arguments over rtune's ring; every rank
//! then joins with them and its rank as its task id (zero-padded: the tracker orders ranks by
//! task id as text), so XGBoost's ranks are rtune's. The library then all-reduces histograms,
//! quantile sketches and evaluation sums over its own connections.
//!
//! LightGBM's: every rank picks a free port on its own host, the ranks gather each other's over
//! rtune's ring, and every rank joins LightGBM's network with the list of `host:port` in rank
//! order, listening on its own (which tells LightGBM its place, so its ranks are rtune's). The
//! library then reduces histograms and finds bins over its own connections.

use rtune_driver::error::{Error, Result};

use super::{Backend, Start};
use crate::lightgbm::Network;
use crate::worker::group::all_gather_bytes;
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

pub(crate) struct LightGBMBackend {
    network: Option<Network>,
}

impl LightGBMBackend {
    pub(super) fn on_start(start: &Start<'_>) -> Result<Self> {
        let shape = start.group.shape();
        if shape.world == 1 {
            return Ok(LightGBMBackend { network: None });
        }
        let failed = |e: String| Error::Worker(format!("LightGBM's network: {e}"));
        let host = &start.hosts[shape.rank];
        // Free now; LightGBM listens on it (on every address) when it joins, a moment later.
        let port = std::net::TcpListener::bind(("0.0.0.0", 0))
            .and_then(|listener| listener.local_addr())
            .map_err(|e| failed(format!("finding a free port: {e}")))?
            .port();
        let mine = format!("{host}:{port}");
        let machines = all_gather_bytes(&mut **start.group.borrow_mut(), mine.as_bytes())?
            .into_iter()
            .map(|bytes| String::from_utf8(bytes).map_err(|_| failed("a rank's address".into())))
            .collect::<Result<Vec<String>>>()?;
        let timeout_min = start.timeout.as_secs().div_ceil(60);
        let network = Network::join(&machines, port, timeout_min).map_err(failed)?;
        Ok(LightGBMBackend { network: Some(network) })
    }
}

impl Backend for LightGBMBackend {
    fn name(&self) -> &'static str {
        rtune_driver::group::TreeBackend::LIGHTGBM
    }

    fn on_shutdown(&mut self) {
        self.network = None;
    }
}
