//! The Train run as states (Ray Train v2's controller): a run is in one [`Phase`] at a time,
//! and [`Run::step`] takes it to the next, until it is done.
//!
//! ```text
//! Placing ──▶ Running ──▶ Done (completed, halted, or failed for good)
//!    ▲           │
//!    ├─ Resizing ┤   an elastic group at another size, from its latest checkpoint
//!    └─ Restarting   a failure retried, from its latest checkpoint
//! ```
//!
//! What an attempt's end leads to is the policies' decision (`policy::after_attempt`: the
//! scaling policy's resize, else the failure policy's); where the next attempt resumes is
//! [`ResumePoint`], taken in one place (`Run::roll_back`). The attempt itself, its processes
//! and their calls, is `group::run_attempt`'s; what is recorded of its reports, `recording`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::placement::{Elastic, Placement, Target};
use super::policy::{self, Next, Resize, ScalingPolicy};
use super::recording::Recording;
use super::{Steering, TorchTrainer, TrainFnId};
use crate::cluster::client::{self, ReserveOptions};
use crate::error::{Error, Result};
use crate::group::hub::Hub;
use crate::group::{AttemptSpec, GroupSpec, run_attempt};
use crate::outcome::{Checkpoint, TrainResult, WorkerFailure};
use crate::record::{RunIdentity, RunState};
use crate::runtime::Driver;
use crate::storage::remote::Remote;

/// Where a run stands.
enum Phase {
    /// Its next attempt is placed (on a cluster: reserved), taking what room there is for an
    /// elastic group when `take_room`.
    Placing {
        take_room: bool,
    },
    /// An attempt runs.
    Running(AttemptSpec),
    /// The attempt ended for this resize; the group goes on at its new size.
    Resizing(Resize),
    /// The attempt failed, and the run tries again.
    Restarting(WorkerFailure),
    Done(End),
}

/// How a run ended.
enum End {
    /// The train function ran to its end (or stopped as asked).
    Completed { train_seconds: f64, unread_params: Vec<String> },
    /// The run was being stopped when its attempt ended.
    Halted,
    /// Its failures ran out.
    Failed,
}

/// Where an attempt starts: a checkpoint (None: the beginning) and the iterations before it.
struct ResumePoint {
    checkpoint: Option<Checkpoint>,
    iteration: u64,
}

impl ResumePoint {
    fn at(checkpoint: Option<Checkpoint>) -> Result<ResumePoint> {
        let iteration = checkpoint.as_ref().map_or(Ok(0), Checkpoint::iteration)?;
        Ok(ResumePoint { checkpoint, iteration })
    }
}

/// A run in flight: everything its phases share.
pub(super) struct Run<'t, 'd> {
    trainer: &'t TorchTrainer,
    steering: &'t mut (dyn Steering + 'd),
    /// What every attempt's group shares.
    group: Arc<GroupSpec>,
    hub: Arc<Hub>,
    placement: Placement,
    /// An elastic group's policy and the resizes it asked for.
    elastic: Option<Elastic<'t>>,
    record: RunState,
    /// The run's store, where ranks that do not see this machine's files resume from.
    store: Option<Remote>,
    resume: ResumePoint,
    /// Attempts are numbered in turn from the first; a group that re-forms in place without
    /// its rank 0 takes the next number for its checkpoints' names (`OnReport::fresh_attempt`).
    first_attempt: u32,
    next_attempt: u32,
    failures: Vec<WorkerFailure>,
    /// How long the local pool took to reserve the group (once for all attempts): said with
    /// the first attempt's start.
    local_reserve_s: f64,
}

impl<'t, 'd> Run<'t, 'd> {
    /// Runs `trainer` in `run_dir` where `target` says, steered by `steering`, to its end.
    pub(super) async fn to_end(
        trainer: &'t TorchTrainer,
        driver: &'static Driver,
        (run_dir, params_json): (PathBuf, String),
        target: Target,
        steering: &'t mut (dyn Steering + 'd),
    ) -> Result<TrainResult> {
        let mut run = Run::start(trainer, driver, (run_dir, params_json), target, steering).await?;
        let mut phase = Phase::Placing { take_room: true };
        loop {
            phase = match phase {
                Phase::Done(end) => return run.finish(end).await,
                phase => run.step(phase).await?,
            };
        }
    }

    /// The run before its first attempt: placed where `target` says, its hub started, its
    /// record made (or picked up from `run_dir`).
    async fn start(
        trainer: &'t TorchTrainer,
        driver: &'static Driver,
        (run_dir, params_json): (PathBuf, String),
        target: Target,
        steering: &'t mut (dyn Steering + 'd),
    ) -> Result<Run<'t, 'd>> {
        // On a cluster the hub is reachable from other hosts: only this driver's workers may
        // call it, with the cluster token (or the driver's own when the cluster has none).
        let hub_token = match &target {
            Target::Local(..) => None,
            Target::Cluster { token, .. } => Some(
                token
                    .clone()
                    .filter(|t| !t.is_empty())
                    .unwrap_or_else(|| driver.own_token().into()),
            ),
        };
        let (placement, local_reserve_s) = trainer.placement(target, &run_dir).await?;
        let hub = driver.hub(placement.hub_ip().await?, hub_token).await?;
        let identity = RunIdentity {
            trial_id: trainer.trial_id.clone(),
            config: serde_json::to_value(&trainer.params).expect("params serialise"),
            pid: std::process::id(),
            hostname: crate::sys::hostname(),
            node_ip: hub.ip().to_string(),
        };
        let (mut record, picked, first_attempt) = match trainer.pick_up {
            true => RunState::pick_up(&run_dir, &trainer.run, identity)?,
            false => (RunState::new(&run_dir, &trainer.run, identity), None, 0),
        };
        let resume = ResumePoint::at(picked.or_else(|| trainer.resume.clone()))?;
        // On a store, checkpoints ranks report come down into the run's folder here.
        let store = match &trainer.store_url {
            Some(url) => Some(Remote::with_settings(url, &trainer.run.store)?),
            None => None,
        };
        record.fetch_from(store.clone());
        let elastic = ScalingPolicy::of(&trainer.scaling).map(|policy| Elastic {
            driver,
            scaling: &trainer.scaling,
            label: trainer.pool_label(),
            policy,
            resize: None,
            asked: None,
        });
        Ok(Run {
            group: Arc::new(trainer.group_spec(run_dir, params_json)),
            trainer,
            steering,
            hub,
            placement,
            elastic,
            record,
            store,
            resume,
            first_attempt,
            next_attempt: first_attempt,
            failures: Vec::new(),
            local_reserve_s,
        })
    }

    /// Takes the run from `phase` to its next.
    async fn step(&mut self, phase: Phase) -> Result<Phase> {
        Ok(match phase {
            // A run asked to stop between attempts (after a failure it would retry) starts
            // none: its stop is its end.
            Phase::Placing { .. } if self.steering.halting() => Phase::Done(End::Halted),
            Phase::Placing { take_room } => Phase::Running(self.place(take_room).await?),
            Phase::Running(spec) => self.run(spec).await?,
            Phase::Resizing(resize) => {
                let Resize { from, to, why } = &resize;
                tracing::info!(run = %self.group.run_dir.display(), "resized from {from} to {to} ranks: {why}");
                self.record.resized(*from, *to, why)?;
                // Its processes are gone: their room goes to the run that waits. On a
                // cluster it is placed anew, on the nodes left (and in the room it grew into).
                self.placement.shrink(from.saturating_sub(*to));
                self.placement.release().await;
                self.roll_back()?;
                Phase::Placing { take_room: resize.grows() }
            }
            Phase::Restarting(failure) => {
                self.failures.push(failure);
                // A cluster group may have lost a node: ask for a fresh placement.
                self.placement.release().await;
                self.roll_back()?;
                Phase::Placing { take_room: true }
            }
            Phase::Done(_) => unreachable!("a run that is done takes no step"),
        })
    }

    /// The next attempt, placed: an elastic group starts with all the room it may take;
    /// later, it grows at its reports (after a lost rank too, at its next checkpoint), or on a
    /// cluster at its next start.
    async fn place(&mut self, take_room: bool) -> Result<AttemptSpec> {
        let attempt = self.next_attempt;
        self.next_attempt += 1;
        let began = Instant::now();
        let max = self.trainer.scaling.max_ranks();
        let grow = self.elastic.is_some() && take_room && self.steering.may_grow(max);
        if let Some(elastic) =
            self.elastic.as_mut().filter(|_| grow && attempt == self.first_attempt)
        {
            let by = elastic.policy.room_to_grow(self.placement.world());
            elastic.grow(&mut self.placement, by);
        }
        let (ranks, launcher) = self.placement.for_attempt(attempt, grow).await?;
        let reserve_s = std::mem::take(&mut self.local_reserve_s) + began.elapsed().as_secs_f64();
        let resume_url = match (&self.store, &self.resume.checkpoint) {
            (Some(store), Some(checkpoint)) => Some(in_store(store, checkpoint).await?),
            _ => None,
        };
        self.record.begin_attempt(attempt, self.resume.iteration)?;
        self.steering.started();
        Ok(AttemptSpec {
            run: self.group.clone(),
            attempt,
            ranks,
            launcher,
            resume: self.resume.checkpoint.as_ref().map(|c| c.path().to_owned()),
            resume_url,
            start_iteration: self.resume.iteration,
            reserve_s,
        })
    }

    /// Runs the attempt `spec` to its end; the phase its end leads to.
    async fn run(&mut self, spec: AttemptSpec) -> Result<Phase> {
        let mut recording = Recording {
            run: &mut self.record,
            steering: &mut *self.steering,
            elastic: self.elastic.as_mut(),
            placement: &mut self.placement,
            joiners: None,
            next_attempt: &mut self.next_attempt,
        };
        let outcome = run_attempt(&self.hub, &spec, &mut recording).await?;
        let asked = self.elastic.as_mut().and_then(|e| e.resize.take());
        let steering = &*self.steering;
        let next = policy::after_attempt(
            outcome,
            asked,
            self.elastic.as_ref().map(|e| &e.policy),
            &self.trainer.run.failure_config,
            (self.failures.len(), || steering.halting()),
        );
        self.say(spec.attempt, &next);
        Ok(match next {
            Next::Finish { train_seconds, unread_params } => {
                Phase::Done(End::Completed { train_seconds, unread_params })
            }
            Next::Resize(resize) => Phase::Resizing(resize),
            Next::Retry(failure) => Phase::Restarting(failure),
            Next::Halt(_) => Phase::Done(End::Halted),
            Next::Fail(failure) => {
                self.failures.push(failure);
                Phase::Done(End::Failed)
            }
        })
    }

    /// Says in the log how attempt `attempt` failed, as the decision on it goes.
    fn say(&self, attempt: u32, next: &Next) {
        let run = self.group.run_dir.display();
        match next {
            Next::Halt(failure) => tracing::info!(
                run = %run,
                "attempt {attempt} ended while the run was being stopped, not counted as a \
                 failure: {failure}"
            ),
            // Retried from the latest checkpoint: said as it happens.
            Next::Retry(failure) => {
                tracing::warn!(run = %run, "attempt {attempt} failed: {failure}")
            }
            // The run's end, which says it too (a sweep shows it once).
            Next::Fail(failure) => tracing::warn!(
                target: crate::log::TRIAL_FAILED,
                run = %run,
                "attempt {attempt} failed: {failure}"
            ),
            Next::Finish { .. } | Next::Resize(_) => {}
        }
    }

    /// The next attempt resumes from the latest recorded checkpoint (or from the one the run
    /// was given, or from the start): the reports after it are rolled back.
    fn roll_back(&mut self) -> Result<()> {
        let latest = self.record.roll_back()?;
        self.resume = ResumePoint::at(latest.or_else(|| self.trainer.resume.clone()))?;
        Ok(())
    }

    /// The run's end: its resources given back, its record closed, and its result.
    async fn finish(self, end: End) -> Result<TrainResult> {
        let Run { trainer, mut placement, mut record, group, failures, .. } = self;
        placement.release().await;
        // The group's resources go back before the run's end is made durable (its syncs): a
        // trial waiting for them need not wait for those.
        drop(placement);
        record.end()?;
        let failed = matches!(end, End::Failed);
        let (train_seconds, unread_params) = match end {
            End::Completed { train_seconds, unread_params } => (train_seconds, unread_params),
            End::Halted | End::Failed => (0.0, Vec::new()),
        };
        let error = if failed {
            let last = failures.last().expect("a failure was recorded");
            Some(format!("training failed after {} attempt(s); {last}", failures.len()))
        } else if trainer.run.strict_params && !unread_params.is_empty() {
            Some(format!(
                "{} (strict_params: read it in the train function, or take it out of the \
                 params)",
                super::unread_note(&unread_params, &trainer.params)
            ))
        } else {
            None
        };
        let run_dir = group.run_dir.clone();
        let mut result = record.into_result(run_dir, error, failures, train_seconds);
        result.unread_params = unread_params;
        Ok(result)
    }
}

impl TorchTrainer {
    /// Where the run's attempts go, as `target` says, and how long its local reservation took
    /// (0 on a cluster, reserved per attempt).
    async fn placement(
        &self,
        target: Target,
        run_dir: &std::path::Path,
    ) -> Result<(Placement, f64)> {
        Ok(match target {
            Target::Local(held, reserve_s) => {
                let in_process = self.scaling.is_local();
                (Placement::Local { held: vec![held], in_process }, reserve_s)
            }
            Target::Cluster { address, token } => {
                let mut client = client::connect_head(&address, token.as_deref()).await?;
                let label = run_dir.display().to_string();
                let lease = client::open_lease(&mut client, &label).await?;
                let request = crate::cluster::worker_request(&self.scaling, &label);
                let options = ReserveOptions {
                    lease: lease.id(),
                    wait_for_capacity: false,
                    timeout: self.run.placement_timeout,
                    elastic: self.scaling.is_elastic(),
                };
                let placement = Placement::Cluster {
                    address,
                    client: Box::new(client),
                    _lease: lease,
                    request,
                    options,
                    most: self.scaling.max_ranks(),
                    held: None,
                    world: 0,
                    room: None,
                };
                (placement, 0.0)
            }
        })
    }

    /// What every attempt of its group in `run_dir` shares.
    fn group_spec(&self, run_dir: PathBuf, params_json: String) -> GroupSpec {
        let group = format!(
            "{}-{:016x}",
            run_dir.file_name().unwrap_or_default().to_string_lossy(),
            rand::random::<u64>()
        );
        GroupSpec {
            group,
            train_fn: self.train_fn.offset(),
            params_json,
            trial: self.trial_names(&run_dir),
            run_dir,
            store_settings: self.run.store.clone(),
            num_threads: self.scaling.cpus_per_worker().max(1.0) as u32,
            collective_timeout: self.run.collective_timeout,
            start_timeout: self.run.start_timeout,
            warm_start: self.warm_start,
            env: self.env.clone(),
            data_json: self.data_json.clone(),
            store_url: self.store_url.clone(),
            upload_async: self.run.checkpoint_config.upload
                == crate::config::CheckpointUpload::Async,
            sharding: self.scaling.sharding,
            elastic: self.scaling.is_elastic().then(|| self.scaling.ranks()),
            // A command's ranks (torchrun's environment) restart with the new WORLD_SIZE.
            in_place: self.backend.resizes_in_place() && self.train_fn != TrainFnId::COMMAND,
            backend: self.backend.clone(),
        }
    }
}

/// Where `checkpoint` is whole in the run's store `store`: where it was uploaded or came down
/// from, else uploaded now (a checkpoint given to resume from) as the run's `resume_from`.
async fn in_store(store: &Remote, checkpoint: &Checkpoint) -> Result<String> {
    if let Some(url) = crate::storage::remote::uploaded_to(checkpoint.path()) {
        return Ok(url);
    }
    let (store, dir) = (store.clone(), checkpoint.path().to_owned());
    tokio::task::spawn_blocking(move || {
        store.upload_folder(&dir, "resume_from")?;
        Ok(store.join("resume_from").url().to_owned())
    })
    .await
    .map_err(|e| Error::Storage(format!("uploading the checkpoint to resume from: {e}")))?
}
