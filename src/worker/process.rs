//! The worker side of a worker process: join the driver, build the collective group and set up
//! the group's backend, run the train function on this thread (libtorch tensors are not Sync;
//! one training thread per worker), catch its panic, tear the backend down, and tell the driver
//! how it ended.

use std::net::TcpListener;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::worker::command::CommandKilled;
use crate::worker::group::{Elastic, Group, Shape, listen, peer_addresses};
use crate::worker::{ContextParts, DriverLink, TrainContext, WorkerSpec};
use rtune_collective::{GroupOptions, RingGroup};
use rtune_driver::error::{Error, Result};
use rtune_driver::outcome::Checkpoint;
use rtune_driver::proto::{FinishRequest, JoinReply, WorkerKey};
use rtune_driver::storage::remote::Remote;
use rtune_driver::sys::build_id;

/// Exit codes the driver reads when no finish message arrived.
const EXIT_FAILED: i32 = 1;
const EXIT_NO_DRIVER: i32 = 3;

/// Runs one worker to the end and returns the process exit code (local mode's, in the
/// driver's process).
pub(crate) fn run(spec: WorkerSpec) -> i32 {
    run_to_end(spec).0
}

/// Runs one worker to the end: the exit code, and the signal a worker process ends by instead
/// (its command was killed by it: see `CommandKilled`).
pub(crate) fn run_to_end(spec: WorkerSpec) -> (i32, Option<i32>) {
    install_panic_hook();
    // Before joining: the driver may ask a joined rank for its stack (`rtune stack`).
    rtune_driver::sys::stacks::training_thread();
    let key = WorkerKey { group: spec.group.clone(), attempt: spec.attempt, rank: spec.rank };
    let (mut link, listener, reply) = match join(&spec, key) {
        Ok(joined) => joined,
        Err(e) => {
            tracing::error!("worker rank {}: {e}", spec.rank);
            return (EXIT_NO_DRIVER, None);
        }
    };
    let started = Instant::now();
    let mut ended = Ended::default();
    let outcome = train(&spec, &mut link, listener, reply, &mut ended);
    let train_seconds = started.elapsed().as_secs_f64();
    let finish = |ok, stopped, error| FinishRequest {
        key: Some(link.key().clone()),
        ok,
        error,
        stopped,
        train_seconds,
        unread_params: ended.unread_params.clone(),
        uploaded: ended.uploaded.clone(),
    };
    let (request, code) = match &outcome {
        Ok(()) => (finish(true, false, String::new()), 0),
        Err(TrainEnd::Stopped) => (finish(true, true, String::new()), 0),
        Err(TrainEnd::Failed(message) | TrainEnd::Killed(message, _)) => {
            tracing::error!("worker rank {}: {message}", spec.rank);
            (finish(false, false, message.clone()), EXIT_FAILED)
        }
    };
    // What the train function printed is in the logs before the driver hears of the end (it
    // may end the attempt at once: see `group::attempt::ends_at_finish`).
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
    }
    if let Err(e) = link.finish(request) {
        tracing::error!("worker rank {}: could not tell the driver: {e}", spec.rank);
    }
    drop(ended.links.take());
    match outcome {
        Err(TrainEnd::Killed(_, signal)) => (code, Some(signal)),
        _ => (code, None),
    }
}

fn join(spec: &WorkerSpec, key: WorkerKey) -> Result<(DriverLink, TcpListener, JoinReply)> {
    let mut link = DriverLink::connect(&spec.hub, key)?;
    let (listener, address) = listen(&spec.bind_host)?;
    let reply = link.join(address)?;
    Ok((link, listener, reply))
}

enum TrainEnd {
    Stopped,
    Failed(String),
    /// A command killed by a signal from outside: the worker ends by it too (`CommandKilled`).
    Killed(String, i32),
}

/// What the finish message says besides how the train function ended.
#[derive(Default)]
struct Ended {
    /// Params it never read.
    unread_params: Vec<String>,
    /// Checkpoints whose background uploads completed after the last report.
    uploaded: Vec<String>,
    /// The collective group, open until the driver has heard how this rank ended: closing it
    /// first would let the other ranks fail on the lost link ("lost rank 1 during all_reduce")
    /// and tell the driver that before this rank's own error, which is the cause.
    links: Option<super::context::SharedGroup>,
}

fn train(
    spec: &WorkerSpec,
    link: &mut DriverLink,
    listener: TcpListener,
    reply: JoinReply,
    ended: &mut Ended,
) -> std::result::Result<(), TrainEnd> {
    let failed = |e: &dyn std::fmt::Display| TrainEnd::Failed(e.to_string());
    if build_id::hex(build_id::build_id()) != spec.build_id {
        return Err(TrainEnd::Failed("worker binary differs from the driver's".into()));
    }
    let threads = reply.num_threads.max(1) as i32;
    tch::set_num_threads(threads);
    // Once per process: libtorch refuses it after any parallel work (local mode runs one
    // worker after another in the driver's process).
    static INTEROP: std::sync::Once = std::sync::Once::new();
    INTEROP.call_once(|| tch::set_num_interop_threads(1));
    let peers = peer_addresses(&reply.peers).map_err(|e| failed(&e))?;
    let timeout = Duration::from_millis(reply.collective_timeout_ms);
    let options = GroupOptions::new(reply.collective_group_id).timeout(timeout);
    // A rank that joins a running group has the place the group gave it, not its spec's.
    let rank = if reply.joins_running { reply.group_rank } else { spec.rank } as usize;
    let world = reply.world_size as usize;
    let ring =
        RingGroup::connect(rank, world, listener, &peers, options).map_err(|e| failed(&e))?;
    // An elastic group's ranks ask to re-form it on a connection of their own (a model asks,
    // while the context holds the link).
    let elastic = match reply.elastic {
        true => {
            let own = DriverLink::connect(&spec.hub, link.key().clone()).map_err(|e| failed(&e))?;
            let elastic = Elastic::new(own, spec.bind_host.clone(), timeout);
            Some(match reply.joins_running {
                true => elastic.joining(reply.steps_done),
                false => elastic,
            })
        }
        false => None,
    };
    let shape = Shape {
        rank,
        world,
        local_rank: reply.local_rank as usize,
        local_world: reply.local_world_size as usize,
        node_rank: reply.node_rank as usize,
    };
    let group = Group::new(Box::new(ring), shape, elastic);
    let settings: rtune_driver::config::StoreSettings = match reply.store_settings_json.as_str() {
        "" => Default::default(),
        json => serde_json::from_str(json).map_err(|e| failed(&format!("store settings: {e}")))?,
    };
    let store = match reply.store_url.as_str() {
        "" => None,
        url => Some(Remote::with_settings(url, &settings).map_err(|e| failed(&e))?),
    };
    let run_dir = match spec.scratch {
        true => scratch_dir().map_err(|e| failed(&e))?,
        false => PathBuf::from(&reply.run_dir),
    };
    let resume = match (reply.resume_checkpoint.as_str(), reply.resume_url.as_str()) {
        ("", _) => None,
        // Away from the driver's files: the checkpoint comes down from the store.
        (_, url) if spec.scratch && !url.is_empty() => {
            let local = run_dir.join("resume_from");
            let remote = Remote::with_settings(url, &settings).map_err(|e| failed(&e))?;
            remote.download_folder(&local).map_err(|e| failed(&e))?;
            Some(Checkpoint::from_directory(local).map_err(|e| failed(&e))?)
        }
        (path, _) => {
            let checkpoint = Checkpoint::from_directory(path).map_err(|e| failed(&e))?;
            checkpoint.files().map_err(|e| failed(&e))?;
            Some(checkpoint)
        }
    };
    let mut params: rtune_searchers::Params = serde_json::from_str(&reply.params_json)
        .map_err(|e| failed(&format!("train loop config: {e}")))?;
    // A clone shares what is read: after the train function, it names the params never read.
    params.track_reads();
    let tracked = params.clone();
    let device = parse_device(&reply.device).map_err(|e| failed(&e))?;
    // Rank 0's collective address: where every rank can reach it.
    let master_host = peers.first().map_or_else(|| spec.bind_host.clone(), |p| p.ip().to_string());
    let hosts: Vec<String> = peers.iter().map(|p| p.ip().to_string()).collect();
    let start = super::backend::Start {
        setup: &reply.backend_setup_json,
        device,
        group: &group,
        master_host: &master_host,
        hosts: &hosts,
        timeout,
    };
    let backend = super::backend::on_start(&reply.backend, &start).map_err(|e| failed(&e))?;
    let data = match reply.data_json.as_str() {
        "" => None,
        json => {
            let mut plan: rtune_driver::data::DataPlan =
                serde_json::from_str(json).map_err(|e| failed(&format!("datasets: {e}")))?;
            if spec.scratch {
                let (rank, world) = (spec.rank as usize, reply.world_size as usize);
                let dir = run_dir.join("datasets");
                plan.bring_down(&dir, rank, world, &settings).map_err(|e| failed(&e))?;
            }
            Some(std::rc::Rc::new(plan))
        }
    };
    let mut ctx = TrainContext::new(ContextParts {
        master_host,
        threads: threads as usize,
        device,
        params,
        run_dir,
        resume,
        start_iteration: reply.start_iteration,
        trial_id: reply.trial_id.clone(),
        trial_name: reply.trial_name.clone(),
        experiment_name: reply.experiment_name.clone(),
        data,
        group,
        backend,
        store,
        upload_async: reply.upload_async,
        scratch: spec.scratch,
        sharding: rtune_driver::config::Sharding::from_name(&reply.sharding),
        link,
    });
    // SAFETY: the offset came from the driver, whose build id equals ours (checked above and by
    // the driver at join).
    let train_fn = unsafe { crate::worker::train_fn_at(spec.train_fn) };
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| train_fn(&mut ctx)));
    ended.links = Some(ctx.links());
    ctx.shut_down_backend();
    ended.unread_params = tracked.unread();
    // A run that ended well waits for its checkpoints' uploads: the finish names them.
    if matches!(&result, Ok(Ok(()))) || matches!(&result, Ok(Err(e)) if is_stop(e)) {
        match ctx.wait_for_uploads() {
            Ok(names) => ended.uploaded = names,
            Err(e) => return Err(TrainEnd::Failed(format!("{e:#}"))),
        }
    }
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if is_stop(&e) => Err(TrainEnd::Stopped),
        Ok(Err(e)) => match e.chain().find_map(|c| c.downcast_ref::<CommandKilled>()) {
            Some(killed) => Err(TrainEnd::Killed(e.to_string(), killed.0)),
            None => Err(TrainEnd::Failed(format!("{e:#}"))),
        },
        Err(_) => Err(TrainEnd::Failed(
            PANIC.lock().ok().and_then(|mut p| p.take()).unwrap_or_else(|| "panicked".into()),
        )),
    }
}

/// The folder a scratch worker works in: the one its node agent gave it, else a new one in the
/// system's temporary folder.
fn scratch_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os(rtune_driver::config::SCRATCH_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir().join(format!("rtune-worker-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    Ok(dir)
}

fn is_stop(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<Error>(), Some(Error::StopRequested))
}

/// The device the pool assigned (none: the CPU).
fn parse_device(text: &str) -> Result<tch::Device> {
    let device = match text {
        "" => Some(rtune_driver::sys::Device::Cpu),
        text => rtune_driver::sys::Device::parse(text),
    };
    device
        .map(crate::cuda::torch_device)
        .ok_or_else(|| Error::Protocol(format!("unknown device {text:?}")))
}

/// The last panic's location and message (`panicked at <where>: <message>`, the message's own
/// lines kept), for the finish message.
static PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Once per process: local mode runs one worker after another in the driver's.
fn install_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut slot) = PANIC.lock() {
                *slot = Some(info.to_string().replacen('\n', " ", 1));
            }
            default(info);
        }));
    });
}
