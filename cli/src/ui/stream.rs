//! The live status stream between `rtune run` and `rtune watch` (proto/rtune/v1/watch.proto).
//!
//! The driver side ([`serve`]) follows the sweep like the terminal UI does, keeping a [`Model`]
//! and handing each event to every follower; a new follower gets the model as a snapshot first,
//! so it sees each event exactly once after it. It listens on loopback and writes its address
//! and a token into `driver.json` in the experiment (mode 0600), removed when the sweep ends.
//! The watch side ([`attach`]) turns the stream back into the UI's model and events, and sends
//! the viewer's `x` (interrupt) and `t` (stop a trial) to the driver.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rtune_searchers::{Mode, Objective, Objectives, Params, TrialStatus};
use tokio::sync::broadcast;
use tonic::{Request, Response, Status};

use super::model::{Event, Follow, Model, TrialRow};
use crate::inspect::DriverFile;
use rtune_driver::callback::TrialInfo;
use rtune_driver::proto::sweep_watch_client::SweepWatchClient;
use rtune_driver::proto::sweep_watch_server::{SweepWatch, SweepWatchServer};
use rtune_driver::proto::{self, control_request, sweep_update, trial_event};
use rtune_driver::tune::{Control, DRIVER_FILE};

/// Events a follower may fall behind by before it gets a fresh snapshot instead.
const BACKLOG: usize = 4096;

/// The driver's side: follows the sweep, serves it to watchers.
pub(crate) struct Broadcast {
    /// The model and when its `elapsed_s` was last set; events are applied and sent under this
    /// lock, so a snapshot and the events after it never overlap or leave a gap.
    state: Mutex<(Model, Instant)>,
    events: broadcast::Sender<Arc<proto::TrialEvent>>,
    /// Where the stream is, for `driver.json` once the experiment directory exists.
    record: DriverFile,
    /// `driver.json` was written (by this driver: it is removed when the stream ends).
    written: std::sync::atomic::AtomicBool,
}

impl Broadcast {
    fn new(model: Model, record: DriverFile) -> Self {
        Broadcast {
            state: Mutex::new((model, Instant::now())),
            events: broadcast::channel(BACKLOG).0,
            record,
            written: Default::default(),
        }
    }

    /// The sweep as it is now, and the events after it.
    fn subscribe(&self) -> (proto::SweepUpdate, broadcast::Receiver<Arc<proto::TrialEvent>>) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (model, since) = &*state;
        let snapshot = snapshot(model, model.elapsed_s + since.elapsed().as_secs_f64());
        let update = proto::SweepUpdate { update: Some(sweep_update::Update::Snapshot(snapshot)) };
        (update, self.events.subscribe())
    }

    /// The experiment directory exists: `driver.json` tells `rtune watch` where to follow.
    /// Watching is a convenience: a `driver.json` that cannot be written is said in the log,
    /// and the sweep runs on without it.
    fn advertise(&self, path: &Path) {
        let file = path.join(DRIVER_FILE);
        let json = serde_json::to_vec_pretty(&self.record).expect("the record serialises");
        match rtune_driver::storage::atomic_write_private(&file, &json) {
            Ok(()) => self.written.store(true, std::sync::atomic::Ordering::SeqCst),
            Err(e) => tracing::warn!("rtune watch cannot follow this sweep: {e}"),
        }
    }
}

impl Follow for Broadcast {
    fn name(&self) -> &'static str {
        "watch stream"
    }

    fn follow(&self, event: Event) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0.apply(&event);
        if let Event::Begin(experiment) = &event {
            // Before this `rtune watch` cannot find the driver, so nobody follows yet: a
            // watcher's first snapshot is taken after this event.
            self.advertise(&experiment.path);
            return;
        }
        // Most of a sweep nobody watches: no wire message is made for no one.
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(Arc::new(event_to_proto(&event)));
        }
    }
}

/// The stream server of a running sweep; ends (and removes the `driver.json` it wrote: a sweep
/// refused before it began leaves the running driver's be) when dropped, telling its followers
/// the sweep is over if the sweep did not (it ended with an error).
pub struct Server {
    _shutdown: tokio::sync::oneshot::Sender<()>,
    file: PathBuf,
    broadcast: Arc<Broadcast>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.broadcast.written.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.file);
        }
        let over = self.broadcast.state.lock().map(|s| s.0.over).unwrap_or(true);
        if !over {
            self.broadcast.follow(Event::End);
        }
    }
}

/// Serves the sweep in `dir` (shown as `model`; `control` takes the watchers' requests) on
/// loopback, on `runtime` (the driver's); returns the server and the follower to add to the
/// sweep's callbacks, which writes `driver.json` into `dir` when the sweep begins there (with
/// the address of the sweep's metrics endpoint, where it has one).
pub(crate) fn serve(
    dir: &Path,
    model: Model,
    control: Control,
    runtime: &tokio::runtime::Handle,
    metrics: Option<std::net::SocketAddr>,
) -> anyhow::Result<(Server, Arc<Broadcast>)> {
    let _runtime = runtime.enter();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("watch stream socket")?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let token = format!("{:032x}", rand::random::<u128>());
    let record = DriverFile {
        address: address.to_string(),
        token: token.clone(),
        pid: std::process::id(),
        metrics: metrics.map(|m| m.to_string()),
    };
    let broadcast = Arc::new(Broadcast::new(model, record));
    let required = token.clone();
    let service = SweepWatchServer::with_interceptor(
        WatchService { broadcast: broadcast.clone(), control },
        move |req: Request<()>| rtune_driver::rpc::check_watch_token(req, Some(&required)),
    );
    let shutdown = rtune_driver::rpc::serve_until_dropped(
        tonic::service::Routes::new(service),
        listener,
        "watch stream",
        None,
    );
    let file = dir.join(DRIVER_FILE);
    Ok((Server { _shutdown: shutdown, file, broadcast: broadcast.clone() }, broadcast))
}

struct WatchService {
    broadcast: Arc<Broadcast>,
    control: Control,
}

type UpdateStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::SweepUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl SweepWatch for WatchService {
    type FollowStream = UpdateStream;

    async fn follow(
        &self,
        _: Request<proto::FollowRequest>,
    ) -> Result<Response<UpdateStream>, Status> {
        let (snapshot, mut events) = self.broadcast.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let broadcast = self.broadcast.clone();
        tokio::spawn(async move {
            let mut next = Some(snapshot);
            while let Some(update) = next.take() {
                let end = matches!(
                    &update.update,
                    Some(sweep_update::Update::Event(e)) if e.kind() == trial_event::Kind::End
                );
                if tx.send(Ok(update)).await.is_err() || end {
                    return;
                }
                next = match events.recv().await {
                    Ok(event) => Some(proto::SweepUpdate {
                        update: Some(sweep_update::Update::Event((*event).clone())),
                    }),
                    // Too slow for the stream: the state as it is now instead of the backlog.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let (snapshot, fresh) = broadcast.subscribe();
                        events = fresh;
                        Some(snapshot)
                    }
                    Err(broadcast::error::RecvError::Closed) => None,
                };
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn control(
        &self,
        request: Request<proto::ControlRequest>,
    ) -> Result<Response<proto::ControlReply>, Status> {
        match request.into_inner().action {
            Some(control_request::Action::Interrupt(_)) => self.control.interrupt(),
            Some(control_request::Action::StopTrial(id)) => self.control.stop_trial(&id),
            Some(control_request::Action::PauseTrial(id)) => self.control.pause_trial(&id),
            Some(control_request::Action::ResumeTrial(id)) => self.control.resume_trial(&id),
            None => return Err(Status::invalid_argument("no action given")),
        }
        Ok(Response::new(proto::ControlReply {}))
    }

    async fn stacks(
        &self,
        request: Request<proto::StacksRequest>,
    ) -> Result<Response<proto::StacksReply>, Status> {
        let trial = request.into_inner().trial_id;
        let driver =
            rtune_driver::runtime::Driver::get().map_err(|e| Status::unavailable(e.to_string()))?;
        let trials = driver.stacks(Some(trial.as_str()).filter(|t| !t.is_empty())).await;
        Ok(Response::new(proto::StacksReply { trials }))
    }
}

/// What the watch side hears.
pub enum Update {
    /// The sweep as it is (first, and after falling behind).
    Snapshot(Box<Model>),
    Event(Event),
    /// The stream ended without the sweep's end (the driver died or went away).
    Lost(String),
}

/// The watch side of a live sweep: updates arrive on `updates`; requests go to its driver.
pub struct Remote {
    pub updates: mpsc::Receiver<Update>,
    client: WatchClient,
    runtime: tokio::runtime::Runtime,
}

impl Remote {
    /// Asks the driver to stop the sweep, resumable.
    pub fn interrupt(&self) {
        self.send(control_request::Action::Interrupt(true));
    }

    /// Asks the driver to end trial `id`.
    pub fn stop_trial(&self, id: &str) {
        self.send(control_request::Action::StopTrial(id.to_owned()));
    }

    /// Asks the driver to hold trial `id` (`resume`: to let it run again).
    pub(crate) fn hold_trial(&self, id: &str, resume: bool) {
        let id = id.to_owned();
        self.send(match resume {
            false => control_request::Action::PauseTrial(id),
            true => control_request::Action::ResumeTrial(id),
        });
    }

    /// Asks the driver to stop the sweep, resumable, and waits for its answer.
    pub(crate) fn interrupt_now(&self) -> anyhow::Result<()> {
        let mut client = self.client.clone();
        let request =
            proto::ControlRequest { action: Some(control_request::Action::Interrupt(true)) };
        self.runtime.block_on(client.control(request)).map(drop).map_err(|e| {
            anyhow::anyhow!("the sweep's driver did not take the request: {}", e.message())
        })
    }

    fn send(&self, action: control_request::Action) {
        let mut client = self.client.clone();
        self.runtime.spawn(async move {
            let request = proto::ControlRequest { action: Some(action) };
            if let Err(e) = client.control(request).await {
                tracing::warn!("the sweep's driver did not take the request: {}", e.message());
            }
        });
    }
}

/// Whether a live driver runs the sweep in `dir` (it holds the experiment's lease).
pub(crate) fn driver_alive(dir: &Path) -> bool {
    rtune_driver::tune::lease::live_holder(dir).is_some()
}

type WatchClient = SweepWatchClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        rtune_driver::rpc::AddToken,
    >,
>;

/// A runtime for the watch side and a client of the stream its `driver.json` names; None when
/// the driver does not answer.
fn connect(dir: &Path) -> Option<(tokio::runtime::Runtime, WatchClient)> {
    let record = DriverFile::of(dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("rtune-watch")
        .enable_all()
        .build()
        .ok()?;
    let client = runtime.block_on(async {
        let endpoint =
            tonic::transport::Endpoint::from_shared(format!("http://{}", record.address))
                .ok()?
                .connect_timeout(Duration::from_secs(2));
        let channel = endpoint.connect().await.ok()?;
        let token = rtune_driver::rpc::AddToken::bearer(Some(&record.token)).ok()?;
        Some(SweepWatchClient::with_interceptor(channel, token))
    })?;
    Some((runtime, client))
}

/// Where every rank of the running trials of the sweep in `dir` is (of trial `trial` only when
/// given), as its driver answers; None when no driver answers.
pub(crate) fn stacks(
    dir: &Path,
    trial: Option<&str>,
) -> Option<anyhow::Result<proto::StacksReply>> {
    let request = proto::StacksRequest { trial_id: trial.unwrap_or_default().to_owned() };
    // A connection that breaks (a driver slow to take it, on a loaded machine) is made again: the
    // question changes nothing.
    let mut tries = 0;
    loop {
        let (runtime, mut client) = connect(dir)?;
        tries += 1;
        match runtime.block_on(client.stacks(request.clone())) {
            Err(e) if e.code() == tonic::Code::Unavailable && tries < 3 => {
                std::thread::sleep(Duration::from_millis(300));
            }
            answer => {
                return Some(answer.map(tonic::Response::into_inner).map_err(|e| {
                    anyhow::anyhow!("the sweep's driver did not answer: {}", e.message())
                }));
            }
        }
    }
}

/// Follows the sweep in `dir` live when its driver is running (its `driver.json` names a
/// stream that answers); None when it is not (a finished or interrupted sweep, a dead driver).
pub(crate) fn attach(dir: &Path) -> Option<Remote> {
    let (runtime, client) = connect(dir)?;
    let (client, stream) = runtime.block_on(async {
        let mut client = client;
        let stream = client.follow(proto::FollowRequest {}).await.ok()?.into_inner();
        Some((client, stream))
    })?;
    let (tx, updates) = mpsc::channel();
    runtime.spawn(async move {
        let mut stream = stream;
        loop {
            let update = match stream.message().await {
                Ok(Some(update)) => match update_from_proto(update) {
                    Some(update) => update,
                    None => continue,
                },
                Ok(None) => Update::Lost("the driver closed the stream".into()),
                Err(e) => Update::Lost(format!("the driver went away: {}", e.message())),
            };
            let last = matches!(update, Update::Lost(_) | Update::Event(Event::End));
            if tx.send(update).is_err() || last {
                return;
            }
        }
    });
    Some(Remote { updates, client, runtime })
}

fn status_text(status: TrialStatus) -> String {
    serde_json::to_string(&status).expect("a status serialises").trim_matches('"').to_owned()
}

fn status_from(text: &str) -> TrialStatus {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .unwrap_or(TrialStatus::Pending)
}

fn info_to_proto(t: &TrialInfo) -> proto::TrialInfo {
    proto::TrialInfo {
        trial_id: t.trial_id.clone(),
        status: status_text(t.status),
        params_json: serde_json::to_string(&t.params).unwrap_or_default(),
        path: t.path.display().to_string(),
    }
}

fn info_from(t: &proto::TrialInfo) -> TrialInfo {
    TrialInfo {
        trial_id: t.trial_id.clone(),
        status: status_from(&t.status),
        params: serde_json::from_str::<Params>(&t.params_json).unwrap_or_default(),
        path: PathBuf::from(&t.path),
        stopped: false,
        checkpoint: None,
    }
}

fn event_to_proto(event: &Event) -> proto::TrialEvent {
    use trial_event::Kind;
    let make = |kind: Kind, t: Option<&TrialInfo>| proto::TrialEvent {
        kind: kind as i32,
        trial: t.map(info_to_proto),
        metrics: HashMap::new(),
        error: String::new(),
        scheduler_json: String::new(),
    };
    match event {
        Event::Add(t) => make(Kind::Add, Some(t)),
        Event::Start(t) => make(Kind::Start, Some(t)),
        Event::Result(t, metrics) => proto::TrialEvent {
            metrics: metrics.iter().map(|(k, &v)| (k.clone(), v)).collect(),
            ..make(Kind::Result, Some(t))
        },
        Event::Complete(t) => make(Kind::Complete, Some(t)),
        Event::Pause(t) => make(Kind::Pause, Some(t)),
        Event::Error(t, e) => proto::TrialEvent { error: e.clone(), ..make(Kind::Error, Some(t)) },
        Event::Scheduler(status) => proto::TrialEvent {
            scheduler_json: serde_json::to_string(status).unwrap_or_default(),
            ..make(Kind::Scheduler, None)
        },
        Event::End => make(Kind::End, None),
        Event::Begin(_) => unreachable!("the begin event is in a watcher's first snapshot"),
    }
}

fn event_from(e: &proto::TrialEvent) -> Option<Event> {
    use trial_event::Kind;
    let trial = || e.trial.as_ref().map(info_from);
    Some(match e.kind() {
        Kind::Start => Event::Start(trial()?),
        Kind::Result => {
            Event::Result(trial()?, e.metrics.iter().map(|(k, &v)| (k.clone(), v)).collect())
        }
        Kind::Complete => Event::Complete(trial()?),
        Kind::Pause => Event::Pause(trial()?),
        Kind::Add => Event::Add(trial()?),
        Kind::Error => Event::Error(trial()?, e.error.clone()),
        Kind::Scheduler => Event::Scheduler(serde_json::from_str(&e.scheduler_json).ok()?),
        Kind::End => Event::End,
    })
}

fn snapshot(model: &Model, elapsed_s: f64) -> proto::Snapshot {
    let (metric, mode) = match model.objectives.single() {
        Some(o) => (o.metric.clone(), if o.mode == Mode::Max { "max" } else { "min" }.to_owned()),
        None => (String::new(), String::new()),
    };
    proto::Snapshot {
        name: model.name.clone(),
        path: model.path.display().to_string(),
        metric,
        mode,
        total: model.total,
        time_budget_s: model.time_budget_s,
        elapsed_s,
        per_trial_cpu: model.per_trial.0,
        per_trial_gpu: model.per_trial.1,
        capacity_cpu: model.capacity.0,
        capacity_gpu: model.capacity.1,
        scheduler_json: model
            .scheduler
            .as_ref()
            .map_or(String::new(), |s| serde_json::to_string(s).unwrap_or_default()),
        objectives_json: match model.objectives.several() {
            [] => String::new(),
            several => serde_json::to_string(several).unwrap_or_default(),
        },
        constraints: model.constraints.clone(),
        trials: model
            .trials()
            .iter()
            .map(|t| proto::TrialRow {
                id: t.id.clone(),
                status: status_text(t.status),
                params: t
                    .params
                    .iter()
                    .map(|(name, text)| proto::Param { name: name.clone(), text: text.clone() })
                    .collect(),
                last: t.last.iter().map(|(k, &v)| (k.clone(), v)).collect(),
                curve_x: t.curve.iter().map(|p| p.0).collect(),
                curve_y: t.curve.iter().map(|p| p.1).collect(),
                path: t.path.display().to_string(),
                error: t.error.clone(),
            })
            .collect(),
    }
}

fn model_from(s: proto::Snapshot) -> Model {
    let objectives = match s.mode.as_str() {
        "max" => Objectives::one(s.metric, Mode::Max),
        "min" => Objectives::one(s.metric, Mode::Min),
        _ => serde_json::from_str::<Vec<Objective>>(&s.objectives_json).unwrap_or_default().into(),
    };
    let mut model = Model::new(s.name, PathBuf::from(s.path), objectives);
    model.constraints = s.constraints;
    model.total = s.total;
    model.time_budget_s = s.time_budget_s;
    model.elapsed_s = s.elapsed_s;
    model.per_trial = (s.per_trial_cpu, s.per_trial_gpu);
    model.capacity = (s.capacity_cpu, s.capacity_gpu);
    model.scheduler = serde_json::from_str(&s.scheduler_json).ok();
    model.set_trials(
        s.trials
            .into_iter()
            .map(|t| TrialRow {
                status: status_from(&t.status),
                params: t.params.into_iter().map(|p| (p.name, p.text)).collect(),
                last: t.last.into_iter().collect(),
                curve: t.curve_x.into_iter().zip(t.curve_y).collect(),
                path: PathBuf::from(t.path),
                error: t.error,
                id: t.id,
            })
            .collect(),
    );
    model
}

fn update_from_proto(u: proto::SweepUpdate) -> Option<Update> {
    match u.update? {
        sweep_update::Update::Snapshot(s) => Some(Update::Snapshot(Box::new(model_from(s)))),
        sweep_update::Update::Event(e) => event_from(&e).map(Update::Event),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(i: usize) -> TrialInfo {
        TrialInfo {
            trial_id: format!("abcde_{i:05}"),
            status: TrialStatus::Running,
            params: Params::new().with("lr", 0.01 * i as f64),
            path: PathBuf::from(format!("/tmp/x/trial_{i}")),
            stopped: false,
            checkpoint: None,
        }
    }

    fn result(iteration: f64, acc: f64) -> rtune_searchers::Metrics {
        [("training_iteration".to_owned(), iteration), ("acc".to_owned(), acc)].into()
    }

    #[test]
    fn a_snapshot_and_the_events_after_it_rebuild_the_drivers_model() {
        let metric = Objectives::one("acc", Mode::Max);
        let record =
            DriverFile { address: "127.0.0.1:1".into(), token: "t".into(), pid: 1, metrics: None };
        let broadcast =
            Broadcast::new(Model::new("s".into(), "/tmp/x".into(), metric.clone()), record);
        broadcast.follow(Event::Result(info(0), result(1.0, 0.5)));
        broadcast.follow(Event::Result(info(1), result(1.0, f64::NAN)));
        let (first, mut events) = broadcast.subscribe();
        broadcast.follow(Event::Result(info(0), result(2.0, 0.75)));
        broadcast.follow(Event::Error(info(1), "boom".into()));
        let rung = rtune_searchers::RungStatus {
            bracket: 0,
            milestone: 1.0,
            recorded: 2,
            cutoff: Some(0.5),
        };
        let status = rtune_searchers::SchedulerStatus {
            kind: "asha".into(),
            rungs: vec![rung],
            ..Default::default()
        };
        broadcast.follow(Event::Scheduler(status.clone()));
        broadcast.follow(Event::End);

        let Some(Update::Snapshot(mut model)) = update_from_proto(first) else { panic!() };
        while let Ok(event) = events.try_recv() {
            let update =
                proto::SweepUpdate { update: Some(sweep_update::Update::Event((*event).clone())) };
            let Some(Update::Event(event)) = update_from_proto(update) else { panic!() };
            model.apply(&event);
        }
        let driver = &broadcast.state.lock().unwrap().0;
        assert_eq!(model.objectives, metric);
        assert_eq!(model.trials().len(), 2);
        for (got, want) in model.trials().iter().zip(driver.trials()) {
            assert_eq!(got.id, want.id);
            assert_eq!(got.status, want.status);
            assert_eq!(got.params, want.params);
            let curve = |t: &TrialRow| format!("{:?}", t.curve);
            assert_eq!(curve(got), curve(want), "each result once, none lost (NaN as NaN)");
            assert_eq!(got.error, want.error);
            assert_eq!(format!("{:?}", got.last), format!("{:?}", want.last), "NaN survives");
        }
        assert_eq!(model.trials()[0].curve, [(1.0, 0.5), (2.0, 0.75)]);
        assert_eq!(model.scheduler, Some(status));
        assert!(model.over);
    }
}
