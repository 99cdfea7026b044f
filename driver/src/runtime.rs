//! The driver process's shared machinery, made once and used by every run in the process: one
//! tokio runtime, one worker hub per address, and the embedded one-machine resource pool.
//!
//! A Tuner's concurrent trials, or `TorchTrainer::fit` called from several threads, therefore
//! share the machine instead of each believing it owns it: a run that does not fit what the
//! others hold waits for its placement group in the shared pool, as it would on a cluster, and
//! gets it when one of them releases. (Worker processes are forked on one long-lived thread, see
//! `sys`, so none dies with the thread that asked for it.)
//!
//! Place in the pipeline: above the worker group (`group`) and the pool (`cluster`), below the
//! trainer and the Tuner, which run their async work on [`Driver::block_on`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;

use crate::cluster::pool::{PgId, Pool, Reservation};
use crate::cluster::{local_fit_error, local_node, local_pool, worker_request};
use crate::config::ScalingConfig;
use crate::error::{Error, Result};
use crate::group::hub::Hub;
use crate::setting::Setting;
use crate::sys::cuda_probe::{CudaError, Probe};

/// See the module docs.
pub struct Driver {
    runtime: tokio::runtime::Runtime,
    local: LocalPool,
    /// One hub per (address, token): local runs share the loopback one.
    hubs: tokio::sync::Mutex<HashMap<HubKey, Arc<Hub>>>,
    /// The CUDA probe's answer, once a run has asked for GPUs.
    cuda: OnceLock<std::result::Result<Probe, CudaError>>,
    /// The token this driver's hub requires on a cluster that has none of its own.
    own_token: String,
}

/// The address a hub serves on and the token it requires.
type HubKey = (IpAddr, Option<String>);

impl Driver {
    /// The process's driver, made on first use.
    pub fn get() -> Result<&'static Driver> {
        static DRIVER: OnceLock<Driver> = OnceLock::new();
        if let Some(driver) = DRIVER.get() {
            return Ok(driver);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rtune-driver")
            .enable_all()
            .build()
            .map_err(|e| Error::Worker(format!("tokio runtime: {e}")))?;
        // Two threads racing here both build one; the second is dropped unused.
        let _ = DRIVER.set(Driver {
            runtime,
            local: LocalPool::default(),
            hubs: tokio::sync::Mutex::new(HashMap::new()),
            cuda: OnceLock::new(),
            own_token: crate::rpc::new_token(),
        });
        Ok(DRIVER.get().expect("set just above"))
    }

    /// Runs `future` to completion on the shared runtime (from any thread but its own).
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The shared runtime, to spawn on or enter (a server of the sweep's, say).
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// The token a hub of this driver requires on a cluster without a token: one for all its
    /// runs, so that they share one hub (a hub for each run would hold its sockets until the
    /// driver ends: three a trial, a sweep of 10,000 trials ran out of open files).
    pub(crate) fn own_token(&self) -> &str {
        &self.own_token
    }

    /// The hub serving workers on `ip`, requiring `token` when given; started on first use.
    pub(crate) async fn hub(&self, ip: IpAddr, token: Option<String>) -> Result<Arc<Hub>> {
        let mut hubs = self.hubs.lock().await;
        let key = (ip, token);
        if let Some(hub) = hubs.get(&key) {
            return Ok(hub.clone());
        }
        let hub = Arc::new(Hub::start((ip, 0).into(), key.1.clone()).await?);
        hubs.insert(key, hub.clone());
        Ok(hub)
    }

    /// Where every rank of the running groups of trial `trial` (of every trial when None) is:
    /// each worker's training thread's stack, asked of the workers on this machine
    /// (`sys::stacks`); what `rtune stack` prints.
    pub async fn stacks(&self, trial: Option<&str>) -> Vec<crate::proto::TrialStacks> {
        let hubs: Vec<Arc<Hub>> = self.hubs.lock().await.values().cloned().collect();
        let mut found = Vec::new();
        for hub in hubs {
            found.extend(hub.stacks(trial).await);
        }
        found.sort_by(|a, b| a.trial_id.cmp(&b.trial_id));
        found
    }

    /// This machine's pool as it is now; None until a run has asked it for resources.
    pub(crate) fn local_status(&self) -> Option<crate::cluster::pool::PoolStatus> {
        self.local.lock().as_ref().map(|state| state.pool.status())
    }

    /// Fails, with a config error naming the cause and the fix, when a group of `scaling` could
    /// never run on this machine, however long it waited: it does not fit what the machine has,
    /// or it asks for GPUs that its workers could not use (see [`Driver::cuda`]). Reserves
    /// nothing.
    pub fn check_local(&'static self, scaling: &ScalingConfig) -> Result<()> {
        let pg = self.local.request(scaling, "fit check")?;
        self.local.release(pg);
        let gpus = scaling.gpus_per_worker();
        if gpus > 0.0 {
            let probe = self.cuda().map_err(|e| {
                Error::config(
                    Setting::Scaling,
                    format!(
                        "asks for {gpus} GPU per worker, but {e}; or train on the CPU \
                         (use_gpu = false)"
                    ),
                )
            })?;
            // Said once a process: the probe runs once.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| tracing::info!("workers on this machine get CUDA: {probe}"));
        }
        Ok(())
    }

    /// What CUDA looks like to this binary's workers on this machine: the probe (`sys::cuda_probe`),
    /// run once in a child process the first time a run asks for GPUs.
    pub(crate) fn cuda(&self) -> std::result::Result<&Probe, &CudaError> {
        self.cuda
            .get_or_init(|| match std::env::current_exe() {
                Ok(exe) => Probe::run(&exe),
                Err(e) => Err(CudaError::Probe(format!("the current executable: {e}"))),
            })
            .as_ref()
    }

    /// Reserves a worker group of `scaling` on this machine, waiting while other runs of the
    /// process hold what it needs. A group the machine can never hold is a config error at once.
    /// Released when the returned value is dropped.
    pub(crate) async fn reserve_local(
        &'static self,
        scaling: &ScalingConfig,
        label: &str,
    ) -> Result<LocalReservation> {
        let pg = self.local.request(scaling, label)?;
        // Withdrawn if this future is dropped while it waits.
        let mut held = LocalReservation { driver: self, pg, reservation: None };
        loop {
            let changed = self.local.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(reservation) = self.local.take_granted(pg) {
                held.reservation = Some(reservation);
                return Ok(held);
            }
            changed.await;
        }
    }

    /// Whether a run waits for room in this machine's pool.
    pub(crate) fn local_waiting(&self) -> bool {
        self.local.lock().as_ref().is_some_and(|state| state.pool.pending_count() > 0)
    }

    /// Takes up to `want` more workers' bundles of `scaling` for an elastic group, each its own
    /// placement group, where the pool has room now and no run waits for it (nothing grows while
    /// a group waits for its start); as many as it got.
    pub(crate) fn grow_local(
        &'static self,
        scaling: &ScalingConfig,
        label: &str,
        want: usize,
    ) -> Vec<LocalReservation> {
        let granted = self.local.grow(scaling, label, want);
        let held = |reservation: Reservation| LocalReservation {
            driver: self,
            pg: reservation.pg,
            reservation: Some(reservation),
        };
        granted.into_iter().map(held).collect()
    }
}

/// A placement group in the shared local pool; released (or withdrawn) on drop.
pub(crate) struct LocalReservation {
    driver: &'static Driver,
    pg: PgId,
    reservation: Option<Reservation>,
}

impl LocalReservation {
    pub(crate) fn reservation(&self) -> &Reservation {
        self.reservation.as_ref().expect("made only once granted")
    }
}

impl Drop for LocalReservation {
    fn drop(&mut self) {
        self.driver.local.release(self.pg);
    }
}

/// The embedded pool: made from the detected machine on first use (a bad `RTUNE_NUM_CPUS` is an
/// error for each run, not cached), shared by every run of the process.
#[derive(Default)]
struct LocalPool {
    state: Mutex<Option<LocalState>>,
    /// Woken whenever the pool may have reserved a waiting group.
    changed: Notify,
}

struct LocalState {
    pool: Pool,
    /// Reserved by a scheduling pass, not yet picked up by the run that asked.
    granted: HashMap<PgId, Reservation>,
}

impl LocalPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<LocalState>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn request(&self, scaling: &ScalingConfig, label: &str) -> Result<PgId> {
        let mut state = self.lock();
        if state.is_none() {
            let pool = local_pool(local_node()?)?;
            *state = Some(LocalState { pool, granted: HashMap::new() });
        }
        let state = state.as_mut().expect("made just above");
        state.pool.request(worker_request(scaling, label)).map_err(local_fit_error)
    }

    /// `pg`'s reservation, once a scheduling pass has made it.
    fn take_granted(&self, pg: PgId) -> Option<Reservation> {
        let (mine, granted_others) = {
            let mut guard = self.lock();
            let state = guard.as_mut()?;
            let mut granted_others = false;
            for reservation in state.pool.schedule() {
                granted_others |= reservation.pg != pg;
                state.granted.insert(reservation.pg, reservation);
            }
            (state.granted.remove(&pg), granted_others)
        };
        // Wake the others only for what this pass granted them: waking on grants still waiting
        // to be picked up would have every waiter wake every other in a loop.
        if granted_others {
            self.changed.notify_waiters();
        }
        mine
    }

    /// Up to `want` one-worker reservations of `scaling`, made now where there is room, while
    /// no request waits (see `Driver::grow_local`).
    fn grow(&self, scaling: &ScalingConfig, label: &str, want: usize) -> Vec<Reservation> {
        let one = ScalingConfig { num_workers: 1, max_workers: None, ..scaling.clone() };
        let mut got = Vec::new();
        let mut guard = self.lock();
        let Some(state) = guard.as_mut() else { return got };
        while got.len() < want && state.pool.pending_count() == 0 {
            let Ok(pg) = state.pool.request(worker_request(&one, label)) else { break };
            match state.pool.schedule().into_iter().find(|r| r.pg == pg) {
                Some(reservation) => got.push(reservation),
                None => {
                    let _ = state.pool.cancel(pg);
                    break;
                }
            }
        }
        got
    }

    /// Gives `pg` back (reserved or still waiting) and wakes the runs waiting for room.
    fn release(&self, pg: PgId) {
        if let Some(state) = self.lock().as_mut() {
            state.granted.remove(&pg);
            let _ = state.pool.cancel(pg);
        }
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::pool::NodeSpec;

    /// An elastic group grows only into room nobody waits for: not while a group waits for its
    /// start (waiting groups come first), and only as far as the room goes.
    #[test]
    fn growth_takes_free_room_only_while_nobody_waits() {
        let pool = local_pool(NodeSpec::local(4.0, 0)).unwrap();
        let local = LocalPool {
            state: Mutex::new(Some(LocalState { pool, granted: HashMap::new() })),
            changed: Notify::new(),
        };
        let first = local.request(&ScalingConfig::workers(2), "elastic").unwrap();
        assert!(local.take_granted(first).is_some());
        let waiting = local.request(&ScalingConfig::workers(3), "rigid").unwrap();
        assert!(local.take_granted(waiting).is_none(), "3 of 4 CPUs: it waits");
        assert!(local.grow(&ScalingConfig::workers(1), "elastic", 2).is_empty(), "one waits");
        local.release(waiting);
        let grown = local.grow(&ScalingConfig::workers(1), "elastic", 5);
        assert_eq!(grown.len(), 2, "as far as the room goes");
        assert!(grown.iter().all(|r| r.bundles.len() == 1));
        assert!(local.grow(&ScalingConfig::workers(1), "elastic", 1).is_empty(), "full");
        local.release(grown[0].pg);
        assert_eq!(local.grow(&ScalingConfig::workers(1), "elastic", 1).len(), 1);
    }
}
