//! Replicas and dynamic batching: each replica is a thread with a model of its own and a
//! bounded queue of requests; it runs the requests that arrived together as one batch (up to
//! `max_batch_size` rows, waiting at most `batch_wait` after the first), then cuts the
//! predictions back into each request's answer. A full queue is a refusal at once, never a
//! wait; a model that panics is loaded again and the requests it held get an error.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError, sync_channel,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polars::prelude::DataFrame;

use super::protocol::{Answer, Code, Model, Outputs, Refusal, Rows};
use super::stats::Stats;
use crate::error::Result;

/// What predicts: a model loaded by a replica (or the link to a replica process), used by its
/// thread only.
pub trait Engine {
    /// The predictions `rtune predict` writes for `frame`'s rows (the export's feature
    /// columns): `prediction` (or `prediction_<j>`) and a classifier's `prob_<class>` columns.
    fn predict(&mut self, frame: DataFrame) -> Result<DataFrame>;

    /// Where it runs, as the server's log says it.
    fn place(&self) -> String {
        "in this process".into()
    }
}

/// Loads a replica's model (called on the replica's thread, again after it failed).
pub type Load = Arc<dyn Fn() -> Result<Box<dyn Engine>> + Send + Sync>;

/// How replicas batch and queue.
#[derive(Debug, Clone)]
pub struct Batching {
    /// Rows a batch holds at most (a request of more rows runs alone).
    pub max_batch_size: usize,
    /// How long a batch waits for more requests after its first arrived, at most: it waits
    /// only while requests are coming that no replica has yet (a lone client's request runs
    /// at once).
    pub batch_wait: Duration,
    /// Requests a replica's queue holds; past it, requests are refused as busy.
    pub max_queued: usize,
}

/// Requests on their way: those a front has taken in and not yet answered (`coming`), and
/// those of them each replica holds (`in_flight`, queued or in its batch). A batch waits for
/// more only while some are coming that no replica has yet.
pub(crate) struct Traffic {
    coming: AtomicUsize,
    in_flight: Vec<Arc<AtomicUsize>>,
}

impl Traffic {
    /// Requests taken in that no replica has yet (being read, parsed, or about to be sent).
    fn unqueued(&self) -> usize {
        let held: usize = self.in_flight.iter().map(|n| n.load(Ordering::SeqCst)).sum();
        self.coming.load(Ordering::SeqCst).saturating_sub(held)
    }
}

/// Counts a request as coming while it lives: a front holds it from a request's arrival to
/// its answer.
pub(crate) struct Coming<'a>(&'a Traffic);

impl Drop for Coming<'_> {
    fn drop(&mut self) {
        self.0.coming.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How often a batch that waits for a request on its way looks again whether one still is.
const WAITING_POLL: Duration = Duration::from_micros(250);

/// A request on its way to a replica.
pub(crate) struct Job {
    rows: Rows,
    kinds: Vec<bool>,
    arrived: Instant,
    deadline: Instant,
    reply: tokio::sync::oneshot::Sender<std::result::Result<Answer, Refusal>>,
}

struct Replica {
    queue: SyncSender<Job>,
    /// Requests sent to it and not answered yet.
    in_flight: Arc<AtomicUsize>,
    /// False while its model is loaded again: it gets no requests.
    up: Arc<AtomicBool>,
}

/// The replicas of one model, and the router in front of them.
pub(crate) struct Replicas {
    replicas: Vec<Replica>,
    traffic: Arc<Traffic>,
    max_queued: usize,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Replicas {
    /// Starts `count` replicas, each loading its model on its own thread; returns once every
    /// one has loaded (or the first error).
    pub(crate) fn start(
        count: usize,
        model: Arc<Model>,
        load: Load,
        batching: Batching,
        stats: Arc<Stats>,
    ) -> Result<Replicas> {
        let mut replicas = Vec::with_capacity(count);
        let mut threads = Vec::with_capacity(count);
        let mut loaded = Vec::with_capacity(count);
        let in_flight: Vec<Arc<AtomicUsize>> = (0..count).map(|_| Arc::default()).collect();
        let traffic = Arc::new(Traffic { coming: AtomicUsize::new(0), in_flight });
        for index in 0..count {
            let (queue, jobs) = sync_channel(batching.max_queued);
            let in_flight = traffic.in_flight[index].clone();
            let up = Arc::new(AtomicBool::new(false));
            let (ready, is_ready) = std::sync::mpsc::channel();
            let worker = Worker {
                index,
                model: model.clone(),
                load: load.clone(),
                batching: batching.clone(),
                stats: stats.clone(),
                in_flight: in_flight.clone(),
                traffic: traffic.clone(),
                up: up.clone(),
                pending: None,
            };
            let thread = std::thread::Builder::new()
                .name(format!("rtune-serve-replica-{index}"))
                .spawn(move || worker.run(jobs, ready))
                .map_err(|e| crate::error::Error::io("a serving replica's thread", e))?;
            threads.push(thread);
            loaded.push(is_ready);
            replicas.push(Replica { queue, in_flight, up });
        }
        for is_ready in loaded {
            is_ready.recv().unwrap_or_else(|_| {
                Err(crate::error::Error::Data("a serving replica ended while loading".into()))
            })?;
        }
        stats.replicas.set(count as i64);
        let max_queued = batching.max_queued;
        Ok(Replicas { replicas, traffic, max_queued, threads: Mutex::new(threads) })
    }

    /// A request taken in by a front: counted as coming until the guard drops.
    pub(crate) fn arrival(&self) -> Coming<'_> {
        self.traffic.coming.fetch_add(1, Ordering::SeqCst);
        Coming(&self.traffic)
    }

    /// Sends `rows` to the replica with the fewest requests in flight (the next ones if its
    /// queue is full); the answer comes on the receiver. Every queue full: refused at once.
    pub(crate) fn submit(
        &self,
        rows: Rows,
        timeout: Duration,
    ) -> std::result::Result<
        tokio::sync::oneshot::Receiver<std::result::Result<Answer, Refusal>>,
        Refusal,
    > {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let now = Instant::now();
        let kinds = rows.kinds();
        let mut job = Job { rows, kinds, arrived: now, deadline: now + timeout, reply };
        let mut order: Vec<&Replica> =
            self.replicas.iter().filter(|r| r.up.load(Ordering::Relaxed)).collect();
        if order.is_empty() {
            return Err(Refusal::new(
                Code::Busy,
                "no replica is up (their models are loading again after a failure): retry later",
            ));
        }
        order.sort_by_key(|r| r.in_flight.load(Ordering::Relaxed));
        for replica in order {
            replica.in_flight.fetch_add(1, Ordering::SeqCst);
            match replica.queue.try_send(job) {
                Ok(()) => return Ok(answer),
                Err(TrySendError::Full(back) | TrySendError::Disconnected(back)) => {
                    replica.in_flight.fetch_sub(1, Ordering::SeqCst);
                    job = back;
                }
            }
        }
        Err(Refusal::new(
            Code::Busy,
            format!(
                "every replica's queue is full ({} request(s) each, --max-queued): retry later",
                self.max_queued
            ),
        ))
    }

    /// Requests sent and not answered, by replica.
    pub(crate) fn in_flight(&self) -> Vec<usize> {
        self.replicas.iter().map(|r| r.in_flight.load(Ordering::Relaxed)).collect()
    }

    /// Ends every replica once its queue is empty, and waits for those that are up (one
    /// loading its model holds no request: it ends when its load does).
    pub(crate) fn stop(self) {
        let Replicas { replicas, threads, .. } = self;
        let up: Vec<bool> = replicas.iter().map(|r| r.up.load(Ordering::Relaxed)).collect();
        drop(replicas);
        let threads = threads.into_inner().unwrap_or_else(|e| e.into_inner());
        for (thread, up) in threads.into_iter().zip(up) {
            if up {
                let _ = thread.join();
            }
        }
    }
}

/// A replica's thread.
struct Worker {
    index: usize,
    model: Arc<Model>,
    load: Load,
    batching: Batching,
    stats: Arc<Stats>,
    in_flight: Arc<AtomicUsize>,
    traffic: Arc<Traffic>,
    up: Arc<AtomicBool>,
    /// A request taken from the queue that did not fit the last batch.
    pending: Option<Job>,
}

impl Worker {
    fn run(mut self, jobs: Receiver<Job>, ready: std::sync::mpsc::Sender<Result<()>>) {
        let mut engine = match (self.load)() {
            Ok(engine) => {
                self.say_up(engine.as_ref());
                let _ = ready.send(Ok(()));
                engine
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        while let Some(batch) = self.next_batch(&jobs) {
            if !self.run_batch(engine.as_mut(), batch) {
                continue;
            }
            // Its state may be anything now: the requests it held are answered, and it
            // gets a model of its own again (a replica process: the one started in its
            // place).
            self.up.store(false, Ordering::Relaxed);
            self.stats.restarts.inc();
            tracing::warn!("serving replica {} failed; loading its model again", self.index);
            let held =
                self.pending.take().into_iter().chain(std::iter::from_fn(|| jobs.try_recv().ok()));
            for job in held.collect::<Vec<_>>() {
                let why = "the replica that held it failed (it is started again): retry";
                self.answer(job, Err(Refusal::new(Code::Internal, why)));
            }
            match self.reload(&jobs) {
                Some(fresh) => engine = fresh,
                None => return,
            }
        }
    }

    /// The model loaded again after a failure, tried until it loads, less often each time
    /// (a request that comes meanwhile is refused); None once the server stops.
    fn reload(&mut self, jobs: &Receiver<Job>) -> Option<Box<dyn Engine>> {
        let mut pause = Duration::from_millis(100);
        loop {
            match (self.load)() {
                Ok(fresh) => {
                    self.say_up(fresh.as_ref());
                    return Some(fresh);
                }
                Err(e) => tracing::error!(
                    "serving replica {} cannot load its model (it tries again in {pause:?}): {e}",
                    self.index
                ),
            }
            let until = Instant::now() + pause;
            loop {
                match jobs.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok(job) => {
                        let why = "the replica that took it is loading its model again: retry";
                        self.answer(job, Err(Refusal::new(Code::Internal, why)));
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return None,
                }
            }
            pause = (pause * 2).min(Duration::from_secs(10));
        }
    }

    fn say_up(&self, engine: &dyn Engine) {
        self.up.store(true, Ordering::Relaxed);
        eprintln!("rtune serve: replica {} is up ({})", self.index, engine.place());
    }

    /// The requests of the next batch: the first that comes, then those queued and those that
    /// arrive before the wait ends, while they fit and stack with it; it waits only while some
    /// request is coming that no replica has yet. None once the queue is closed and empty.
    fn next_batch(&mut self, jobs: &Receiver<Job>) -> Option<Vec<Job>> {
        let first = match self.pending.take() {
            Some(job) => job,
            None => jobs.recv().ok()?,
        };
        let until = first.arrived + self.batching.batch_wait;
        let mut rows = first.rows.count;
        let mut batch = vec![first];
        while rows < self.batching.max_batch_size {
            let job = match jobs.try_recv() {
                Ok(job) => job,
                Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) => {
                    let wait = until.saturating_duration_since(Instant::now());
                    if wait.is_zero() || self.traffic.unqueued() == 0 {
                        break;
                    }
                    match jobs.recv_timeout(wait.min(WAITING_POLL)) {
                        Ok(job) => job,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            };
            if job.kinds != batch[0].kinds || rows + job.rows.count > self.batching.max_batch_size {
                self.pending = Some(job);
                break;
            }
            rows += job.rows.count;
            batch.push(job);
        }
        Some(batch)
    }

    /// Predicts the batch's live requests and answers each; a batch the model refuses is run
    /// a request at a time, so only the request at fault gets the error. True when the model
    /// failed on something no request could be blamed for (a panic, a libtorch error).
    fn run_batch(&self, engine: &mut dyn Engine, batch: Vec<Job>) -> bool {
        let now = Instant::now();
        let mut live = Vec::with_capacity(batch.len());
        for job in batch {
            if job.reply.is_closed() {
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
            } else if now >= job.deadline {
                self.answer(
                    job,
                    Err(Refusal::new(Code::Timeout, "its deadline passed in the queue")),
                );
            } else {
                live.push(job);
            }
        }
        if live.is_empty() {
            return false;
        }
        match self.predict(engine, &live) {
            Ok(outputs) => {
                let outputs = Arc::new(outputs);
                let mut from = 0;
                for job in live {
                    let to = from + job.rows.count;
                    let answer = outputs.cut(from, to);
                    from = to;
                    self.answer(job, Ok(answer));
                }
                false
            }
            Err(refusal) if refusal.code == Code::Internal => {
                for job in live {
                    self.answer(job, Err(refusal.clone()));
                }
                true
            }
            Err(_) if live.len() > 1 => {
                let mut failed = false;
                for job in live {
                    let alone = self.predict(engine, std::slice::from_ref(&job));
                    failed |= alone.as_ref().is_err_and(|r| r.code == Code::Internal);
                    let rows = job.rows.count;
                    self.answer(job, alone.map(|outputs| Arc::new(outputs).cut(0, rows)));
                }
                failed
            }
            Err(refusal) => {
                let job = live.into_iter().next().expect("one job");
                self.answer(job, Err(refusal));
                false
            }
        }
    }

    fn predict(
        &self,
        engine: &mut dyn Engine,
        jobs: &[Job],
    ) -> std::result::Result<Outputs, Refusal> {
        let schema = &self.model.schema;
        let rows: Vec<&Rows> = jobs.iter().map(|j| &j.rows).collect();
        let count: usize = rows.iter().map(|r| r.count).sum();
        let frame = Rows::frame(schema, &rows)
            .map_err(|e| Refusal::new(Code::Internal, format!("the batch's rows: {e}")))?;
        let started = Instant::now();
        let predicted = std::panic::catch_unwind(AssertUnwindSafe(|| engine.predict(frame)))
            .map_err(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Refusal::new(Code::Internal, format!("the model panicked: {what}"))
            })?
            .map_err(|e| match e {
                // What a request's rows can be wrong in: a category never seen, a missing
                // value.
                crate::error::Error::Data(message) => Refusal::bad(message),
                other => Refusal::new(Code::Internal, other.to_string()),
            })?;
        self.stats.batch(count, jobs.len(), started.elapsed());
        Outputs::from_frame(&predicted).map_err(|e| Refusal::new(Code::Internal, e))
    }

    fn answer(&self, job: Job, answer: std::result::Result<Answer, Refusal>) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let _ = job.reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use polars::prelude::Column;

    use super::*;
    use crate::data::{DataSchema, LabelKind};
    use crate::serve::protocol::{OutData, Values};

    /// A permit a batch waits for.
    type Gate = Arc<Mutex<std::sync::mpsc::Receiver<()>>>;

    /// Predicts each row's `x` as its class; panics on x = -1 and refuses x = -2 as bad data;
    /// takes a permit from the gate before each batch when one is given.
    struct Echo {
        gate: Option<Gate>,
    }

    impl Engine for Echo {
        fn predict(&mut self, frame: DataFrame) -> Result<DataFrame> {
            if let Some(gate) = &self.gate {
                gate.lock().unwrap().recv().unwrap();
            }
            let x: Vec<f32> = frame.column("x")?.f32()?.into_no_null_iter().collect();
            if x.contains(&-1.0) {
                panic!("the model broke");
            }
            if x.contains(&-2.0) {
                return Err(crate::error::Error::Data("x = -2 is no digit".into()));
            }
            let classes: Vec<i64> = x.iter().map(|&v| v as i64).collect();
            Ok(DataFrame::new(x.len(), vec![Column::new("prediction".into(), classes)])?)
        }
    }

    fn model() -> Arc<Model> {
        let schema = DataSchema {
            features: vec!["x".into()],
            label: Some("y".into()),
            label_kind: Some(LabelKind::Class),
            preprocessor: None,
            model_inputs: vec!["x".into()],
        };
        let outputs = Model::default_outputs(&schema);
        Arc::new(Model {
            name: "m".into(),
            version: "1".into(),
            platform: "test".into(),
            schema,
            outputs,
        })
    }

    fn rows(x: &[f32]) -> Rows {
        Rows { count: x.len(), columns: vec![Values::Numbers(x.to_vec())] }
    }

    /// One replica of `Echo`, whose loads after the first fail `failing_reloads` times.
    fn start(
        gate: Option<Gate>,
        max_queued: usize,
        failing_reloads: usize,
    ) -> (Replicas, Arc<Stats>) {
        let stats = Arc::new(Stats::new("m"));
        let loads = AtomicUsize::new(0);
        let load: Load = Arc::new(move || match loads.fetch_add(1, Ordering::SeqCst) {
            n if n >= 1 && n <= failing_reloads => {
                Err(crate::error::Error::Worker(format!("load {n} failed")))
            }
            _ => Ok(Box::new(Echo { gate: gate.clone() }) as Box<dyn Engine>),
        });
        let batching =
            Batching { max_batch_size: 4, batch_wait: Duration::from_millis(200), max_queued };
        (Replicas::start(1, model(), load, batching, stats.clone()).unwrap(), stats)
    }

    type Waiting = tokio::sync::oneshot::Receiver<std::result::Result<Answer, Refusal>>;

    fn classes(answer: Waiting) -> std::result::Result<Vec<i64>, Refusal> {
        let answer = answer.blocking_recv().expect("an answer")?;
        match &answer.outputs[0].data {
            OutData::Ints(v) => Ok(v.clone()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn requests_that_come_together_are_one_batch_up_to_its_rows() {
        let (replicas, stats) = start(None, 16, 0);
        let timeout = Duration::from_secs(30);
        // Taken in together by the fronts: the first batch waits for those not yet sent.
        let coming: Vec<Coming> = (0..3).map(|_| replicas.arrival()).collect();
        let sent: Vec<Waiting> = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
            .iter()
            .map(|x| replicas.submit(rows(x), timeout).unwrap())
            .collect();
        let answers: Vec<Vec<i64>> = sent.into_iter().map(|a| classes(a).unwrap()).collect();
        assert_eq!(answers, [vec![1, 2], vec![3, 4], vec![5, 6]]);
        // 4 rows at most: the first two requests together, the third alone.
        let text = stats.render(&replicas.in_flight());
        assert!(text.contains("rtune_serve_batch_requests_count 2"), "{text}");
        assert!(text.contains("rtune_serve_batch_rows_sum 6.0"), "{text}");
        drop(coming);
        replicas.stop();
    }

    #[test]
    fn a_lone_request_is_not_held_for_the_batch_wait() {
        let stats = Arc::new(Stats::new("m"));
        let load: Load = Arc::new(|| Ok(Box::new(Echo { gate: None }) as Box<dyn Engine>));
        // A wait no test outlasts: the answer comes only if the batch does not wait.
        let batching =
            Batching { max_batch_size: 4, batch_wait: Duration::from_secs(3600), max_queued: 4 };
        let replicas = Replicas::start(1, model(), load, batching, stats).unwrap();
        for x in [3.0, 4.0] {
            let coming = replicas.arrival();
            let answer = replicas.submit(rows(&[x]), Duration::from_secs(3600)).unwrap();
            let (said, heard) = std::sync::mpsc::channel();
            std::thread::spawn(move || said.send(classes(answer)));
            let got = heard.recv_timeout(Duration::from_secs(60)).expect("held for the wait");
            assert_eq!(got.unwrap(), [x as i64]);
            drop(coming);
        }
        replicas.stop();
    }

    #[test]
    fn a_bad_request_fails_alone_and_a_panic_fails_its_batch_then_the_model_is_loaded_again() {
        let (replicas, stats) = start(None, 16, 2);
        let timeout = Duration::from_secs(30);
        let good = replicas.submit(rows(&[7.0]), timeout).unwrap();
        let bad = replicas.submit(rows(&[-2.0]), timeout).unwrap();
        assert_eq!(classes(good).unwrap(), [7]);
        let refused = classes(bad).unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_str()),
            (Code::BadRequest, "x = -2 is no digit")
        );
        let broken = replicas.submit(rows(&[-1.0]), timeout).unwrap();
        let refused = classes(broken).unwrap_err();
        assert_eq!(refused.code, Code::Internal);
        assert!(refused.message.contains("the model broke"), "{refused:?}");
        // Loaded again (its first two loads failing), it answers. Until then a request is
        // refused as busy, or, sent before the replica knew it failed, answered with the error
        // of the requests it held.
        let until = Instant::now() + timeout;
        loop {
            match replicas.submit(rows(&[8.0]), timeout).map(classes) {
                Ok(Ok(answer)) => {
                    assert_eq!(answer, [8]);
                    break;
                }
                Ok(Err(held)) => {
                    assert_eq!(held.code, Code::Internal);
                    let (failed, reloading) = ("held it failed", "loading its model again");
                    assert!(
                        held.message.contains(failed) || held.message.contains(reloading),
                        "{held:?}"
                    );
                }
                Err(busy) => assert_eq!(busy.code, Code::Busy),
            }
            assert!(Instant::now() < until, "the replica never came back");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(stats.render(&[0]).contains("rtune_serve_replica_restarts_total 1"));
        replicas.stop();
    }

    #[test]
    fn a_full_queue_is_refused_at_once() {
        let (permit, gate) = std::sync::mpsc::channel();
        let (replicas, _) = start(Some(Arc::new(Mutex::new(gate))), 2, 0);
        let timeout = Duration::from_secs(30);
        // The first batch waits at the gate, and the queue fills behind it: the next request
        // is refused.
        let first = replicas.submit(rows(&[1.0, 1.0, 1.0, 1.0]), timeout).unwrap();
        let until = Instant::now() + timeout;
        let mut queued = Vec::new();
        let refused = loop {
            match replicas.submit(rows(&[2.0]), timeout) {
                Ok(answer) => queued.push(answer),
                Err(refusal) => break refusal,
            }
            assert!(Instant::now() < until && queued.len() <= 3, "never refused");
        };
        assert_eq!(refused.code, Code::Busy);
        assert!(refused.message.contains("--max-queued"), "{refused:?}");
        for _ in 0..=queued.len() {
            permit.send(()).unwrap();
        }
        assert_eq!(classes(first).unwrap(), [1, 1, 1, 1]);
        for answer in queued {
            assert!(classes(answer).unwrap().iter().all(|&c| c == 2));
        }
        replicas.stop();
    }
}
