//! The attempt's state machine. One owner: `run_attempt` owns all of the attempt's state and is
//! the only code that touches it; the hub forwards worker calls here and a task per child
//! forwards its exit.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use super::hub::{Hub, HubCall, Reply};
use super::launch::{in_process_device, spawn_in_process, spawn_local, spawn_remote};
use super::logs::forward_cluster_events;
use super::{
    AttemptOutcome, AttemptSpec, Exit, GroupReport, Launcher, OnReport, RankPlacement, Seat,
};
use crate::error::Result;
use crate::metrics::GroupStart;
use crate::outcome::WorkerFailure;
use crate::proto::{
    FinishRequest, JoinReply, JoinRequest, RegroupReply, RegroupRequest, ReportReply, ReportRequest,
};
use crate::sys::stacks;
use crate::sys::{build_id, sleep_until};

mod regroup;

/// Where a rank stands in the rendezvous.
enum Join {
    NotYet,
    /// Joined; its reply waits until every rank has joined.
    Waiting(JoinRequest, Reply<JoinReply>),
    /// Answered (or refused because the attempt failed).
    Done,
}

struct Worker {
    join: Join,
    reports: u64,
    finish: Option<FinishRequest>,
    exited: bool,
    kill: Option<oneshot::Sender<()>>,
    /// Why it was lost, when it ended by a signal the attempt did not send or with its node.
    lost: Option<String>,
    /// It left an elastic group that went on in place without it.
    gone: bool,
    /// Its call to re-form the group after a lost rank, waiting for the other live ranks'.
    regroup: Option<(RegroupRequest, Reply<RegroupReply>)>,
    /// The reports its group made before it joined in place (0 for a rank there from the
    /// start): its own count starts after them.
    skipped: u64,
}

impl Worker {
    fn started(kill: Option<oneshot::Sender<()>>) -> Worker {
        Worker {
            join: Join::NotYet,
            reports: 0,
            finish: None,
            exited: false,
            kill,
            lost: None,
            gone: false,
            regroup: None,
            skipped: 0,
        }
    }
}

/// Runs one attempt to its end.
pub(crate) async fn run_attempt(
    hub: &Hub,
    spec: &AttemptSpec,
    on_report: &mut dyn OnReport,
) -> Result<AttemptOutcome> {
    let mut calls = hub.register(&spec.run.group, &spec.run.trial.trial_id);
    let (exit_tx, mut exits) = mpsc::unbounded_channel::<(usize, Exit)>();
    let mut workers = Vec::with_capacity(spec.ranks.len());
    if let Launcher::Cluster { client, pg } = &spec.launcher {
        // Watch before starting anything, so no exit is missed.
        match crate::cluster::client::watch(&mut (**client).clone(), *pg).await {
            Ok(stream) => forward_cluster_events(stream, spec, exit_tx.clone()),
            Err(e) => {
                hub.unregister(&spec.run.group);
                return Err(e);
            }
        }
    }
    let spawning = std::time::Instant::now();
    for rank in 0..spec.ranks.len() {
        let started = match &spec.launcher {
            Launcher::Local => {
                spawn_local(hub, spec, (rank, &spec.ranks[rank]), exit_tx.clone()).await
            }
            Launcher::InProcess => spawn_in_process(hub, spec, exit_tx.clone()),
            Launcher::Cluster { client, pg } => {
                spawn_remote(hub, spec, rank, (**client).clone(), *pg).await
            }
        };
        match started {
            Ok(kill) => workers.push(Worker::started(Some(kill))),
            Err(e) => {
                kill_all(&mut workers);
                drain_exits(workers.len(), &mut exits).await;
                hub.unregister(&spec.run.group);
                return Err(e);
            }
        }
    }
    let spawned = std::time::Instant::now();
    let start = GroupStart {
        attempt: spec.attempt,
        reserve_s: spec.reserve_s,
        spawn_s: (spawned - spawning).as_secs_f64(),
        join_s: 0.0,
    };

    let mut state = Attempt::new(spec, workers, (start, spawned));
    let deadline = tokio::time::Instant::now() + spec.run.start_timeout;
    while !state.is_over() {
        // Ranks that join the group in place (see `regroup`).
        for rank in std::mem::take(&mut state.to_spawn) {
            if state.failure.is_some() {
                // The attempt ended before it started them: nothing to wait for.
                state.workers[rank].exited = true;
                continue;
            }
            let placed = state.placed(rank).clone();
            match spawn_local(hub, spec, (rank, &placed), exit_tx.clone()).await {
                Ok(kill) => state.workers[rank].kill = Some(kill),
                Err(e) => state.fail(rank, format!("could not start a rank that joins: {e}"), None),
            }
        }
        let joining =
            state.failure.is_none() && state.workers.iter().any(|w| matches!(w.join, Join::NotYet));
        let flush_due = on_report.flush_due();
        tokio::select! {
            Some(call) = calls.recv() => state.on_call(call, on_report),
            Some((rank, status)) = exits.recv() => state.on_exit(rank, status, on_report),
            _ = sleep_until(state.regroup_by), if state.regroup_by.is_some() => {
                state.regroup_timed_out();
            }
            _ = sleep_until(state.kill_at), if state.kill_at.is_some() => {
                state.kill_at = None;
                kill_all(&mut state.workers);
            }
            _ = sleep_until(flush_due), if flush_due.is_some() => {
                if let Err(e) = on_report.flush() {
                    state.fail(0, format!("driver could not write results: {e}"), None);
                }
            }
            _ = tokio::time::sleep_until(deadline), if joining => {
                let rank = state.workers.iter().position(|w| matches!(w.join, Join::NotYet)).unwrap_or(0);
                state.fail(rank, format!(
                    "did not join within {:?} (see logs/rank_{rank}.stderr in the run directory)",
                    spec.run.start_timeout
                ), None);
            }
        }
    }
    drop(exit_tx);
    hub.unregister(&spec.run.group);
    // Answer calls that raced with the end, so no worker waits on a dropped group.
    calls.close();
    while let Ok(call) = calls.try_recv() {
        refuse(call, Status::aborted("the attempt has ended"));
    }
    // The lowest rank still in the group speaks for it (rank 0 may have left in place).
    let rank0 = state.workers.iter().find(|w| !w.gone).and_then(|w| w.finish.as_ref());
    let train_seconds = rank0.map_or(0.0, |f| f.train_seconds);
    let unread_params = rank0.map(|f| f.unread_params.clone()).unwrap_or_default();
    let stopped = rank0.is_some_and(|f| f.stopped);
    if !state.all_exited() {
        reap_in_background(spec.run.group.clone(), std::mem::take(&mut state.workers), exits);
    }
    // The group's shape before its last losses: the ranks that had not left it in place.
    let world = state.workers.iter().filter(|w| !w.gone || w.lost.is_some()).count();
    let lost: Vec<(usize, String)> = state
        .workers
        .iter_mut()
        .enumerate()
        .filter_map(|(rank, w)| Some((rank, w.lost.take()?)))
        .collect();
    Ok(match state.failure {
        Some(failure) if spec.run.elastic.is_some() && !lost.is_empty() => {
            AttemptOutcome::Lost { ranks: lost, world, failure, not_in_place: state.not_in_place }
        }
        Some(failure) => AttemptOutcome::Failed(failure),
        None => AttemptOutcome::Completed { train_seconds, unread_params, stopped },
    })
}

/// How long an elastic group's attempt that failed waits before it kills the ranks still
/// there: a rank killed from outside makes the others fail on their links at once, and its
/// own exit may be heard after theirs; it must be heard as its own (a lost rank), not as one
/// the attempt killed. Ranks that fail on a lost link exit by themselves meanwhile.
const LOSS_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

struct Attempt<'s> {
    spec: &'s AttemptSpec,
    workers: Vec<Worker>,
    /// Where each rank runs, once every rank has joined.
    seats: Vec<Seat>,
    /// How the group started so far, and when its processes were all started.
    start: (GroupStart, std::time::Instant),
    /// Reports waiting for the other ranks: (rank, request, reply), for the lowest open seq.
    pending: Vec<(usize, ReportRequest, Reply<ReportReply>)>,
    failure: Option<WorkerFailure>,
    stopped: bool,
    /// When to kill the ranks still there, in an elastic group that failed (`LOSS_GRACE`).
    kill_at: Option<std::time::Instant>,
    /// When ranks asked to re-form the group: the others must by then (see `regroup`).
    regroup_by: Option<std::time::Instant>,
    /// Ranks that left an elastic group in place since it last re-formed, and why.
    left: Vec<(usize, String)>,
    /// Ranks joining the group in place, not in it yet (see `regroup`).
    joining: Option<super::Joiners>,
    /// Where the ranks that joined in place are, after `spec.ranks`'.
    joined: Vec<RankPlacement>,
    /// Ranks to start now (they join in place).
    to_spawn: Vec<usize>,
    /// The attempt number the group's checkpoints are named by (see `regroup`).
    checkpoint_attempt: u32,
    /// Why the group could not go on in place after a lost rank (the first reason).
    not_in_place: Option<String>,
}

impl<'s> Attempt<'s> {
    /// The attempt of `spec` whose `workers` were all started as `start` says.
    fn new(
        spec: &'s AttemptSpec,
        workers: Vec<Worker>,
        start: (GroupStart, std::time::Instant),
    ) -> Attempt<'s> {
        Attempt {
            spec,
            workers,
            seats: Vec::new(),
            start,
            pending: Vec::new(),
            failure: None,
            stopped: false,
            kill_at: None,
            regroup_by: None,
            left: Vec::new(),
            joining: None,
            joined: Vec::new(),
            to_spawn: Vec::new(),
            checkpoint_attempt: spec.attempt,
            not_in_place: None,
        }
    }

    /// Where rank `rank` runs.
    fn placed(&self, rank: usize) -> &RankPlacement {
        let first = self.spec.ranks.len();
        self.spec.ranks.get(rank).unwrap_or_else(|| &self.joined[rank - first])
    }

    fn all_exited(&self) -> bool {
        self.workers.iter().all(|w| w.exited)
    }

    /// Every worker has exited, or every one has finished cleanly where that is enough (see
    /// `ends_at_finish`).
    fn is_over(&self) -> bool {
        self.all_exited() || (self.finished_cleanly() && ends_at_finish(self.spec))
    }

    /// Every rank's train function returned (or stopped as asked) and told the driver so.
    fn finished_cleanly(&self) -> bool {
        self.failure.is_none()
            && self.workers.iter().all(|w| w.gone || w.finish.as_ref().is_some_and(|f| f.ok))
    }

    fn fail(&mut self, rank: usize, message: String, status: Option<ExitStatus>) {
        // Ranks that left in place, the group not re-formed yet: lost with the attempt.
        if !self.left.is_empty() {
            let why_not = format!("rank {rank} failed before the group re-formed: {message}");
            self.not_in_place.get_or_insert(why_not);
        }
        for (r, why) in std::mem::take(&mut self.left) {
            self.workers[r].lost = Some(why);
        }
        if self.failure.is_none() {
            self.failure = Some(WorkerFailure {
                attempt: self.spec.attempt,
                rank,
                message,
                signal: status.and_then(|s| s.signal()),
                exit_code: status.and_then(|s| s.code()),
            });
        }
        for (_, _, reply) in self.pending.drain(..) {
            let _ = reply.send(Err(Status::aborted("another rank failed")));
        }
        // Dropping the replies of joins still waiting makes those workers' calls fail.
        for w in &mut self.workers {
            if matches!(w.join, Join::Waiting(..)) {
                w.join = Join::Done;
            }
            if let Some((_, reply)) = w.regroup.take() {
                let _ = reply.send(Err(Status::aborted("the attempt is failing")));
            }
        }
        self.regroup_by = None;
        match self.spec.run.elastic {
            Some(_) if self.kill_at.is_none() => {
                self.kill_at = Some(std::time::Instant::now() + LOSS_GRACE);
            }
            Some(_) => {}
            None => kill_all(&mut self.workers),
        }
    }

    fn rank_of(&self, key: Option<&crate::proto::WorkerKey>) -> std::result::Result<usize, Status> {
        let key = key.ok_or_else(|| Status::invalid_argument("missing worker key"))?;
        if key.attempt != self.spec.attempt {
            return Err(Status::failed_precondition(format!(
                "attempt {} has ended (now {})",
                key.attempt, self.spec.attempt
            )));
        }
        let rank = key.rank as usize;
        if rank >= self.workers.len() {
            return Err(Status::invalid_argument(format!("no rank {rank}")));
        }
        if self.failure.is_some() {
            return Err(Status::aborted("the attempt is failing"));
        }
        Ok(rank)
    }

    fn on_call(&mut self, call: HubCall, on_report: &mut dyn OnReport) {
        match call {
            HubCall::Join(request, reply) => match self.rank_of(request.key.as_ref()) {
                Ok(rank) => self.on_join(rank, request, reply, on_report),
                Err(status) => drop(reply.send(Err(status))),
            },
            HubCall::Report(request, reply) => match self.rank_of(request.key.as_ref()) {
                Ok(rank) => self.on_report(rank, request, reply, on_report),
                Err(status) => drop(reply.send(Err(status))),
            },
            HubCall::Stacks(reply) => self.on_stacks(reply),
            HubCall::Regroup(request, reply) => match self.rank_of(request.key.as_ref()) {
                Ok(rank) => self.on_regroup(rank, request, reply, on_report),
                Err(status) => drop(reply.send(Err(status))),
            },
            HubCall::Finish(request, reply) => {
                let _ = reply.send(Ok(Default::default()));
                let rank = request.key.as_ref().map_or(0, |k| k.rank as usize);
                if rank < self.workers.len()
                    && request.key.as_ref().is_some_and(|k| k.attempt == self.spec.attempt)
                {
                    if rank == 0
                        && request.ok
                        && let Err(e) = on_report.uploaded(&request.uploaded)
                    {
                        self.fail(
                            0,
                            format!("driver could not record an uploaded checkpoint: {e}"),
                            None,
                        );
                        return;
                    }
                    self.on_finish(rank, request);
                }
            }
        }
    }

    fn on_join(
        &mut self,
        rank: usize,
        request: JoinRequest,
        reply: Reply<JoinReply>,
        on_report: &mut dyn OnReport,
    ) {
        if request.build_id != build_id::build_id() {
            let message = format!(
                "worker binary differs from the driver's (build id {} vs driver {}); \
                 the executable was rebuilt or replaced while running: restart the driver",
                build_id::hex(&request.build_id),
                build_id::hex(build_id::build_id())
            );
            let _ = reply.send(Err(Status::failed_precondition(message.clone())));
            self.fail(rank, message, None);
            return;
        }
        self.workers[rank].join = Join::Waiting(request, reply);
        if !self.seats.is_empty() {
            // A rank joining the running group: answered as it re-forms.
            self.try_regroup(on_report);
            return;
        }
        if self.workers.iter().any(|w| matches!(w.join, Join::NotYet)) {
            return;
        }
        let joined: Vec<&JoinRequest> = self
            .workers
            .iter()
            .filter_map(|w| match &w.join {
                Join::Waiting(request, _) => Some(request),
                _ => None,
            })
            .collect();
        let peers: Vec<String> = joined.iter().map(|r| r.collective_address.clone()).collect();
        let seats: Vec<Seat> =
            joined.iter().zip(&self.spec.ranks).map(|(r, placed)| seat(r, placed)).collect();
        let setup = self.spec.run.backend.setup(&self.spec.run.group, &seats);
        let (mut start, spawned) = self.start;
        start.join_s = spawned.elapsed().as_secs_f64();
        on_report.placed(&seats, start);
        self.seats = seats;
        let group_id = rand::random::<u64>();
        for rank in 0..self.workers.len() {
            let w = &mut self.workers[rank];
            let Join::Waiting(_, reply) = std::mem::replace(&mut w.join, Join::Done) else {
                continue;
            };
            let _ = reply.send(Ok(self.join_reply(
                rank,
                &self.spec.ranks[rank],
                (&peers, group_id),
                &setup,
            )));
        }
    }

    /// What the rank of the group `group_rank`, placed at `placed`, is told as it joins a group
    /// of `peers` (its collective listeners, by rank) whose ring is `group_id`, with its
    /// backend's `setup`.
    fn join_reply(
        &self,
        group_rank: usize,
        placed: &RankPlacement,
        (peers, group_id): (&[String], u64),
        setup: &str,
    ) -> JoinReply {
        let run = &self.spec.run;
        let device = match (&placed.cuda_visible_devices, &self.spec.launcher) {
            (None, _) => "cpu".to_owned(),
            (Some(given), Launcher::InProcess) => in_process_device(given),
            // A worker process sees its GPUs only, the first as `cuda:0`.
            (Some(_), _) => "cuda:0".to_owned(),
        };
        JoinReply {
            peers: peers.to_vec(),
            world_size: peers.len() as u32,
            local_rank: placed.local_rank,
            local_world_size: placed.local_world_size,
            node_rank: placed.node_rank,
            params_json: run.params_json.clone(),
            run_dir: run.run_dir.display().to_string(),
            resume_checkpoint: self
                .spec
                .resume
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            resume_url: self.spec.resume_url.clone().unwrap_or_default(),
            store_settings_json: serde_json::to_string(&run.store_settings)
                .expect("settings serialise"),
            start_iteration: self.spec.start_iteration,
            collective_group_id: group_id,
            collective_timeout_ms: run.collective_timeout.as_millis() as u64,
            device,
            num_threads: run.num_threads,
            trial_id: run.trial.trial_id.clone(),
            trial_name: run.trial.trial_name.clone(),
            experiment_name: run.trial.experiment_name.clone(),
            data_json: run.data_json.to_string(),
            store_url: run.store_url.clone().unwrap_or_default(),
            upload_async: run.upload_async,
            sharding: run.sharding.map(|s| s.name().to_owned()).unwrap_or_default(),
            elastic: run.elastic.is_some(),
            group_rank: group_rank as u32,
            backend: run.backend.name().to_owned(),
            backend_setup_json: setup.to_owned(),
            ..Default::default()
        }
    }

    fn on_report(
        &mut self,
        rank: usize,
        request: ReportRequest,
        reply: Reply<ReportReply>,
        on_report: &mut dyn OnReport,
    ) {
        let expected = self.workers[rank].reports + 1;
        if request.seq != expected {
            let message = format!("sent report {} but report {expected} was due", request.seq);
            let _ = reply.send(Err(Status::invalid_argument(message.clone())));
            self.fail(rank, message, None);
            return;
        }
        self.workers[rank].reports = expected;
        self.pending.push((rank, request, reply));
        self.complete_report(on_report);
    }

    /// The ranks still in the group.
    fn live(&self) -> usize {
        self.workers.iter().filter(|w| !w.gone).count()
    }

    /// Records the report every live rank has made, when they all have: the lowest rank's is
    /// the run's.
    fn complete_report(&mut self, on_report: &mut dyn OnReport) {
        if self.pending.is_empty() || self.pending.len() < self.live() {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|(rank, ..)| *rank);
        // The group's count of reports (a rank that joined in place counts from there).
        let expected = pending[0].1.seq + self.workers[pending[0].0].skipped;
        let first = &pending[0].1;
        let joinable = self.can_take_joiners() && pending.iter().all(|(_, r, _)| r.joinable);
        let report = GroupReport {
            iteration: self.spec.start_iteration + expected,
            metrics_json: first.metrics_json.clone(),
            checkpoint: first.checkpoint.clone(),
            uploaded: first.uploaded.clone(),
            ranks: pending.iter().map_while(|(_, request, _)| request.times).collect(),
            joinable,
        };
        match on_report.report(report) {
            Ok(stop) => {
                self.stopped |= stop;
                let joiners = (!stop && joinable).then(|| on_report.joiners()).flatten();
                let regroup = joiners.is_some();
                let iteration = self.spec.start_iteration + expected;
                for (_, _, reply) in pending {
                    let answer = ReportReply { stop, training_iteration: iteration, regroup };
                    let _ = reply.send(Ok(answer));
                }
                if let Some(joiners) = joiners {
                    self.take_in(joiners, expected);
                }
            }
            Err(e) => {
                let message = format!("driver could not record report {expected}: {e}");
                self.fail(0, message, None);
            }
        }
    }

    fn on_finish(&mut self, rank: usize, request: FinishRequest) {
        let (ok, error) = (request.ok, request.error.clone());
        let reports = self.workers[rank].reports + self.workers[rank].skipped;
        self.workers[rank].finish = Some(request);
        let made = |w: &Worker| w.reports + w.skipped;
        if !ok {
            self.fail(rank, error, None);
        } else if let Some(max) = self.workers.iter().filter(|w| !w.gone).map(made).max()
            && max > reports
            && !self.stopped
        {
            self.fail(
                rank,
                format!(
                    "returned after {reports} reports while another rank made {max}; \
                     every rank must call report the same number of times"
                ),
                None,
            );
        }
    }

    /// Where each rank is (`rtune stack`), taken off the attempt's task: each worker process on
    /// this machine is asked at once, and local mode's rank is this process's to read.
    fn on_stacks(&self, reply: Reply<crate::proto::TrialStacks>) {
        let launcher = self.spec.launcher.clone();
        let ranks: Vec<(Seat, Option<&'static str>)> = match self.seats.is_empty() {
            // Not every rank has joined: nothing is asked.
            true => (0..self.workers.len())
                .map(|_| {
                    (
                        Seat { node: String::new(), address: String::new(), gpus: None, pid: 0 },
                        Some("not joined yet"),
                    )
                })
                .collect(),
            false => self
                .seats
                .iter()
                .zip(&self.workers)
                .map(|(seat, w)| {
                    let ended = (w.exited || w.finish.is_some()).then_some("finished");
                    (seat.clone(), ended)
                })
                .collect(),
        };
        let (trial_id, attempt) = (self.spec.run.trial.trial_id.clone(), self.spec.attempt);
        tokio::task::spawn_blocking(move || {
            let stack = |(rank, (seat, ended)): (usize, &(Seat, Option<&str>))| {
                let text = match (ended, &launcher) {
                    (Some(why), _) => format!("no stack: {why}\n"),
                    (None, Launcher::InProcess) => stacks::describe(),
                    (None, Launcher::Local) => {
                        stacks::ask_process(seat.pid).unwrap_or_else(|e| format!("no stack: {e}\n"))
                    }
                    (None, Launcher::Cluster { .. }) => format!(
                        "no stack: rank {rank} runs on {}; rtune stack reads the ranks on the \
                         driver's machine only\n",
                        seat.node
                    ),
                };
                let node = seat.node.clone();
                crate::proto::RankStack { rank: rank as u32, node, pid: seat.pid, text }
            };
            let ranks = std::thread::scope(|scope| {
                let asked: Vec<_> =
                    ranks.iter().enumerate().map(|r| scope.spawn(move || stack(r))).collect();
                asked.into_iter().filter_map(|a| a.join().ok()).collect()
            });
            let _ = reply.send(Ok(crate::proto::TrialStacks { trial_id, attempt, ranks }));
        });
    }

    fn on_exit(&mut self, rank: usize, exit: Exit, on_report: &mut dyn OnReport) {
        let Some(worker) = self.workers.get(rank) else { return };
        if worker.exited {
            return;
        }
        let status = match exit {
            Exit::Status(status) => status,
            Exit::Lost(why) => {
                self.workers[rank].exited = true;
                self.workers[rank].kill = None;
                if !self.leave_in_place(rank, &why, on_report) {
                    self.workers[rank].lost = Some(why.clone());
                    self.fail(rank, why, None);
                }
                return;
            }
        };
        self.workers[rank].exited = true;
        // Still there to kill: the signal that ended it was not the attempt's.
        let killed_from_outside = self.workers[rank].kill.take().is_some();
        let finished_ok = self.workers[rank].finish.as_ref().is_some_and(|f| f.ok);
        if status.success() && finished_ok {
            return;
        }
        let message = match (status.signal(), &self.workers[rank].finish) {
            (_, Some(finish)) if !finish.ok => finish.error.clone(),
            (Some(signal), _) => format!("killed by signal {signal} ({})", signal_name(signal)),
            (None, _) if status.success() => {
                "exited without finishing (did the train function call process::exit?)".into()
            }
            (None, _) => format!(
                "exited with code {} (see logs/rank_{rank}.stderr in the run directory)",
                status.code().unwrap_or(-1)
            ),
        };
        if killed_from_outside && status.signal().is_some() {
            if self.leave_in_place(rank, &message, on_report) {
                return;
            }
            self.workers[rank].lost = Some(message.clone());
        }
        self.fail(rank, message, Some(status));
    }
}

/// Where a rank placed at `placed` that joined with `request` runs.
fn seat(request: &JoinRequest, placed: &RankPlacement) -> Seat {
    Seat {
        node: Some(request.hostname.clone())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| placed.bind_host.clone()),
        address: placed.bind_host.clone(),
        gpus: placed.cuda_visible_devices.as_ref().map(|given| {
            Some(request.cuda_visible_devices.clone())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| given.clone())
        }),
        pid: request.pid,
    }
}

/// Whether the attempt ends as soon as every rank has finished cleanly, without waiting for
/// their processes to exit: local workers that hold no GPU. Once a worker has told the driver
/// how it ended, its results are whole and its logs flushed; what is left is the kernel's
/// teardown of a process with libtorch loaded, 5-10 ms on a busy machine, during which it
/// holds some CPU time and nothing else, while a short trial's successor would wait for it.
/// A GPU's memory is freed only at the exit, so a GPU worker's exit is waited for before its
/// resources go to another trial; a remote worker's too (its node reports it).
fn ends_at_finish(spec: &AttemptSpec) -> bool {
    matches!(spec.launcher, Launcher::Local)
        && spec.ranks.iter().all(|r| r.cuda_visible_devices.is_none())
}

/// How long a worker that finished cleanly may take to exit before it is killed.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits, in the background, for the exits of workers that finished cleanly (see
/// `ends_at_finish`); one still there after `EXIT_GRACE` is killed. An exit that is not clean
/// is logged: the attempt's results are whole, so it changes nothing else.
fn reap_in_background(
    group: String,
    mut workers: Vec<Worker>,
    mut exits: mpsc::UnboundedReceiver<(usize, Exit)>,
) {
    tokio::spawn(async move {
        let grace = tokio::time::sleep(EXIT_GRACE);
        tokio::pin!(grace);
        let mut killed = false;
        while !workers.iter().all(|w| w.exited) {
            tokio::select! {
                exit = exits.recv() => {
                    let Some((rank, exit)) = exit else { break };
                    let Some(worker) = workers.get_mut(rank) else { continue };
                    worker.exited = true;
                    worker.kill = None;
                    match exit {
                        Exit::Status(status) if status.success() || killed => {}
                        Exit::Status(status) => tracing::warn!(
                            "group {group}: rank {rank} finished cleanly, then exited with {status}"
                        ),
                        Exit::Lost(why) => tracing::warn!("group {group}: rank {rank}: {why}"),
                    }
                }
                _ = &mut grace, if !killed => {
                    tracing::warn!(
                        "group {group}: a worker finished but had not exited after {EXIT_GRACE:?}; \
                         killed"
                    );
                    killed = true;
                    kill_all(&mut workers);
                }
            }
        }
    });
}

fn refuse(call: HubCall, status: Status) {
    match call {
        HubCall::Join(_, reply) => drop(reply.send(Err(status))),
        HubCall::Report(_, reply) => drop(reply.send(Err(status))),
        HubCall::Finish(_, reply) => drop(reply.send(Ok(Default::default()))),
        HubCall::Stacks(reply) => drop(reply.send(Err(status))),
        HubCall::Regroup(_, reply) => drop(reply.send(Err(status))),
    }
}

fn kill_all(workers: &mut [Worker]) {
    for w in workers {
        if let Some(kill) = w.kill.take() {
            let _ = kill.send(());
        }
    }
}

async fn drain_exits(started: usize, exits: &mut mpsc::UnboundedReceiver<(usize, Exit)>) {
    let mut left = started;
    while left > 0 && exits.recv().await.is_some() {
        left -= 1;
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGBUS => "SIGBUS",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::group::RankPlacement;
    use crate::proto::WorkerKey;

    fn spec(world: usize) -> AttemptSpec {
        let nodes = vec![0u64; world];
        let run = crate::group::GroupSpec {
            group: "g".into(),
            train_fn: 0,
            params_json: "{}".into(),
            run_dir: PathBuf::from("/nonexistent"),
            store_settings: Default::default(),
            num_threads: 1,
            trial: Default::default(),
            collective_timeout: Duration::from_secs(1),
            start_timeout: Duration::from_secs(1),
            warm_start: false,
            env: Vec::new(),
            data_json: "".into(),
            store_url: None,
            upload_async: false,
            sharding: None,
            elastic: None,
            in_place: false,
            backend: std::sync::Arc::new(crate::group::TorchConfig::new()),
        };
        AttemptSpec {
            run: std::sync::Arc::new(run),
            attempt: 0,
            ranks: RankPlacement::from_nodes(&nodes, &[], &[]),
            launcher: Launcher::Local,
            resume: None,
            resume_url: None,
            start_iteration: 0,
            reserve_s: 0.0,
        }
    }

    fn two_workers(spec: &AttemptSpec) -> Attempt<'_> {
        let workers = vec![Worker::started(None), Worker::started(None)];
        Attempt::new(spec, workers, (GroupStart::default(), std::time::Instant::now()))
    }

    fn join(
        rank: u32,
        build_id: Vec<u8>,
    ) -> (JoinRequest, oneshot::Receiver<std::result::Result<JoinReply, Status>>, Reply<JoinReply>)
    {
        let (tx, rx) = oneshot::channel();
        let request = JoinRequest {
            key: Some(WorkerKey { group: "g".into(), attempt: 0, rank }),
            build_id,
            pid: 1,
            collective_address: format!("127.0.0.1:{}", 1000 + rank),
            hostname: String::new(),
            cuda_visible_devices: String::new(),
        };
        (request, rx, tx)
    }

    fn finish(rank: u32, ok: bool) -> FinishRequest {
        FinishRequest {
            key: Some(WorkerKey { group: "g".into(), attempt: 0, rank }),
            ok,
            error: if ok { String::new() } else { "boom".into() },
            stopped: false,
            train_seconds: 0.1,
            ..FinishRequest::default()
        }
    }

    /// Local CPU workers that have all finished cleanly end the attempt before they exit; one
    /// rank still going, one that failed, or a GPU among the ranks keeps it waiting.
    #[test]
    fn an_attempt_of_cpu_workers_ends_when_every_rank_has_finished_cleanly() {
        let cpu = spec(2);
        let mut attempt = two_workers(&cpu);
        assert!(ends_at_finish(&cpu));
        attempt.on_finish(0, finish(0, true));
        assert!(!attempt.finished_cleanly(), "rank 1 still trains");
        attempt.on_finish(1, finish(1, true));
        assert!(attempt.is_over() && !attempt.all_exited());

        let mut failed = two_workers(&cpu);
        failed.on_finish(0, finish(0, true));
        failed.on_finish(1, finish(1, false));
        assert!(!failed.finished_cleanly(), "a failed rank's exit is waited for");

        let mut gpu = spec(2);
        gpu.ranks = RankPlacement::from_nodes(&[0u64, 0], &[], &[Some("0".into()), None]);
        assert!(!ends_at_finish(&gpu), "a GPU is free only once its process has exited");
    }

    #[test]
    fn a_worker_from_another_binary_is_refused_and_fails_the_attempt() {
        let spec = spec(2);
        let mut attempt = two_workers(&spec);
        let (request, mut answer, reply) = join(1, vec![0xde, 0xad]);
        attempt.on_join(1, request, reply, &mut Placed::default());
        let status = answer.try_recv().expect("answered").expect_err("refused");
        assert!(status.message().contains("differs from the driver's"), "{}", status.message());
        let failure = attempt.failure.expect("the attempt fails");
        assert_eq!(failure.rank, 1);
        assert!(failure.message.contains("build id dead"), "{}", failure.message);
    }

    #[test]
    fn joins_are_answered_together_with_every_peer() {
        let spec = spec(2);
        let mut attempt = two_workers(&spec);
        let mut placed = Placed::default();
        let (r0, mut a0, t0) = join(0, build_id::build_id().to_vec());
        attempt.on_join(0, r0, t0, &mut placed);
        assert!(a0.try_recv().is_err(), "rank 0 waits for rank 1");
        let (r1, mut a1, t1) = join(1, build_id::build_id().to_vec());
        attempt.on_join(1, r1, t1, &mut placed);
        let (x, y) = (a0.try_recv().unwrap().unwrap(), a1.try_recv().unwrap().unwrap());
        assert_eq!(x.peers, vec!["127.0.0.1:1000", "127.0.0.1:1001"]);
        assert_eq!(x.peers, y.peers);
        assert_eq!(x.collective_group_id, y.collective_group_id);
        assert_eq!((y.local_rank, y.local_world_size, y.node_rank), (1, 2, 0));
        // The group's backend and its setup, the same for every rank.
        assert_eq!((x.backend.as_str(), y.backend.as_str()), ("torch", "torch"));
        assert_eq!(x.backend_setup_json, y.backend_setup_json);
        let nodes: Vec<(&str, Option<&str>)> =
            placed.0.iter().map(|s| (s.node.as_str(), s.gpus.as_deref())).collect();
        assert_eq!(nodes, [("127.0.0.1", None); 2]);
        assert!(attempt.failure.is_none());
    }

    /// Two ranks given the same GPU (half of it each) are told by the Torch backend to average
    /// through the CPU ring; given two GPUs, NCCL. The device each rank reports (after a node agent's mapping)
    /// is what counts, and what the run records.
    #[test]
    fn ranks_sharing_a_physical_gpu_are_told_so_at_join() {
        for (devices, shared) in [(["0", "0"], true), (["0", "1"], false), (["3", "3"], true)] {
            let mut spec = spec(2);
            let given = [Some("0".to_owned()), Some("0".to_owned())];
            spec.ranks = RankPlacement::from_nodes(&[0u64, 0], &[], &given);
            let mut attempt = two_workers(&spec);
            let mut placed = Placed::default();
            let mut answers = Vec::new();
            for (rank, device) in devices.iter().enumerate() {
                let (mut request, answer, reply) = join(rank as u32, build_id::build_id().to_vec());
                request.hostname = "gpu-node".into();
                request.cuda_visible_devices = (*device).into();
                attempt.on_join(rank, request, reply, &mut placed);
                answers.push(answer);
            }
            for mut answer in answers {
                let reply = answer.try_recv().unwrap().unwrap();
                let setup: crate::group::backend::TorchSetup =
                    serde_json::from_str(&reply.backend_setup_json).unwrap();
                let host_ring = setup.gpu == crate::group::backend::GpuCollective::HostRing;
                assert_eq!(host_ring, shared, "{devices:?}");
                assert_eq!(reply.device, "cuda:0");
            }
            let recorded: Vec<Option<String>> = placed.0.iter().map(|s| s.gpus.clone()).collect();
            assert_eq!(recorded, devices.map(|d| Some(d.to_owned())));
        }
    }

    /// What a run records of an attempt, for the tests: its seats.
    #[derive(Default)]
    struct Placed(Vec<Seat>);

    impl OnReport for Placed {
        fn report(&mut self, _: GroupReport) -> Result<bool> {
            Ok(false)
        }

        fn flush_due(&self) -> Option<std::time::Instant> {
            None
        }

        fn flush(&mut self) -> Result<()> {
            Ok(())
        }

        fn placed(&mut self, seats: &[Seat], _: GroupStart) {
            self.0 = seats.to_vec();
        }

        fn uploaded(&mut self, _: &[String]) -> Result<()> {
            Ok(())
        }

        fn resized(&mut self, _: usize, _: usize, _: &str) {}

        fn fresh_attempt(&mut self) -> u32 {
            unreachable!("no group re-forms in these tests")
        }
    }
}
