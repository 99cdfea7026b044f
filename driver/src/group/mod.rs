//! The driver side of a worker group: one attempt of N worker processes, started, answered and
//! watched as one unit. The worker side (what runs inside those processes) is `worker`; the two
//! share only the worker protocol and the `RTUNE_WORKER` spec.
//!
//! * `attempt`: the attempt's state machine: joins, reports, finishes and exits;
//! * `launch`: starting the processes, as children of the driver or through the head;
//! * `logs`: the workers' output in `logs/rank_N.*`, and the head's event stream for a group;
//! * `hub`: the gRPC endpoint workers call, forwarding each call to its group's owner.
//!
//! One owner: `run_attempt` owns all of the attempt's state and is the only code that touches
//! it; the hub forwards worker calls here and a task per child forwards its exit. The attempt
//! fails as soon as any worker fails (error, panic, signal, or exiting without finishing): the
//! others are killed at once (they may be blocked in a collective with the dead one) and the
//! attempt returns when every process is gone, so no worker outlives its attempt.
//!
//! Processes are spawned from the thread that runs this future; each gets
//! `PR_SET_PDEATHSIG = SIGKILL`, so workers die with their driver instead of being orphaned.

mod attempt;
pub mod backend;
pub(crate) mod hub;
mod launch;
mod logs;

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::Result;
use crate::outcome::WorkerFailure;
pub(crate) use crate::record::GroupReport;

pub(crate) use attempt::run_attempt;
pub use backend::{Backend, TorchConfig, TreeBackend};

/// The environment variable that makes a process a worker.
pub const WORKER_ENV: &str = "RTUNE_WORKER";
/// The variable a worker finds its driver's hub token in (when the hub requires one).
pub const HUB_TOKEN_ENV: &str = "RTUNE_HUB_TOKEN";

/// What the driver tells a worker process at spawn time (as JSON in `RTUNE_WORKER`); the rest
/// comes in the join reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// URL of the driver's worker hub, e.g. `http://127.0.0.1:40123`.
    pub hub: String,
    pub group: String,
    pub attempt: u32,
    pub rank: u32,
    /// The train function (`TrainFnId`): its offset from an anchor in the binary.
    pub train_fn: i64,
    /// Hex build id of the driver's binary.
    pub build_id: String,
    /// Host to bind the collective listener on.
    pub bind_host: String,
    /// The rank works in a folder of its node's (`$RTUNE_SCRATCH`, set by its node agent)
    /// instead of the driver's run folder, which it need not see: the run lives on an object
    /// store, where its checkpoints go up and its resumed checkpoint comes down from.
    #[serde(default)]
    pub scratch: bool,
}

/// Where one rank runs.
#[derive(Debug, Clone)]
pub(crate) struct RankPlacement {
    /// `CUDA_VISIBLE_DEVICES` for a GPU worker, None for a CPU worker.
    pub cuda_visible_devices: Option<String>,
    /// Host its collective listener binds (its node's address).
    pub bind_host: String,
    pub node_rank: u32,
    pub local_rank: u32,
    pub local_world_size: u32,
}

impl RankPlacement {
    /// Ranks placed on `nodes[rank]` (any comparable node key): node ranks in order of first
    /// appearance, local ranks in rank order within a node.
    pub(crate) fn from_nodes<K: PartialEq + Copy>(
        nodes: &[K],
        hosts: &[String],
        devices: &[Option<String>],
    ) -> Vec<RankPlacement> {
        let mut distinct: Vec<K> = Vec::new();
        for &n in nodes {
            if !distinct.contains(&n) {
                distinct.push(n);
            }
        }
        nodes
            .iter()
            .enumerate()
            .map(|(rank, n)| RankPlacement {
                cuda_visible_devices: devices.get(rank).cloned().flatten(),
                bind_host: hosts.get(rank).cloned().unwrap_or_else(|| "127.0.0.1".into()),
                node_rank: distinct.iter().position(|d| d == n).unwrap_or(0) as u32,
                local_rank: nodes[..rank].iter().filter(|m| *m == n).count() as u32,
                local_world_size: nodes.iter().filter(|m| *m == n).count() as u32,
            })
            .collect()
    }
}

/// Where one rank of an attempt runs, as the rank itself told the driver when it joined: its
/// node's host name and, for a GPU worker, its `CUDA_VISIBLE_DEVICES` after any node agent
/// mapped it to the node's own device names (so, its physical devices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    /// Its node's host name.
    pub node: String,
    /// Its node's address (where its workers listen).
    pub address: String,
    pub gpus: Option<String>,
    /// The worker's process id.
    pub pid: u32,
}

/// The seats in one line, rank by rank, as result rows record it: `node/gpu:0 node/cpu`.
pub(crate) fn describe_seats(seats: &[Seat]) -> String {
    let seat = |s: &Seat| match &s.gpus {
        Some(gpus) => format!("{}/gpu:{gpus}", s.node),
        None => format!("{}/cpu", s.node),
    };
    seats.iter().map(seat).collect::<Vec<_>>().join(" ")
}

/// The name a worker started through the head goes by (in its start request, and in the
/// exits and logs its node reports).
fn remote_worker_id(spec: &AttemptSpec, rank: usize) -> String {
    format!("{}/{}/{rank}", spec.run.group, spec.attempt)
}

/// How an attempt starts its processes.
#[derive(Clone)]
pub(crate) enum Launcher {
    /// Child processes of the driver.
    Local,
    /// Local mode (`ScalingConfig::local`): the one rank on a thread of the driver's process,
    /// run by what `set_in_process_runner` registered.
    InProcess,
    /// Through the head, on the nodes of a reserved placement group.
    Cluster { client: Box<crate::cluster::client::Client>, pg: crate::cluster::pool::PgId },
}

/// Runs one worker in the calling process to its end (joining the hub like any worker) and
/// returns what its process would exit with.
pub(crate) type InProcessRunner = fn(WorkerSpec) -> i32;

static IN_PROCESS_RUNNER: std::sync::OnceLock<InProcessRunner> = std::sync::OnceLock::new();

/// Registers the worker side for local mode; `rtune::init()` does, in the driver's process (the
/// driver does not link the worker side). Later calls change nothing.
pub fn set_in_process_runner(runner: InProcessRunner) {
    let _ = IN_PROCESS_RUNNER.set(runner);
}

fn in_process_runner() -> Option<InProcessRunner> {
    IN_PROCESS_RUNNER.get().copied()
}

/// How a worker process ended, as the attempt sees it.
#[derive(Debug)]
pub(crate) enum Exit {
    Status(ExitStatus),
    /// Never started, could not be waited for, or lost with its node.
    Lost(String),
}

type ExitTx = mpsc::UnboundedSender<(usize, Exit)>;

/// What every attempt of a run's worker group shares: made once per run.
pub(crate) struct GroupSpec {
    /// The group's name, unique to the run (its attempts' worker keys start with it).
    pub group: String,
    pub train_fn: i64,
    pub params_json: String,
    pub run_dir: PathBuf,
    /// How the workers reach the run's store.
    pub store_settings: crate::config::StoreSettings,
    pub num_threads: u32,
    /// Who the run is in a sweep (all empty outside one).
    pub trial: TrialNames,
    pub collective_timeout: Duration,
    pub start_timeout: Duration,
    /// Start local workers from the driver's fork server (see `sys::zygote`).
    pub warm_start: bool,
    /// Extra environment variables of every worker (`TorchTrainer::env`).
    pub env: Vec<(String, String)>,
    /// The prepared datasets (`TorchTrainer::datasets`) as JSON; empty for none.
    pub data_json: std::sync::Arc<str>,
    /// The run's folder on an object store, where checkpoints go up from their rank.
    pub store_url: Option<String>,
    /// Those uploads run in the background (`CheckpointUpload::Async`).
    pub upload_async: bool,
    /// `ScalingConfig::sharding`, for the train function to read.
    pub sharding: Option<crate::config::Sharding>,
    /// An elastic group's fewest ranks: a rank lost (killed by a signal the attempt did not
    /// send, or its node gone) is survived in place where the others can re-form their group
    /// (`Regroup`) with at least this many, else it ends the attempt as
    /// `AttemptOutcome::Lost`, for the run to shrink, instead of as a failure. None: rigid.
    pub elastic: Option<usize>,
    /// Whether its ranks may re-form their group in place (`Regroup`): its backend's process
    /// group can, and its train function is no command (whose ranks, in torchrun's
    /// environment, start again with a new `WORLD_SIZE`): else an elastic group's losses
    /// always end the attempt.
    pub in_place: bool,
    /// What the group sets up around its train function (see `backend`).
    pub backend: std::sync::Arc<dyn Backend>,
}

/// One attempt of a run's group: where its ranks go and what they start from.
#[derive(Clone)]
pub(crate) struct AttemptSpec {
    pub run: std::sync::Arc<GroupSpec>,
    pub attempt: u32,
    pub ranks: Vec<RankPlacement>,
    pub(crate) launcher: Launcher,
    pub resume: Option<PathBuf>,
    /// `resume`'s URL in the run's store, for ranks that do not see the driver's files.
    pub resume_url: Option<String>,
    pub start_iteration: u64,
    /// The seconds the attempt's resources took to reserve (waiting for them included), for
    /// its group's start figures.
    pub reserve_s: f64,
}

/// A run's names in a sweep, as its train function sees them (Ray's `get_context()`).
#[derive(Debug, Clone, Default)]
pub(crate) struct TrialNames {
    pub trial_id: String,
    pub trial_name: String,
    pub experiment_name: String,
}

#[derive(Debug)]
pub(crate) enum AttemptOutcome {
    /// Every worker finished (perhaps because a report asked them to stop).
    Completed {
        train_seconds: f64,
        /// Params rank 0's train function never read.
        unread_params: Vec<String>,
        /// The train function ended because a report's answer asked it to stop.
        stopped: bool,
    },
    Failed(WorkerFailure),
    /// An elastic group lost ranks (see `AttemptSpec::elastic`): each one and why, in rank
    /// order, of the `world` ranks it had then; `failure` is how the attempt failed as a rigid
    /// one would say it.
    Lost {
        ranks: Vec<(usize, String)>,
        world: usize,
        failure: WorkerFailure,
        /// Why the group did not go on in place without them.
        not_in_place: Option<String>,
    },
}

/// Ranks that join a running elastic group in place (`OnReport::joiners`).
pub(crate) struct Joiners {
    /// Where each one goes.
    pub ranks: Vec<RankPlacement>,
    /// Why the group grows ("room appeared in the pool").
    pub why: String,
    /// What their train function starts from: the checkpoint of the report they join at
    /// (None if it was not kept), and that report's iteration.
    pub resume: Option<PathBuf>,
    pub iteration: u64,
}

/// What an attempt hands its complete reports to (the run's record and its decisions).
pub(crate) trait OnReport: Send {
    /// Records and decides one complete report: Ok(true) asks the run to stop; Err fails the
    /// attempt.
    fn report(&mut self, report: GroupReport) -> Result<bool>;

    /// When the attempt should call `flush` (None: nothing is waiting to be written). The
    /// attempt calls it then, whatever else it waits for.
    fn flush_due(&self) -> Option<std::time::Instant>;

    /// Writes what recording held back; Err fails the attempt.
    fn flush(&mut self) -> Result<()>;

    /// Every rank has joined, here, the group started as `start` says: recorded with the
    /// attempt's reports.
    fn placed(&mut self, seats: &[Seat], start: crate::metrics::GroupStart);

    /// An elastic group went on in place after losing ranks or taking in new ones: from
    /// `from` ranks to `to`, for `why` (each lost rank and why, or the room it grew into).
    fn resized(&mut self, from: usize, to: usize, why: &str);

    /// An attempt number of the run that no attempt has or will have: the checkpoints of a
    /// group that went on in place without its rank 0 are named by it.
    fn fresh_attempt(&mut self) -> u32;

    /// After a report that did not stop the run, and that said ranks can join in place
    /// (`GroupReport::joinable`): the ranks that join the group now, if it grows.
    fn joiners(&mut self) -> Option<Joiners> {
        None
    }

    /// Checkpoints of earlier reports are whole in the object store now (rank 0 said so as it
    /// finished, `upload = "async"`): recorded now; Err fails the attempt.
    fn uploaded(&mut self, names: &[String]) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(node: &str, gpus: Option<&str>) -> Seat {
        Seat { node: node.into(), address: node.into(), gpus: gpus.map(Into::into), pid: 1 }
    }

    #[test]
    fn seats_are_described_rank_by_rank() {
        let seats = [seat("b", Some("0")), seat("a", Some("1,0")), seat("a", None)];
        assert_eq!(describe_seats(&seats), "b/gpu:0 a/gpu:1,0 a/cpu");
    }

    #[test]
    fn ranks_on_nodes_get_node_and_local_ranks() {
        let hosts: Vec<String> = ["a", "b", "a", "b"].iter().map(|s| s.to_string()).collect();
        let ranks = RankPlacement::from_nodes(&[7u64, 3, 7, 3], &hosts, &[]);
        let got: Vec<(u32, u32, u32)> =
            ranks.iter().map(|r| (r.node_rank, r.local_rank, r.local_world_size)).collect();
        assert_eq!(got, vec![(0, 0, 2), (1, 0, 2), (0, 1, 2), (1, 1, 2)]);
        assert_eq!(ranks[1].bind_host, "b");
    }
}
