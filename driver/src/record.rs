//! The driver's record of one run: every kept report (in `result.json` / `progress.csv` and in
//! memory), the recorded checkpoints with their retention, the attempt fence, and the roll-back
//! after a failed attempt. Fed by the run loop in `trainer`, one report at a time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::{CheckpointConfig, RunConfig};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, RankFigures, START_METRICS, from_wire, number_or_tag};
use crate::outcome::{Checkpoint, TrainResult, WorkerFailure};
use crate::storage::checkpoint::{self, Fence};
use crate::storage::remote::Remote;
use crate::storage::{ResultFiles, Row, read_lines_at, unix_time};

/// Who a run is: the fields Ray fills into every result row besides the metrics.
pub(crate) struct RunIdentity {
    /// The trial's id in a sweep.
    pub trial_id: Option<String>,
    /// The train loop config (Ray's `config`).
    pub config: serde_json::Value,
    /// Rank 0's worker process once the ranks joined (Ray: the trainable's process), the
    /// driver's until then.
    pub pid: u32,
    pub hostname: String,
    pub node_ip: String,
}

impl RunIdentity {
    /// No one's: a run read back from its files, whose rows say who it was.
    fn unknown() -> RunIdentity {
        RunIdentity {
            trial_id: None,
            config: serde_json::Value::Null,
            pid: 0,
            hostname: String::new(),
            node_ip: String::new(),
        }
    }
}

/// Where a group's rank 0 runs: its process, its node's host name and address.
pub(crate) struct RankZero {
    pub pid: u32,
    pub hostname: String,
    pub node_ip: String,
}

/// What a result row holds besides metrics (Ray's auto-filled fields).
const ROW_FIELDS: [&str; 12] = [
    "done",
    "trial_id",
    "config",
    "date",
    "pid",
    "hostname",
    "node_ip",
    "iterations_since_restore",
    "checkpoint_dir_name",
    "placement",
    UPLOADED_KEY,
    RESIZE_KEY,
];

/// The first row after an elastic group resized says how: `3 -> 2: rank 1 lost: killed by
/// signal 9 (SIGKILL)`; every resize since the row before, in order, `then` between them.
pub const RESIZE_KEY: &str = "group_resize";

/// A run's resizes as they happen, one JSON line each (`Resized`): every one is there, those
/// no row came after included (a group that grew at its last report, a driver killed first).
pub const RESIZES_FILE: &str = "resizes.jsonl";

/// One line of [`RESIZES_FILE`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Resized {
    /// The run's latest recorded iteration when it resized.
    pub after_iteration: u64,
    /// The attempt it happened in.
    pub attempt: u32,
    pub from: usize,
    pub to: usize,
    pub why: String,
    /// Seconds since the epoch.
    pub timestamp: f64,
}

impl Resized {
    /// The run's resizes in `run_dir`, oldest first (none where it never resized).
    pub fn read(run_dir: &Path) -> Vec<Resized> {
        let text = std::fs::read_to_string(run_dir.join(RESIZES_FILE)).unwrap_or_default();
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }
}

/// A row's list of checkpoints of earlier reports that became whole in the object store by its
/// time (`upload = "async"`): recorded from then on.
const UPLOADED_KEY: &str = "checkpoints_uploaded";

/// A result.json row as the record reads it back: its metrics (the numbers, and the tags
/// [`number_or_tag`] writes, of every field but Ray's auto-filled ones) and its checkpoint.
/// Read without building the row's JSON values (its `config` above all), which made reading a
/// run back several times slower.
struct StoredRow {
    metrics: Metrics,
    checkpoint: Option<String>,
    placement: Option<String>,
    uploaded: Vec<String>,
}

impl<'de> serde::Deserialize<'de> for StoredRow {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = StoredRow;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a result row (a JSON object)")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<StoredRow, A::Error> {
                let mut row = StoredRow {
                    metrics: Metrics::new(),
                    checkpoint: None,
                    placement: None,
                    uploaded: Vec::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    if key == "checkpoint_dir_name" {
                        row.checkpoint = map.next_value()?;
                    } else if key == UPLOADED_KEY {
                        row.uploaded = map.next_value()?;
                    } else if key == "placement" {
                        row.placement = map.next_value()?;
                    } else if ROW_FIELDS.contains(&key.as_str()) {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    } else if let MetricValue(Some(v)) = map.next_value()? {
                        row.metrics.insert(key, v);
                    }
                }
                Ok(row)
            }
        }
        d.deserialize_map(Fields)
    }
}

/// A field's value as a metric: a number or a number's tag; None for anything else.
struct MetricValue(Option<f64>);

impl<'de> serde::Deserialize<'de> for MetricValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Value;
        impl<'de> serde::de::Visitor<'de> for Value {
            type Value = MetricValue;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<MetricValue, E> {
                Ok(MetricValue(Some(v)))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<MetricValue, E> {
                Ok(MetricValue(Some(v as f64)))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<MetricValue, E> {
                Ok(MetricValue(Some(v as f64)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<MetricValue, E> {
                Ok(MetricValue(crate::metrics::number_of_tag(v)))
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<MetricValue, E> {
                Ok(MetricValue(None))
            }
            fn visit_unit<E>(self) -> std::result::Result<MetricValue, E> {
                Ok(MetricValue(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<MetricValue, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(MetricValue(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<MetricValue, A::Error> {
                while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(MetricValue(None))
            }
        }
        d.deserialize_any(Value)
    }
}

/// The driver's record of a run: kept reports and checkpoints, and the result files.
pub(crate) struct RunState {
    run_dir: PathBuf,
    identity: RunIdentity,
    /// The iteration the current attempt started after (its checkpoint's).
    restored_at: u64,
    files: ResultFiles,
    /// The kept reports' metrics, in order. Their rows are in result.json (read back when a
    /// roll-back rewrites the files); the files keep the last, to be marked `done` at the end.
    history: Vec<Metrics>,
    /// Recorded checkpoints, oldest first, with the metrics they were reported with.
    checkpoints: Vec<(Checkpoint, Metrics)>,
    config: CheckpointConfig,
    /// time_total_s carried over from before the current attempt.
    time_offset: f64,
    attempt: u32,
    attempt_started: Instant,
    last_report: Instant,
    verbose: bool,
    stop: std::collections::BTreeMap<String, f64>,
    /// Where the current attempt's ranks run (`group::describe_seats`), written into its rows.
    placement: Option<String>,
    /// How the current attempt's group started, for its first row.
    group_start: Option<crate::metrics::GroupStart>,
    /// The current attempt's ranks (0 before it placed them), for every row.
    world_size: usize,
    /// How many times an elastic group resized, for every row once it has; the resizes since
    /// the last row, said in the next one (`group_resize`).
    resizes: u32,
    unsaid_resizes: Vec<String>,
    /// The run's folder on a store: a reported checkpoint missing here (its rank does not see
    /// this machine's files) comes down from there.
    store: Option<Remote>,
}

impl RunState {
    pub fn new(run_dir: &Path, run: &RunConfig, identity: RunIdentity) -> Self {
        RunState {
            run_dir: run_dir.to_owned(),
            identity,
            restored_at: 0,
            files: ResultFiles::new(run_dir),
            history: Vec::new(),
            checkpoints: Vec::new(),
            config: run.checkpoint_config.clone(),
            time_offset: 0.0,
            attempt: 0,
            attempt_started: Instant::now(),
            last_report: Instant::now(),
            verbose: run.verbose,
            stop: run.stop.clone(),
            placement: None,
            group_start: None,
            world_size: 0,
            resizes: 0,
            unsaid_resizes: Vec::new(),
            store: None,
        }
    }

    /// Picks up a run that an earlier driver left in `run_dir` (one killed mid-sweep, or a
    /// paused trial): it goes on from its `resume_point`; the rows up to it are kept and the
    /// later ones dropped (they are redone), the recorded checkpoints up to it that are still
    /// there are kept, anything else is swept. Returns the checkpoint to resume from and the
    /// first attempt number, after every attempt that wrote there (so the fence refuses their
    /// stragglers).
    pub(crate) fn pick_up(
        run_dir: &Path,
        run: &RunConfig,
        identity: RunIdentity,
    ) -> Result<(Self, Option<Checkpoint>, u32)> {
        let (mut state, last_attempt) = Self::load(run_dir, run, identity)?;
        // A group that went on in place without its rank 0 named its checkpoints by a number
        // after its attempt's (`OnReport::fresh_attempt`), which no row says: a number more
        // per resize of the run keeps clear of every one it may have taken.
        let first = last_attempt.map_or(0, |a| a + 1 + state.resizes);
        let (resume, until) = state.resume_point()?;
        state.checkpoints.retain(|(_, m)| iteration_of(m) <= until);
        state.truncate(until)?;
        Ok((state, resume, first))
    }

    /// Where a picked-up run goes on from, and the iteration its kept rows end at: its latest
    /// recorded checkpoint, or a checkpoint it took over from another trial (PBT) unless it
    /// recorded a later one of its own since.
    fn resume_point(&self) -> Result<(Option<Checkpoint>, f64)> {
        let exploited =
            Checkpoint::from_directory(self.run_dir.join(checkpoint::EXPLOITED_DIR)).ok();
        let own = self.checkpoints.last();
        if let Some(ck) = exploited {
            let from = ck.iteration()? as f64;
            if own.is_none_or(|(_, m)| iteration_of(m) <= from) {
                return Ok((Some(ck), from));
            }
        }
        Ok(own.map_or((None, 0.0), |(c, m)| (Some(c.clone()), iteration_of(m))))
    }

    /// The run in `run_dir` as a run's result, read back from its files (with `to_resume`,
    /// only up to its `resume_point`).
    fn read_result(run_dir: &Path, run: &RunConfig, to_resume: bool) -> Result<TrainResult> {
        let (mut state, _) = Self::load(run_dir, run, RunIdentity::unknown())?;
        if to_resume {
            let (_, until) = state.resume_point()?;
            state.checkpoints.retain(|(_, m)| iteration_of(m) <= until);
            state.history.retain(|m| iteration_of(m) <= until);
        }
        Ok(state.into_result(run_dir.to_owned(), None, Vec::new(), 0.0))
    }

    /// The run's rows and recorded checkpoints as its files hold them, and the latest attempt
    /// known to have written there. The in-memory files are not in step with the disk (nor is
    /// the last row kept) until `truncate` rewrites them.
    fn load(run_dir: &Path, run: &RunConfig, identity: RunIdentity) -> Result<(Self, Option<u32>)> {
        let mut state = RunState::new(run_dir, run, identity);
        let mut last_attempt = match checkpoint::read_fence(run_dir)? {
            Fence::Open(n) => Some(n),
            Fence::Unset | Fence::Closed => None,
        };
        for StoredRow { metrics, checkpoint, placement, uploaded } in read_stored_rows(run_dir)? {
            if let Some(name) = checkpoint
                && let Ok(ck) = Checkpoint::from_directory(run_dir.join(name))
            {
                let by = ck.metadata()?.attempt;
                last_attempt = Some(last_attempt.map_or(by, |a| a.max(by)));
                state.checkpoints.push((ck, metrics.clone()));
            }
            state.history.push(metrics);
            state.placement = placement;
            // Checkpoints of earlier rows that were whole in the store by this one.
            for name in uploaded {
                if let Ok(ck) = Checkpoint::from_directory(run_dir.join(&name)) {
                    let by = ck.metadata()?.attempt;
                    last_attempt = Some(last_attempt.map_or(by, |a| a.max(by)));
                    state.keep_uploaded(ck)?;
                }
            }
        }
        // Every attempt that reported, and every checkpoint left under an attempt's name,
        // recorded or not (a staging copy of a store has no fence): the next attempt comes
        // after them all, so that no late upload of theirs lands on a name it writes.
        let reported = state.history.iter().filter_map(|m| m.get(START_METRICS[0]));
        let named = std::fs::read_dir(run_dir).into_iter().flatten().flatten().filter_map(|e| {
            checkpoint::attempt_in_name(&e.file_name().to_string_lossy()).map(f64::from)
        });
        for attempt in reported.copied().chain(named) {
            let attempt = attempt as u32;
            last_attempt = Some(last_attempt.map_or(attempt, |a| a.max(attempt)));
        }
        state.time_offset = state.last_metrics().get("time_total_s").copied().unwrap_or(0.0);
        let resizes = state.last_metrics().get(crate::metrics::GROUP_METRICS[1]);
        state.resizes = resizes.map_or(0, |&n| n as u32);
        Ok((state, last_attempt))
    }

    /// Fences the run directory for `attempt`, which starts after iteration `start_iteration`:
    /// from now on only its workers may commit.
    pub(crate) fn begin_attempt(&mut self, attempt: u32, start_iteration: u64) -> Result<()> {
        checkpoint::set_fence(&self.run_dir, Fence::Open(attempt))?;
        self.attempt = attempt;
        self.restored_at = start_iteration;
        self.attempt_started = Instant::now();
        self.last_report = self.attempt_started;
        Ok(())
    }

    /// The run is over, completed or failed for good: nothing may commit any more, and
    /// checkpoints that were written but never recorded (by the last, failed attempt, or a
    /// straggler of an earlier one) go, so none can be taken for a real one.
    pub fn end(&mut self) -> Result<()> {
        if let Some(mut row) =
            self.files.last_row().filter(|r| r.get("done") == Some(&false.into())).cloned()
        {
            row.insert("done".into(), true.into());
            self.files.replace_last(row)?;
        }
        self.files.sync()?;
        checkpoint::set_fence(&self.run_dir, Fence::Closed)?;
        let kept: Vec<Checkpoint> = self.checkpoints.iter().map(|(c, _)| c.clone()).collect();
        checkpoint::sweep_unrecorded(&self.run_dir, &kept)
    }

    /// Records one complete report: appends it to the files, keeps its checkpoint, drops old
    /// ones. Asks the run to stop when a `RunConfig::stop` criterion is met.
    pub fn record(&mut self, report: GroupReport) -> Result<bool> {
        let checkpoint = match report.checkpoint.as_str() {
            "" => None,
            name => Some(self.recorded_checkpoint(name)?),
        };
        let mut metrics = from_wire(&report.metrics_json)?;
        let now = Instant::now();
        let iteration = report.iteration;
        metrics.insert("training_iteration".into(), iteration as f64);
        metrics.insert(
            "time_total_s".into(),
            self.time_offset + (now - self.attempt_started).as_secs_f64(),
        );
        metrics.insert("time_this_iter_s".into(), (now - self.last_report).as_secs_f64());
        metrics.insert("timestamp".into(), unix_time().floor());
        self.last_report = now;
        let ranks: Vec<RankFigures> = report.ranks.iter().map(RankFigures::from).collect();
        crate::metrics::add_rank_figures(&mut metrics, &ranks);
        if let Some(rank0) = report.ranks.first() {
            crate::metrics::add_run_figures(&mut metrics, &rank0.into());
        }
        if let Some(start) = self.group_start.take() {
            crate::metrics::add_group_start(&mut metrics, &start);
        }
        let [world, resizes] = crate::metrics::GROUP_METRICS;
        if self.world_size > 0 {
            metrics.entry(world.into()).or_insert(self.world_size as f64);
        }
        if self.resizes > 0 {
            metrics.entry(resizes.into()).or_insert(f64::from(self.resizes));
        }
        let mut row: Row = metrics.iter().map(|(k, &v)| (k.clone(), number_or_tag(v))).collect();
        if !self.unsaid_resizes.is_empty() {
            let said = std::mem::take(&mut self.unsaid_resizes).join(" then ");
            row.insert(RESIZE_KEY.into(), said.into());
        }
        if !report.checkpoint.is_empty() {
            row.insert("checkpoint_dir_name".into(), report.checkpoint.clone().into());
        }
        let identity = &self.identity;
        if let Some(id) = &identity.trial_id {
            row.insert("trial_id".into(), id.clone().into());
        }
        row.insert("config".into(), identity.config.clone());
        row.insert("date".into(), crate::storage::date_string(unix_time()).into());
        row.insert("pid".into(), identity.pid.into());
        row.insert("hostname".into(), identity.hostname.clone().into());
        row.insert("node_ip".into(), identity.node_ip.clone().into());
        row.insert("iterations_since_restore".into(), (iteration - self.restored_at).into());
        if let Some(placement) = &self.placement {
            row.insert("placement".into(), placement.clone().into());
        }
        // Ray's `done`: true on a run's last row only (set when the run ends).
        row.insert("done".into(), false.into());
        if !report.uploaded.is_empty() {
            row.insert(UPLOADED_KEY.into(), report.uploaded.clone().into());
        }
        self.files.append(row)?;
        if self.verbose {
            println!("{}", progress_line(&metrics, &report.checkpoint));
        }
        if let Some(ck) = checkpoint {
            // The rows a resume from this checkpoint keeps are durable with it.
            self.files.sync()?;
            self.checkpoints.push((ck, metrics.clone()));
            self.prune_checkpoints()?;
        }
        self.keep_all_uploaded(&report.uploaded)?;
        if self.history.is_empty() {
            self.warn_unreported_stops(&metrics);
        }
        let stop = self.stop.iter().any(|(name, &at)| metrics.get(name).is_some_and(|&v| v >= at));
        self.history.push(metrics);
        Ok(stop)
    }

    /// A stop criterion on a metric the first report lacks never stops anything (a typo:
    /// `scroe`): said once per experiment (a sweep's runs share its folder) and metric.
    fn warn_unreported_stops(&self, metrics: &Metrics) {
        static WARNED: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
        let place = self.run_dir.parent().unwrap_or(&self.run_dir).to_owned();
        for name in self.stop.keys().filter(|name| !metrics.contains_key(*name)) {
            let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
            if warned.iter().any(|(p, n)| *p == place && n == name) {
                continue;
            }
            warned.push((place.clone(), name.clone()));
            let reported: Vec<&str> = metrics.keys().map(String::as_str).collect();
            let hint = crate::config::nearest(name, &reported)
                .map(|n| format!("; did you mean `{n}`?"))
                .unwrap_or_default();
            tracing::warn!(
                "stop criterion `{name}` names a metric the first report does not have: it \
                 stops nothing (reported: {}){hint}",
                reported.join(", ")
            );
        }
    }

    /// When rows held back from the result files are due to be written (see `flush`).
    pub(crate) fn flush_due(&self) -> Option<Instant> {
        self.files.flush_due()
    }

    /// Writes the rows held back from the result files (they are written together when
    /// reports come fast: `storage::FLUSH_EVERY`).
    pub fn flush(&mut self) -> Result<()> {
        self.files.flush()
    }

    /// Where the current attempt's ranks run, and rank 0's process and node (each row's `pid`,
    /// `hostname` and `node_ip`, as in Ray: the trainable's), as its rows will say; how its
    /// group started, as its first row will.
    pub fn placed(
        &mut self,
        placement: String,
        world_size: usize,
        rank0: Option<RankZero>,
        start: crate::metrics::GroupStart,
    ) {
        self.placement = Some(placement);
        self.world_size = world_size;
        self.group_start = Some(start);
        if let Some(RankZero { pid, hostname, node_ip }) = rank0 {
            self.identity.pid = pid;
            if !hostname.is_empty() {
                self.identity.hostname = hostname;
            }
            if !node_ip.is_empty() {
                self.identity.node_ip = node_ip;
            }
        }
    }

    /// An elastic group resized from `from` to `to` ranks, for `why` (a lost rank, room in
    /// the pool): written down at once (`RESIZES_FILE`), counted in every row from now on, and
    /// said in the next one.
    pub(crate) fn resized(&mut self, from: usize, to: usize, why: &str) -> Result<()> {
        self.resizes += 1;
        self.unsaid_resizes.push(format!("{from} -> {to}: {why}"));
        let line = Resized {
            after_iteration: iteration_of(self.last_metrics()) as u64,
            attempt: self.attempt,
            from,
            to,
            why: why.to_owned(),
            timestamp: crate::storage::unix_time(),
        };
        let path = self.run_dir.join(RESIZES_FILE);
        let mut text = serde_json::to_string(&line).expect("a resize is JSON");
        text.push('\n');
        use crate::error::IoContext as _;
        use std::io::Write as _;
        let opened = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        let mut file = opened.at(&path)?;
        file.write_all(text.as_bytes()).at(&path)?;
        file.sync_data().at(&path)
    }

    /// The group goes on with `world_size` ranks (an elastic group, in place), as its next
    /// rows will say.
    pub(crate) fn set_world_size(&mut self, world_size: usize) {
        self.world_size = world_size;
    }

    /// The metrics of the latest recorded report (empty before the first).
    pub(crate) fn last_metrics(&self) -> &Metrics {
        static NONE: Metrics = Metrics::new();
        self.history.last().unwrap_or(&NONE)
    }

    /// The checkpoint a report names, once it is known to be this attempt's own (the fence
    /// makes that hold; checked so that a broken fence can never get one recorded).
    /// Records checkpoints `names` of earlier reports, whole in the object store now that their
    /// rank finished (`upload = "async"`): in the last row's `checkpoints_uploaded`, and kept.
    pub(crate) fn record_uploaded(&mut self, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        if let Some(mut row) = self.files.last_row().cloned() {
            let mut listed: Vec<String> = row
                .get(UPLOADED_KEY)
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            listed.extend_from_slice(names);
            row.insert(UPLOADED_KEY.into(), listed.into());
            self.files.replace_last(row)?;
        }
        self.keep_all_uploaded(names)
    }

    /// Keeps checkpoints `names` of earlier reports, now whole in the store, made durable with
    /// the rows, then drops the old ones.
    fn keep_all_uploaded(&mut self, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        for name in names {
            let ck = self.recorded_checkpoint(name)?;
            self.keep_uploaded(ck)?;
        }
        self.files.sync()?;
        self.prune_checkpoints()
    }

    /// Keeps `ck` (of an earlier report) with the metrics of the report that made it.
    fn keep_uploaded(&mut self, ck: Checkpoint) -> Result<()> {
        let iteration = ck.iteration()? as f64;
        let metrics = self
            .history
            .iter()
            .rev()
            .find(|m| iteration_of(m) == iteration)
            .cloned()
            .unwrap_or_default();
        self.checkpoints.push((ck, metrics));
        self.checkpoints.sort_by(|a, b| iteration_of(&a.1).total_cmp(&iteration_of(&b.1)));
        Ok(())
    }

    /// Reported checkpoints missing in the run's folder come down from `store`.
    pub(crate) fn fetch_from(&mut self, store: Option<Remote>) {
        self.store = store;
    }

    fn recorded_checkpoint(&self, name: &str) -> Result<Checkpoint> {
        let dir = self.run_dir.join(name);
        // Recorded as a stub: its files come down when something reads them.
        if let Some(store) =
            self.store.as_ref().filter(|_| !dir.join(checkpoint::METADATA_FILE).exists())
        {
            crate::storage::staging::download_stub(&store.join(name), &dir)?;
        }
        let ck = Checkpoint::from_directory(dir)?;
        let by = ck.metadata()?.attempt;
        if by != self.attempt {
            return Err(Error::Checkpoint {
                path: ck.path().to_owned(),
                message: format!(
                    "reported by attempt {} but written by attempt {by}",
                    self.attempt
                ),
            });
        }
        Ok(ck)
    }

    fn score(&self, metrics: &Metrics) -> f64 {
        let sign = self.config.score_order.sign();
        match &self.config.score_attribute {
            Some(attr) => match metrics.get(attr) {
                Some(v) if v.is_finite() => sign * v,
                _ => f64::NEG_INFINITY,
            },
            None => metrics.get("training_iteration").copied().unwrap_or(0.0),
        }
    }

    /// The kept checkpoints, best first.
    fn ranked(&self) -> Vec<(Checkpoint, Metrics)> {
        let mut ranked = self.checkpoints.clone();
        ranked.sort_by(|a, b| self.score(&b.1).total_cmp(&self.score(&a.1)));
        ranked
    }

    fn prune_checkpoints(&mut self) -> Result<()> {
        let Some(keep) = self.config.num_to_keep else { return Ok(()) };
        let latest = self.checkpoints.last().map(|(c, _)| c.clone());
        let ranked = self.ranked();
        let doomed: Vec<Checkpoint> = ranked
            .into_iter()
            .skip(keep)
            .map(|(c, _)| c)
            .filter(|c| Some(c) != latest.as_ref())
            .collect();
        for ck in &doomed {
            std::fs::remove_dir_all(ck.path()).map_err(|e| Error::io(ck.path(), e))?;
        }
        self.checkpoints.retain(|(c, _)| !doomed.contains(c));
        Ok(())
    }

    /// After a failure: forget reports made after the latest checkpoint, rewrite the result
    /// files, clear half-written checkpoints, and return the checkpoint to resume from.
    /// The checkpoint of the last report, if it had one and it is kept.
    pub(crate) fn last_report_checkpoint(&self) -> Option<&Checkpoint> {
        let (checkpoint, metrics) = self.checkpoints.last()?;
        let last = self.history.last()?;
        (iteration_of(metrics) == iteration_of(last)).then_some(checkpoint)
    }

    pub(crate) fn roll_back(&mut self) -> Result<Option<Checkpoint>> {
        let latest = self.checkpoints.last().cloned();
        self.truncate(latest.as_ref().map_or(0.0, |(_, m)| iteration_of(m)))?;
        Ok(latest.map(|(c, _)| c))
    }

    /// Keeps the reports up to iteration `keep_until` (in memory and in the files) and the
    /// recorded checkpoints; sweeps any other checkpoint folder.
    fn truncate(&mut self, keep_until: f64) -> Result<()> {
        self.history.retain(|m| iteration_of(m) <= keep_until);
        self.files.flush()?;
        let mut rows = ResultFiles::read_rows(&self.run_dir)?;
        rows.retain(|row| {
            row.get("training_iteration").and_then(crate::metrics::number_of).unwrap_or(0.0)
                <= keep_until
        });
        // The run goes on: no kept row is its last any more.
        for row in &mut rows {
            row.insert("done".into(), false.into());
        }
        self.time_offset =
            self.history.last().and_then(|m| m.get("time_total_s").copied()).unwrap_or(0.0);
        self.files.rewrite(rows)?;
        let kept: Vec<Checkpoint> = self.checkpoints.iter().map(|(c, _)| c.clone()).collect();
        checkpoint::sweep_unrecorded(&self.run_dir, &kept)
    }

    pub(crate) fn into_result(
        self,
        path: PathBuf,
        error: Option<String>,
        failures: Vec<WorkerFailure>,
        train_loop_seconds: f64,
    ) -> TrainResult {
        let best_checkpoints = self.ranked();
        TrainResult {
            metrics: self.history.last().cloned(),
            checkpoint: self.checkpoints.last().map(|(c, _)| c.clone()),
            best_checkpoints,
            error,
            path,
            metrics_history: self.history,
            placement: self.placement,
            failures,
            fit_seconds: 0.0,
            train_loop_seconds,
            unread_params: Vec::new(),
        }
    }
}

fn iteration_of(metrics: &Metrics) -> f64 {
    metrics.get("training_iteration").copied().unwrap_or(0.0)
}

/// The run in `run_dir` as its files hold it: every kept row and the recorded checkpoints
/// still there (ranked by `run`'s checkpoint settings).
pub(crate) fn read_run(run_dir: &Path, run: &RunConfig) -> Result<TrainResult> {
    RunState::read_result(run_dir, run, false)
}

fn read_stored_rows(run_dir: &Path) -> Result<Vec<StoredRow>> {
    read_lines_at(&run_dir.join(ResultFiles::RESULT_JSON))
}

/// Like `read_run`, for a run that will be picked up: only what picking it up keeps (the rows
/// and checkpoints up to where it goes on from). Nothing on disk changes.
pub(crate) fn read_run_to_resume(run_dir: &Path, run: &RunConfig) -> Result<TrainResult> {
    RunState::read_result(run_dir, run, true)
}

/// `iter 3 (1.2s)  loss=0.1490  val_acc=0.9703  [checkpoint_000003]`
fn progress_line(metrics: &Metrics, checkpoint: &str) -> String {
    let mut line = format!(
        "iter {} ({:.1}s)",
        metrics.get("training_iteration").copied().unwrap_or(0.0),
        metrics.get("time_total_s").copied().unwrap_or(0.0)
    );
    for (name, value) in metrics {
        if !crate::metrics::added_by_rtune(name) {
            line.push_str(&format!("  {name}={value:.4}"));
        }
    }
    if !checkpoint.is_empty() {
        line.push_str(&format!("  [{checkpoint}]"));
    }
    line
}

/// A report that every rank has made: rank 0's metrics and checkpoint.
#[derive(Debug)]
pub(crate) struct GroupReport {
    /// `training_iteration` of this report (counting iterations before a resume).
    pub iteration: u64,
    pub metrics_json: String,
    pub checkpoint: String,
    /// Checkpoints of earlier reports now whole in the object store (`upload = "async"`).
    pub uploaded: Vec<String>,
    /// Where each rank's time went since its last report, in rank order (empty where the
    /// workers did not say).
    pub ranks: Vec<crate::proto::RankTimes>,
    /// Ranks can join the group in place at this report (every rank said it can, and the
    /// attempt can add ranks: see `OnReport::joiners`).
    pub joinable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every resize is written down as it happens, and the next row says each one since the
    /// row before (two between rows: both, in order); one after the last row is in the list.
    #[test]
    fn every_resize_is_listed_and_said_in_the_next_row() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = RunState::new(dir.path(), &RunConfig::new("run"), RunIdentity::unknown());
        let report = |iteration| GroupReport {
            iteration,
            metrics_json: "{\"loss\":1.0}".into(),
            checkpoint: String::new(),
            uploaded: Vec::new(),
            ranks: Vec::new(),
            joinable: false,
        };
        state.record(report(1)).unwrap();
        state.resized(3, 2, "rank 2 lost").unwrap();
        state.resized(2, 3, "room appeared in the pool").unwrap();
        state.record(report(2)).unwrap();
        state.resized(3, 2, "rank 1 lost").unwrap();
        state.end().unwrap();
        let rows = std::fs::read_to_string(dir.path().join(ResultFiles::RESULT_JSON)).unwrap();
        let said: Vec<serde_json::Value> =
            rows.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect();
        assert!(said[0].get(RESIZE_KEY).is_none());
        assert_eq!(
            said[1][RESIZE_KEY],
            "3 -> 2: rank 2 lost then 2 -> 3: room appeared in the pool"
        );
        assert_eq!(said[1]["group_resizes"], 2.0);
        let listed = Resized::read(dir.path());
        let shape: Vec<(u64, usize, usize, &str)> =
            listed.iter().map(|r| (r.after_iteration, r.from, r.to, r.why.as_str())).collect();
        assert_eq!(
            shape,
            [
                (1, 3, 2, "rank 2 lost"),
                (1, 2, 3, "room appeared in the pool"),
                (2, 3, 2, "rank 1 lost")
            ]
        );
    }

    /// A stored row reads back as its metrics (numbers and the tags of NaN and the infinities)
    /// and its checkpoint; Ray's fields, the config and other values are not metrics.
    #[test]
    fn a_stored_row_reads_back_as_its_metrics_and_checkpoint() {
        let line = r#"{"acc":0.5,"checkpoint_dir_name":"checkpoint_000002",
            "config":{"lr":0.1,"layers":[1,2],"nested":{"x":3}},"date":"2026-11-25_00-00-00",
            "done":false,"hostname":"h","iterations_since_restore":2,"loss":"NaN","node_ip":"1",
            "pid":42,"note":"text","flag":true,"nothing":null,"list":[1],"big":"-Infinity",
            "time_total_s":1.5,"training_iteration":2,"trial_id":"t"}"#;
        let row: StoredRow = serde_json::from_str(&line.replace('\n', "")).unwrap();
        assert_eq!(row.checkpoint.as_deref(), Some("checkpoint_000002"));
        let names: Vec<&str> = row.metrics.keys().map(String::as_str).collect();
        assert_eq!(names, ["acc", "big", "loss", "time_total_s", "training_iteration"]);
        assert_eq!(row.metrics["acc"], 0.5);
        assert!(row.metrics["loss"].is_nan());
        assert_eq!(row.metrics["big"], f64::NEG_INFINITY);
        assert_eq!(row.metrics["training_iteration"], 2.0);

        let row: StoredRow = serde_json::from_str(r#"{"checkpoint_dir_name":null}"#).unwrap();
        assert_eq!((row.checkpoint, row.metrics.len()), (None, 0));
        assert!(serde_json::from_str::<StoredRow>("[1]").is_err());
    }

    /// A run picked up where no fence says its last attempt (a staging copy of a store) goes
    /// on after every attempt that reported and every attempt a checkpoint's name carries,
    /// recorded or not: attempt 2 reported, attempt 5 left a checkpoint it never reported; and
    /// after the numbers its resizes may have taken.
    #[test]
    fn a_picked_up_run_starts_after_every_attempt_it_shows() {
        let first_attempt = |rows: &str, folder: Option<&str>| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(ResultFiles::RESULT_JSON), rows).unwrap();
            if let Some(folder) = folder {
                std::fs::create_dir(dir.path().join(folder)).unwrap();
            }
            RunState::pick_up(dir.path(), &RunConfig::new("run"), RunIdentity::unknown()).unwrap().2
        };
        let rows = "{\"training_iteration\":1,\"group_attempt\":2}\n{\"training_iteration\":2}\n";
        assert_eq!(first_attempt("", None), 0);
        assert_eq!(first_attempt(rows, None), 3);
        assert_eq!(first_attempt(rows, Some("checkpoint_000003_a5")), 6);
        assert_eq!(first_attempt(rows, Some("checkpoint_000003_b5")), 3);
        // Two resizes: either may have been in place without rank 0, and taken a number.
        let resized = "{\"training_iteration\":1,\"group_attempt\":2,\"group_resizes\":2}\n";
        assert_eq!(first_attempt(resized, None), 5);
    }
}
