//! The settings of one training run, Ray Train's names: `ScalingConfig`, `RunConfig`,
//! `FailureConfig`, `CheckpointConfig`. Plain data with consuming builders, validated once by
//! `TorchTrainer::fit` before anything starts.
//!
//! A leaf: the trainer, the worker group and the resource pool all read these, so they live
//! below all three and import none of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use rtune_searchers::Mode;

use crate::callback::{Callback, Callbacks};
use crate::error::Result;
use crate::outcome::CheckpointRanking;

use crate::setting::{Problems, Setting};

/// The environment variable (or `RunConfig::cluster`) that makes a driver use a head.
pub const ADDRESS_ENV: &str = "RTUNE_ADDRESS";
/// The environment variable that carries the cluster token.
pub const TOKEN_ENV: &str = "RTUNE_TOKEN";

/// How bundles of a worker group are placed on nodes (Ray's placement strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PlacementStrategy {
    #[default]
    Pack,
    Spread,
    StrictPack,
    StrictSpread,
}

/// What a sharded model splits across its ranks (DeepSpeed's ZeRO stages 1 and 2): the argument
/// of `TrainContext::prepare_model_sharded`, and a run's choice in
/// [`ScalingConfig::sharding`], which its train function reads (`TrainContext::sharding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sharding {
    /// The optimizer state (ZeRO-1): gradients are all-reduced whole, as in plain data
    /// parallelism (PyTorch's `ZeroRedundancyOptimizer`).
    Zero1,
    /// The optimizer state and the averaged gradients (ZeRO-2): gradients are reduce-scattered.
    Zero2,
}

impl Sharding {
    /// Its name in sweep files and on the wire: `zero1`, `zero2`.
    pub fn name(self) -> &'static str {
        match self {
            Sharding::Zero1 => "zero1",
            Sharding::Zero2 => "zero2",
        }
    }

    /// The sharding of that name; `None` for any other (the empty name: no sharding).
    pub fn from_name(name: &str) -> Option<Sharding> {
        [Sharding::Zero1, Sharding::Zero2].into_iter().find(|s| s.name() == name)
    }
}

/// How many workers a run has and what each one holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingConfig {
    /// Worker processes per run; 0 is local mode (see [`ScalingConfig::local`]). For an
    /// elastic group ([`ScalingConfig::elastic`]), the fewest it runs with.
    pub num_workers: usize,
    /// An elastic group's most workers (`None`: a fixed group of `num_workers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_workers: Option<usize>,
    pub use_gpu: bool,
    /// Resources held by each worker, e.g. `{"CPU": 1}` (the default) or `{"CPU": 2, "GPU": 0.5}`.
    /// The CPU count is also each worker's number of libtorch intra-op threads.
    pub resources_per_worker: BTreeMap<String, f64>,
    pub placement_strategy: PlacementStrategy,
    /// The run's data parallelism shards the optimizer state (and with ZeRO-2 the gradients)
    /// across the workers: `None` (the default) keeps it whole on each. The train function
    /// reads it (`TrainContext::sharding`); `digits-mlp` follows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<Sharding>,
    /// An elastic group that grew gives its room back (down to its `min`, at its next
    /// checkpoint) when another run waits for room in the pool (see
    /// [`ScalingConfig::shrink_for_waiting`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shrink_for_waiting: bool,
}

impl Default for ScalingConfig {
    fn default() -> Self {
        ScalingConfig::workers(1)
    }
}

impl ScalingConfig {
    pub fn workers(num_workers: usize) -> Self {
        ScalingConfig {
            num_workers,
            max_workers: None,
            use_gpu: false,
            resources_per_worker: BTreeMap::new(),
            placement_strategy: PlacementStrategy::Pack,
            sharding: None,
            shrink_for_waiting: false,
        }
    }

    /// Local mode (Ray Train's `num_workers=0`): the train function runs in the calling process,
    /// on a thread of its own, as the one rank of its group, with the same `TrainContext`,
    /// reports, checkpoints and files, so a debugger can step through it and what it prints
    /// reaches the terminal. Collectives are the identity; a sweep runs its trials one at a time.
    /// The process must have started with `rtune::init()`.
    pub fn local() -> Self {
        ScalingConfig::workers(0)
    }

    /// An elastic group (Ray Train's `num_workers=(min, max)`): a run starts once `min` workers
    /// fit, takes up to `max` where the pool has room and no other run waits for it, grows at
    /// a report that carries a checkpoint when room appears, and shrinks when a worker is lost
    /// (killed, or its node gone) instead of failing, down to `min`. A resize starts the group
    /// again from its latest checkpoint with the new world size; it is not a failure, and does
    /// not count against `FailureConfig::max_failures` (losing workers below `min` does).
    pub fn elastic(min: usize, max: usize) -> Self {
        ScalingConfig { max_workers: Some(max), ..ScalingConfig::workers(min) }
    }

    /// Whether this is local mode (`num_workers = 0`).
    pub fn is_local(&self) -> bool {
        self.num_workers == 0
    }

    /// Whether the group is elastic (see [`ScalingConfig::elastic`]).
    pub fn is_elastic(&self) -> bool {
        self.max_workers.is_some()
    }

    /// The ranks of the group: `num_workers` (an elastic group's fewest), or the one rank of
    /// local mode.
    pub fn ranks(&self) -> usize {
        self.num_workers.max(1)
    }

    /// The most ranks the group runs with: an elastic group's `max`, else [`Self::ranks`].
    pub fn max_ranks(&self) -> usize {
        self.max_workers.unwrap_or(0).max(self.ranks())
    }

    /// The group's size as a sweep file writes it: `2`, or `{ min = 2, max = 4 }`.
    pub(crate) fn describe_workers(&self) -> String {
        match self.max_workers {
            Some(max) => format!("{{ min = {}, max = {max} }}", self.num_workers),
            None => self.num_workers.to_string(),
        }
    }

    /// An elastic group that grew shrinks back to its `min` to admit another run that waits
    /// for room in the pool (a paused trial resuming, another sweep's trial, another `fit`):
    /// at its next report with a checkpoint it starts again from that checkpoint with `min`
    /// ranks, and may grow again once nobody waits. Off by default: then a waiting run waits
    /// for a running one to end.
    pub fn shrink_for_waiting(mut self, on: bool) -> Self {
        self.shrink_for_waiting = on;
        self
    }

    /// Shards the optimizer state (ZeRO-1) or it and the gradients (ZeRO-2) across the workers.
    pub fn sharding(mut self, sharding: Sharding) -> Self {
        self.sharding = Some(sharding);
        self
    }

    pub fn use_gpu(mut self, on: bool) -> Self {
        self.use_gpu = on;
        self
    }

    pub fn resources_per_worker(mut self, resources: BTreeMap<String, f64>) -> Self {
        self.resources_per_worker = resources;
        self
    }

    pub fn placement_strategy(mut self, strategy: PlacementStrategy) -> Self {
        self.placement_strategy = strategy;
        self
    }

    /// CPUs per worker (default 1).
    pub fn cpus_per_worker(&self) -> f64 {
        self.resources_per_worker.get("CPU").copied().unwrap_or(1.0)
    }

    /// GPUs per worker: `resources_per_worker["GPU"]`, or 1 when `use_gpu` names none.
    pub fn gpus_per_worker(&self) -> f64 {
        match self.resources_per_worker.get("GPU") {
            Some(&gpus) => gpus,
            None if self.use_gpu => 1.0,
            None => 0.0,
        }
    }

    pub fn validate(&self) -> Result<()> {
        crate::error::first(self.problems())
    }

    /// Local mode runs in this process: never with a cluster (`run`'s, or `$RTUNE_ADDRESS`).
    pub fn check_placement(&self, run: &RunConfig) -> Result<()> {
        match run.resolved_cluster() {
            Some((address, _)) if self.is_local() => Err(crate::error::Error::config(
                Setting::NumWorkers,
                format!(
                    "is 0 (local mode: the train function runs in this process), but the run \
                     goes to the cluster at {address} (cluster or ${ADDRESS_ENV}); drop one of \
                     the two"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Every mistake in the scaling, each naming its setting.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        match self.max_workers {
            None if self.num_workers > MAX_WORKERS => {
                let n = self.num_workers;
                let message = format!("is {n}; use 1 to {MAX_WORKERS}, or 0 for local mode");
                problems.push((Setting::NumWorkers, message));
            }
            None => {}
            Some(max) => {
                let (min, given) = (self.num_workers, self.describe_workers());
                let wrong = if min == 0 {
                    Some("min must be at least 1 (local mode, num_workers = 0, is not elastic)")
                } else if max < min {
                    Some("max must be at least min")
                } else if max > MAX_WORKERS {
                    Some("max is too large")
                } else {
                    None
                };
                if let Some(wrong) = wrong {
                    let message = format!(
                        "is {given}: {wrong}; e.g. {{ min = 1, max = 4 }} (at most {MAX_WORKERS})"
                    );
                    problems.push((Setting::NumWorkers, message));
                }
            }
        }
        if self.shrink_for_waiting && !self.is_elastic() {
            let message = format!(
                "is true, but num_workers = {} is a fixed group; give num_workers = {{ min = N, \
                 max = M }} for a group that can shrink",
                self.num_workers
            );
            problems.push((Setting::ShrinkForWaiting, message));
        }
        for (name, &amount) in &self.resources_per_worker {
            if !amount.is_finite() || amount < 0.0 {
                let message = format!("{name} = {amount}; amounts must be finite and >= 0");
                problems.push((Setting::ResourcesPerWorker, message));
            }
        }
        let gpus = self.gpus_per_worker();
        if gpus > 1.0 && gpus.fract() != 0.0 {
            let message =
                format!("GPU = {gpus}; use a fraction below 1 to share a device, or whole GPUs");
            problems.push((Setting::ResourcesPerWorker, message));
        }
        if gpus > 0.0 && !self.use_gpu {
            let message = "is false but resources_per_worker asks for GPUs; set use_gpu to true";
            problems.push((Setting::UseGpu, message.to_owned()));
        }
        problems
    }
}

/// How many failures a run survives. Ray's meaning: 0 = none (the default), -1 = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FailureConfig {
    pub max_failures: i32,
}

/// What a run does after an attempt of its worker group failed (Ray Train's
/// `FailureDecision`), as [`FailureConfig::decide`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureDecision {
    /// A new attempt, from the latest checkpoint.
    Retry,
    /// The run has failed: the failures are more than `max_failures`.
    Fail,
    /// The run was being stopped (a scheduler's decision, an interrupted sweep): the attempt
    /// ended with it, and is no failure of the run's.
    Halted,
}

impl FailureConfig {
    pub fn max_failures(max_failures: i32) -> Self {
        FailureConfig { max_failures }
    }

    /// What a run whose attempt just failed does: `failures` counts its failures with this
    /// one, `halting` says the run was being stopped.
    pub fn decide(&self, failures: usize, halting: bool) -> FailureDecision {
        if halting {
            FailureDecision::Halted
        } else if self.max_failures < 0 || failures <= self.max_failures as usize {
            FailureDecision::Retry
        } else {
            FailureDecision::Fail
        }
    }

    pub fn validate(&self) -> Result<()> {
        crate::error::first(self.problems())
    }

    pub fn problems(&self) -> Problems {
        match self.max_failures {
            -1.. => Problems::new(),
            n => vec![(
                Setting::MaxFailures,
                format!("is {n}; use -1 for unlimited, 0 for none, or a positive count"),
            )],
        }
    }
}

/// Which checkpoints a run keeps. The latest one is always kept (a restart needs it), plus the
/// best `num_to_keep` by `score_attribute` (or the most recent ones when no score is named).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointConfig {
    pub num_to_keep: Option<usize>,
    pub score_attribute: Option<String>,
    /// Whether a higher (the default) or a lower score is better.
    pub score_order: Mode,
    /// With an object store: whether a report waits for its checkpoint's upload.
    #[serde(default)]
    pub upload: CheckpointUpload,
}

/// How rtune reaches an object store (`[run] store = { .. }` in a sweep file), over the
/// standard `AWS_*` environment. Credentials are not settings: they come from the environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), never from a file
/// that is copied into the experiment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreSettings {
    /// An S3-compatible server's URL (`http://` allowed), over `AWS_ENDPOINT_URL`.
    pub endpoint: Option<String>,
    /// The bucket's region, over `AWS_REGION` (default `us-east-1`).
    pub region: Option<String>,
    /// How long a request to the store is retried, with backoff, before the transfer fails
    /// (then a rank's upload fails its attempt, which `FailureConfig` retries); default 3
    /// minutes.
    pub retry_timeout: Option<Duration>,
    /// How many requests one transfer (a checkpoint's files and their parts, up or down) has
    /// in flight at once; default 16 (`storage::remote::DEFAULT_CONNECTIONS`). A connection
    /// to S3 carries about 85-90 MB/s: more of them fill a faster network.
    #[serde(default)]
    pub connections: Option<usize>,
}

/// The most requests a transfer may have in flight at once (`StoreSettings::connections`).
pub(crate) const MAX_CONNECTIONS: usize = 256;

impl StoreSettings {
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            let why =
                format!("is {endpoint:?}; use the server's URL, e.g. \"http://127.0.0.1:9000\"");
            problems.push((Setting::StoreEndpoint, why));
        }
        if let Some(n) = self.connections.filter(|n| !(1..=MAX_CONNECTIONS).contains(n)) {
            let why = format!("is {n}; use 1 to {MAX_CONNECTIONS}");
            problems.push((Setting::StoreConnections, why));
        }
        if self.retry_timeout.is_some_and(|t| t.is_zero()) {
            let why = "is 0; use a number of seconds > 0".to_owned();
            problems.push((Setting::StoreRetryTimeout, why));
        }
        problems
    }
}

/// How a checkpoint goes up to an object store from the rank that wrote it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckpointUpload {
    /// The report returns once the checkpoint is whole in the store (recorded with it).
    #[default]
    Sync,
    /// The report returns at once and training goes on while it uploads; the checkpoint is
    /// recorded at a later report (or the run's end), once it is whole in the store. One that
    /// never finishes uploading (the worker died) is never recorded.
    Async,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            num_to_keep: None,
            score_attribute: None,
            score_order: Mode::Max,
            upload: CheckpointUpload::Sync,
        }
    }
}

impl CheckpointConfig {
    /// Which kept checkpoint of a run is its best ([`CheckpointRanking`]): by `score_attribute`
    /// when set, else by `sweep`'s metric and mode (a sweep with one objective) among reports
    /// that meet its `constraints`, else the latest.
    pub fn ranking(
        &self,
        sweep: Option<(&str, Mode)>,
        constraints: &[String],
    ) -> CheckpointRanking {
        let score = self.score_attribute.as_deref().map(|attribute| (attribute, self.score_order));
        CheckpointRanking::of(score, sweep, constraints)
    }

    pub fn new() -> Self {
        CheckpointConfig::default()
    }

    pub fn num_to_keep(mut self, n: usize) -> Self {
        self.num_to_keep = Some(n);
        self
    }

    /// How checkpoints go up to an object store (see `CheckpointUpload`).
    pub fn upload(mut self, upload: CheckpointUpload) -> Self {
        self.upload = upload;
        self
    }

    pub fn score(mut self, attribute: impl Into<String>, order: Mode) -> Self {
        self.score_attribute = Some(attribute.into());
        self.score_order = order;
        self
    }

    pub fn validate(&self) -> Result<()> {
        crate::error::first(self.problems())
    }

    pub fn problems(&self) -> Problems {
        match self.num_to_keep {
            Some(0) => vec![(
                Setting::NumToKeep,
                "is 0; keep at least 1 (without it, every checkpoint is kept)".to_owned(),
            )],
            _ => Problems::new(),
        }
    }
}

/// Where a run's files go and how it survives failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The run's folder name under `storage_path`; default `TorchTrainer_<timestamp>`.
    pub name: Option<String>,
    /// Default `$RTUNE_STORAGE_PATH`, else `~/rtune_results` (Ray's `~/ray_results`). An
    /// `s3://bucket/prefix` URL puts a sweep's experiment on S3 or an S3-compatible store
    /// (`storage::remote`): the driver works in a local staging copy mirrored there.
    pub storage_path: Option<PathBuf>,
    /// How often a sweep on an object store mirrors its staging copy there (Ray's
    /// `SyncConfig.sync_period`); it also does when the sweep ends or is interrupted.
    pub sync_period: Duration,
    pub failure_config: FailureConfig,
    pub checkpoint_config: CheckpointConfig,
    /// How long a collective (all-reduce, broadcast) may wait for a slow rank before the group
    /// fails. A dead rank is noticed at once regardless.
    pub collective_timeout: Duration,
    /// How long workers may take to start and join before the attempt counts as failed.
    pub start_timeout: Duration,
    /// How long an attempt may wait for its placement group on a cluster (busy with other
    /// groups, or, for a retry, too small after a node was lost) before the run fails; None
    /// waits as long as it takes. Either way the wait says every few seconds what it waits for.
    pub placement_timeout: Option<Duration>,
    /// Print one line per report as it arrives (the plain reporter).
    pub verbose: bool,
    /// Stop criteria (Ray's `RunConfig(stop=...)`): the run is asked to stop at the first report
    /// where some metric named here is >= its threshold, e.g. `training_iteration` >= 10.
    pub stop: BTreeMap<String, f64>,
    /// A head's HOST:PORT to run the workers on its cluster; default `$RTUNE_ADDRESS`, else the
    /// embedded one-machine cluster.
    pub cluster: Option<String>,
    /// The cluster token; default `$RTUNE_TOKEN`.
    pub cluster_token: Option<String>,
    /// A param the train function never reads fails the run (a search over it would change
    /// nothing); by default it is a warning (in the log, and a sweep's summary).
    pub strict_params: bool,
    /// How the store of an `s3://` storage path is reached (its workers get the same).
    #[serde(default)]
    pub store: StoreSettings,
    /// A sweep's callbacks (see `callback`); a single `fit` calls none.
    #[serde(skip)]
    pub callbacks: Callbacks,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            name: None,
            storage_path: None,
            sync_period: Duration::from_secs(10),
            failure_config: FailureConfig::default(),
            checkpoint_config: CheckpointConfig::default(),
            collective_timeout: Duration::from_secs(600),
            start_timeout: Duration::from_secs(120),
            placement_timeout: None,
            verbose: false,
            stop: BTreeMap::new(),
            cluster: None,
            cluster_token: None,
            strict_params: false,
            store: StoreSettings::default(),
            callbacks: Callbacks::default(),
        }
    }
}

impl RunConfig {
    pub fn new(name: impl Into<String>) -> Self {
        RunConfig { name: Some(name.into()), ..RunConfig::default() }
    }

    /// Adds a sweep callback (called after those added before it).
    pub fn callback(mut self, callback: impl Callback + 'static) -> Self {
        self.callbacks.0.push(std::sync::Arc::new(callback));
        self
    }

    pub fn storage_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.storage_path = Some(path.into());
        self
    }

    /// How the store of an `s3://` storage path is reached.
    pub fn store(mut self, settings: StoreSettings) -> Self {
        self.store = settings;
        self
    }

    pub fn failure_config(mut self, config: FailureConfig) -> Self {
        self.failure_config = config;
        self
    }

    pub fn checkpoint_config(mut self, config: CheckpointConfig) -> Self {
        self.checkpoint_config = config;
        self
    }

    pub fn collective_timeout(mut self, timeout: Duration) -> Self {
        self.collective_timeout = timeout;
        self
    }

    pub fn placement_timeout(mut self, timeout: Duration) -> Self {
        self.placement_timeout = Some(timeout);
        self
    }

    /// Adds a stop criterion: stop once `metric` >= `threshold`.
    pub fn stop(mut self, metric: impl Into<String>, threshold: f64) -> Self {
        self.stop.insert(metric.into(), threshold);
        self
    }

    /// Runs the workers on the cluster served by the head at `address` (HOST:PORT).
    pub fn cluster(mut self, address: impl Into<String>, token: Option<String>) -> Self {
        self.cluster = Some(address.into());
        self.cluster_token = token;
        self
    }

    pub fn resolved_cluster(&self) -> Option<(String, Option<String>)> {
        let address = self.cluster.clone().or_else(|| std::env::var(ADDRESS_ENV).ok())?;
        let token = self.cluster_token.clone().or_else(|| std::env::var(TOKEN_ENV).ok());
        Some((address, token))
    }

    pub fn verbose(mut self, on: bool) -> Self {
        self.verbose = on;
        self
    }

    /// Where experiments go: `storage_path`, else `$RTUNE_STORAGE_PATH`, else `~/rtune_results`.
    pub fn resolved_storage_path(&self) -> PathBuf {
        if let Some(Ok((bucket, prefix))) = self.store_url().map(split_store_url) {
            return staging_for(bucket, prefix);
        }
        if let Some(path) = &self.storage_path {
            return expand_home(path);
        }
        if let Some(path) = std::env::var_os("RTUNE_STORAGE_PATH") {
            return expand_home(Path::new(&path));
        }
        home().join("rtune_results")
    }

    /// The object store URL the storage path is (`s3://bucket/prefix`), if it is one.
    pub fn store_url(&self) -> Option<&str> {
        self.storage_path.as_deref()?.to_str().filter(|p| p.starts_with(STORE_SCHEME))
    }

    pub fn validate(&self) -> Result<()> {
        crate::error::first(self.problems())
    }

    /// Every mistake in the run's settings, each naming its setting.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        if let Some(name) = &self.name
            && let Err(why) = check_folder_name(name)
        {
            problems.push((Setting::Name, why));
        }
        if let Some(url) = self.store_url()
            && let Err(why) = split_store_url(url)
        {
            problems.push((Setting::StoragePath, why));
        }
        if self.sync_period.is_zero() {
            problems.push((Setting::SyncPeriod, "is 0; use a number of seconds > 0".into()));
        }
        problems.extend(self.store.problems());
        problems.extend(self.failure_config.problems());
        problems.extend(self.checkpoint_config.problems());
        problems
    }
}

/// The URL scheme of an experiment on S3 or an S3-compatible store (`storage::remote`).
pub(crate) const STORE_SCHEME: &str = "s3://";

/// `s3://bucket/prefix` as its bucket and prefix (without slashes at its ends); why not, when
/// it names no bucket.
pub(crate) fn split_store_url(url: &str) -> std::result::Result<(&str, &str), String> {
    let bad = |why: &str| format!("{url:?} {why} (e.g. s3://bucket/prefix)");
    let rest = url.strip_prefix(STORE_SCHEME).ok_or_else(|| bad("is not an s3:// URL"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c);
    if bucket.len() < 3 || bucket.len() > 63 || !bucket.chars().all(allowed) {
        return Err(bad("does not name a bucket (3 to 63 of a-z, 0-9, `.` and `-`)"));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|s| s == "." || s == "..") {
        return Err(bad("has `.` or `..` in its prefix"));
    }
    Ok((bucket, prefix))
}

/// Where an experiment folder on a store is staged on this machine: `$RTUNE_STAGING`, else
/// `~/.cache/rtune/staging`, then the bucket and the prefix.
pub(crate) fn staging_for(bucket: &str, prefix: &str) -> PathBuf {
    let root = std::env::var_os("RTUNE_STAGING")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cache/rtune/staging"));
    let path = root.join(bucket);
    if prefix.is_empty() { path } else { path.join(prefix) }
}

/// rtune's cache on this machine: `$RTUNE_CACHE`, else `~/.cache/rtune`. Node agents keep the
/// drivers' binaries there, and their workers' scratch folders.
pub(crate) fn cache_root() -> PathBuf {
    std::env::var_os("RTUNE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cache/rtune"))
}

/// The folder a node agent gives each worker it starts to work in when the worker does not see
/// the driver's files (removed when the worker exits).
pub const SCRATCH_ENV: &str = "RTUNE_SCRATCH";

/// The most seconds a setting may be (about 31 years): past it, a number of seconds is a
/// mistake (and no `Duration` holds `1e30` seconds).
pub(crate) const MAX_SECONDS: f64 = 1e9;

/// `seconds` as a `Duration`: finite, at least 0 and at most `MAX_SECONDS`; why not, when not.
pub fn duration(seconds: f64) -> std::result::Result<Duration, String> {
    if !(seconds.is_finite() && (0.0..=MAX_SECONDS).contains(&seconds)) {
        // `1e300`, not three hundred digits.
        let given =
            if seconds.abs() >= 1e15 { format!("{seconds:e}") } else { seconds.to_string() };
        return Err(format!("is {given}; use a number of seconds from 0 to {MAX_SECONDS:e}"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The most workers a run may ask for: more than any cluster runs.
pub const MAX_WORKERS: usize = 100_000;

/// The home directory (`HOME`), or the current one without it.
fn home() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| ".".into())
}

/// `~` and `~/x` as the shell reads them (the home directory), as Ray does with its
/// `storage_path`; any other path as it is.
pub fn expand_home(path: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) => home().join(rest),
        Err(_) => path.to_owned(),
    }
}

/// Whether `name` can be a run's or an experiment's folder under its storage path: not empty or
/// blank, no `/` nor control character (a newline), not `.` or `..`, not starting with `-` (a
/// folder a command line would take for an option). Why not, when not.
pub(crate) fn check_folder_name(name: &str) -> std::result::Result<(), String> {
    let bad = name.trim().is_empty()
        || name.contains('/')
        || name.chars().any(char::is_control)
        || name == "."
        || name == ".."
        || name.starts_with('-');
    if bad {
        return Err(format!(
            "{name:?} is not a folder name; use letters, digits, '-', '_' and '.' (not first), \
             no '/'"
        ));
    }
    Ok(())
}

/// The name in `names` nearest to `word` (case aside) within a few edits, for "did you mean"
/// hints: a name the word starts with, or that starts with it, is near (`max` for `maximum`).
pub fn nearest<'n>(word: &str, names: &[&'n str]) -> Option<&'n str> {
    let word = word.to_lowercase();
    let (distance, name) = names
        .iter()
        .map(|n| {
            let name = n.to_lowercase();
            let prefix = name.len() >= 3 && (word.starts_with(&name) || name.starts_with(&word));
            (if prefix { 1 } else { edit_distance(&word, &name) }, *n)
        })
        .min_by_key(|(d, _)| *d)?;
    (distance <= 2.max(word.chars().count() / 3)).then_some(name)
}

/// Levenshtein distance in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one rule's order: the checkpoint score (without the sweep's constraints), else the
    /// sweep's metric with its constraints, else the latest.
    #[test]
    fn checkpoints_rank_by_the_score_then_the_sweep_metric_then_recency() {
        let constraints = ["mem_over".to_owned()];
        let by = |metric: &str, mode, constraints: &[String]| CheckpointRanking::By {
            metric: metric.into(),
            mode,
            constraints: constraints.to_vec(),
        };
        let scored = CheckpointConfig::default().score("loss", Mode::Min);
        let sweep = Some(("acc", Mode::Max));
        assert_eq!(scored.ranking(sweep, &constraints), by("loss", Mode::Min, &[]));
        let plain = CheckpointConfig::default();
        assert_eq!(plain.ranking(sweep, &constraints), by("acc", Mode::Max, &constraints));
        assert_eq!(plain.ranking(None, &constraints), CheckpointRanking::Latest);
    }

    #[test]
    fn store_urls_name_a_bucket_and_a_prefix() {
        assert_eq!(split_store_url("s3://exp/a/b/"), Ok(("exp", "a/b")));
        assert_eq!(split_store_url("s3://exp"), Ok(("exp", "")));
        for bad in ["s3:///x", "s3://Caps/x", "s3://ab", "s3://exp/../x", "gs://exp/x"] {
            assert!(split_store_url(bad).is_err(), "{bad}");
        }
        let run = RunConfig::new("n").storage_path("s3://exp/a");
        assert_eq!(run.store_url(), Some("s3://exp/a"));
        assert!(run.resolved_storage_path().ends_with("exp/a"));
        assert!(RunConfig::new("n").storage_path("s3://E/a").validate().is_err());
    }

    #[test]
    fn folder_names_and_home_paths() {
        for bad in ["", "  ", "a/b", "a\nb", ".", "..", "-x"] {
            assert!(check_folder_name(bad).is_err(), "{bad:?}");
        }
        for good in ["digits", "run-2", "a.b", "sweep_2026-11-25"] {
            assert!(check_folder_name(good).is_ok(), "{good:?}");
        }
        let home = home();
        assert_eq!(expand_home(Path::new("~/x")), home.join("x"));
        assert_eq!(expand_home(Path::new("~")), home);
        assert_eq!(expand_home(Path::new("/tmp/~x")), Path::new("/tmp/~x"));
        assert_eq!(expand_home(Path::new("~x")), Path::new("~x"));
    }

    #[test]
    fn zero_workers_is_local_mode_and_too_many_a_clear_error() {
        let local = ScalingConfig::local();
        assert!(local.validate().is_ok() && local.is_local());
        assert_eq!((local.ranks(), ScalingConfig::workers(3).ranks()), (1, 3));
        let err = ScalingConfig::workers(MAX_WORKERS + 1).validate().unwrap_err().to_string();
        assert!(err.contains("num_workers") && err.contains("or 0 for local mode"), "{err}");
    }

    #[test]
    fn an_elastic_group_has_a_min_and_a_max() {
        let elastic = ScalingConfig::elastic(2, 4);
        assert!(elastic.validate().is_ok() && elastic.is_elastic() && !elastic.is_local());
        assert_eq!((elastic.ranks(), elastic.max_ranks()), (2, 4));
        assert_eq!(elastic.describe_workers(), "{ min = 2, max = 4 }");
        assert_eq!(ScalingConfig::workers(3).max_ranks(), 3);
        assert!(ScalingConfig::elastic(3, 3).validate().is_ok(), "min = max is allowed");
        assert!(elastic.clone().shrink_for_waiting(true).validate().is_ok());
        let err = ScalingConfig::workers(2).shrink_for_waiting(true).validate().unwrap_err();
        assert!(err.to_string().contains("shrink_for_waiting"), "{err}");
        for (min, max, says) in [
            (0, 2, "min must be at least 1"),
            (3, 2, "max must be at least min"),
            (1, MAX_WORKERS + 1, "max is too large"),
        ] {
            let err = ScalingConfig::elastic(min, max).validate().unwrap_err().to_string();
            assert!(err.contains("num_workers") && err.contains(says), "{min}-{max}: {err}");
        }
        // A cluster's pool resizes groups as this machine's does.
        let run = RunConfig::new("r").cluster("127.0.0.1:1", None);
        assert!(elastic.check_placement(&run).is_ok());
        // A config from before elastic groups reads as a fixed one.
        let old: ScalingConfig = serde_json::from_str(
            r#"{"num_workers":2,"use_gpu":false,"resources_per_worker":{},"placement_strategy":"PACK"}"#,
        )
        .unwrap();
        assert_eq!(old, ScalingConfig::workers(2));
    }

    #[test]
    fn failure_budget_follows_ray() {
        use FailureDecision::{Fail, Halted, Retry};
        let decide = |max, failures| FailureConfig::max_failures(max).decide(failures, false);
        assert_eq!(decide(0, 1), Fail);
        assert_eq!((decide(2, 2), decide(2, 3)), (Retry, Fail));
        assert_eq!(decide(-1, 1_000), Retry);
        // A run being stopped ends whatever its count.
        assert_eq!(FailureConfig::max_failures(2).decide(1, true), Halted);
        assert_eq!(FailureConfig::max_failures(0).decide(1, true), Halted);
        assert!(FailureConfig::max_failures(-2).validate().is_err());
    }

    #[test]
    fn gpu_fractions_above_one_must_be_whole() {
        let cfg = ScalingConfig::workers(1)
            .use_gpu(true)
            .resources_per_worker(BTreeMap::from([("GPU".to_string(), 1.5)]));
        assert!(cfg.validate().is_err());
        let shared = ScalingConfig::workers(2)
            .use_gpu(true)
            .resources_per_worker(BTreeMap::from([("GPU".to_string(), 0.5)]));
        assert!(shared.validate().is_ok());
        assert_eq!(shared.gpus_per_worker(), 0.5);
    }
}
