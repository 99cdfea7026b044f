//! Ray Train's half: one distributed training run, usable on its own without a Tuner.
//!
//! `TorchTrainer::fit` validates the configs, makes the run directory, starts the worker hub and
//! runs attempts of the worker group until one completes or the failures exceed
//! `FailureConfig::max_failures`. After a failure the next attempt resumes from the latest
//! checkpoint, and the reports made after that checkpoint are rolled back (in memory and in
//! result.json / progress.csv), so the history holds every iteration exactly once.
//! Scheduling decisions (stop a trial early) come from the Tuner, not from here.
//!
//! Here: `TorchTrainer`, what `fit` returns, and the run around its worker group's attempts as
//! explicit states (`run`), decided by two pure policies side by side (`policy`: failures and
//! scaling); where a run goes (the local machine or a head's cluster) is `placement`. What the
//! driver records of the run is `record`; the group's framework set-up, its `Backend`.

pub mod command;
mod placement;
mod policy;
mod recording;
mod run;
mod train_fn;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rtune_searchers::{Params, Value};

use crate::config::{RunConfig, ScalingConfig};
use crate::data::{Columns, DataConfig, Dataset, Preprocessor};
use crate::error::{Error, Result};
use crate::group::{Backend, TrialNames};
pub use crate::group::{TorchConfig, TreeBackend};
use crate::metrics::Metrics;
use crate::outcome::{Checkpoint, TrainResult};
use crate::runtime::Driver;
use crate::setting::Setting;
use crate::storage::remote::Remote;
use crate::storage::sync::Syncer;
use crate::storage::{self, ResultFiles, unix_time};
pub use command::CommandTrainable;
use placement::Target;
pub use train_fn::{TrainContextType, TrainFnId};

/// Where a run (or a sweep, in its experiment directory) keeps datasets written as parquet.
pub(crate) const DATASETS_DIR: &str = ".datasets";

/// What steers a run from outside (a sweep steering its trial), and hears how it goes.
pub(crate) trait Steering: Send {
    /// Asked after every recorded report (with its metrics, rtune's automatic ones included)
    /// whether the run should stop.
    fn decide(&mut self, metrics: &Metrics) -> Result<bool>;

    /// Told when the run's resources are reserved and its workers start (before every
    /// attempt): until then a trial is waiting (PENDING), not running.
    fn started(&mut self) {}

    /// Whether the run was asked to stop, whether or not an answer to a report told its
    /// workers yet. An attempt that fails then (its workers killed with the sweep that was
    /// interrupted, its node drained) ends the run: it is not retried, and it is not counted
    /// as a failure.
    fn halting(&self) -> bool {
        false
    }

    /// Whether an elastic run of at most `max_ranks` may take more of the pool now: no other
    /// run waits to start (a sweep's waiting trials come before growth), and it is the one to
    /// grow first (a sweep's trial furthest along).
    fn may_grow(&self, _max_ranks: usize) -> bool {
        true
    }
}

/// A run nothing steers (`fit`): it goes on to its end.
struct Unsteered;

impl Steering for Unsteered {
    fn decide(&mut self, _: &Metrics) -> Result<bool> {
        Ok(false)
    }
}

/// A distributed training run of `train_fn` on a group of worker processes (Ray's
/// `TorchTrainer`).
#[derive(Debug, Clone)]
pub struct TorchTrainer {
    train_fn: TrainFnId,
    params: Params,
    scaling: ScalingConfig,
    run: RunConfig,
    resume: Option<Checkpoint>,
    /// Set by the Tuner: the trial this run is (written into every result row).
    trial_id: Option<String>,
    /// Set by the Tuner of a sweep on an object store: the run's folder there, where the rank
    /// that commits a checkpoint uploads it.
    store_url: Option<String>,
    /// Set by the Tuner: go on with the run already in the run directory (see `picking_up`).
    pick_up: bool,
    /// Start local workers from the driver's fork server (TuneConfig's `reuse_actors`).
    warm_start: bool,
    /// Extra environment variables of every worker process.
    env: Vec<(String, String)>,
    /// Datasets, columns and preprocessor, as given.
    data: DataConfig,
    /// The same once prepared (`prepare_data`), as JSON for the workers; empty for none.
    data_json: Arc<str>,
    /// What its worker group sets up around the train function (Ray's `torch_config`).
    backend: Arc<dyn Backend>,
}

impl TorchTrainer {
    /// A run of `train_fn` (a `fn(&mut TrainContext) -> anyhow::Result<()>`).
    pub fn new<C: TrainContextType>(train_fn: fn(&mut C) -> anyhow::Result<()>) -> Self {
        Self::of(TrainFnId::of(train_fn))
    }

    /// A run of the train function at `train_fn` (a registry's, which keeps them as places).
    pub fn of(train_fn: TrainFnId) -> Self {
        TorchTrainer {
            train_fn,
            params: Params::new(),
            scaling: ScalingConfig::default(),
            run: RunConfig::default(),
            resume: None,
            trial_id: None,
            store_url: None,
            pick_up: false,
            warm_start: true,
            env: Vec::new(),
            data: DataConfig::default(),
            data_json: "".into(),
            backend: Arc::new(TorchConfig::new()),
        }
    }

    /// Its names as its train function sees them: the trial id, the trial's directory name,
    /// and the experiment's (empty outside a sweep).
    fn trial_names(&self, run_dir: &std::path::Path) -> TrialNames {
        let Some(id) = &self.trial_id else { return TrialNames::default() };
        let name = |p: Option<&std::path::Path>| {
            p.and_then(std::path::Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        TrialNames {
            trial_id: id.clone(),
            trial_name: name(Some(run_dir)),
            experiment_name: name(run_dir.parent()),
        }
    }

    /// Marks this run as trial `id` of a sweep.
    pub(crate) fn for_trial(mut self, id: String) -> Self {
        self.trial_id = Some(id);
        self
    }

    /// Checkpoints go up to the run's folder `url` on an object store from their rank.
    pub(crate) fn store_url(mut self, url: Option<String>) -> Self {
        self.store_url = url;
        self
    }

    /// Goes on with the run an earlier driver left in the run directory (a sweep restored after
    /// its driver died, a paused trial): from its latest recorded checkpoint, keeping the rows up
    /// to it, in later attempts than the ones before.
    pub(crate) fn picking_up(mut self) -> Self {
        self.pick_up = true;
        self
    }

    /// Whether local workers start from the driver's warm fork server (default) or with a
    /// fresh exec of the binary each.
    pub(crate) fn warm_start(mut self, on: bool) -> Self {
        self.warm_start = on;
        self
    }

    /// The train loop config every worker gets as `ctx.params()`.
    pub fn train_loop_config(mut self, params: Params) -> Self {
        self.params = params;
        self
    }

    /// Sets an environment variable in every worker process (Ray's `runtime_env` `env_vars`);
    /// a later call for the same name wins.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.env.retain(|(n, _)| *n != name);
        self.env.push((name, value.into()));
        self
    }

    /// Datasets by name (Ray Train's `datasets=`): a train function reads its part of each with
    /// `ctx.dataset_shard(name)`. The preprocessor is fitted on the one named `train`. A later
    /// dataset of the same name replaces an earlier one. See [`crate::data`].
    pub fn datasets<S: Into<String>>(
        mut self,
        datasets: impl IntoIterator<Item = (S, Dataset)>,
    ) -> Self {
        self.data.add(datasets.into_iter().map(|(n, d)| (n.into(), d)));
        self
    }

    /// Which dataset columns are features and which is the label (by default every column is
    /// a feature and there is no label).
    pub fn columns(mut self, columns: Columns) -> Self {
        self.data.set_columns(columns);
        self
    }

    /// Preprocessing fitted on the `train` dataset, applied to every dataset's batches, and
    /// saved with every checkpoint (`preprocessor.json`) for prediction.
    pub fn preprocessor(mut self, preprocessor: impl Into<Preprocessor>) -> Self {
        self.data.set_preprocessor(preprocessor.into());
        self
    }

    /// Reads and checks the datasets and fits the preprocessor, once: every run of this trainer
    /// (every trial of a sweep) uses the result. CSV files and frames are written as parquet
    /// under `cache_dir`. On a cluster with a store (`store`: the folder they go into there)
    /// they go into the store too, for workers that see nothing of this machine's.
    pub(crate) fn prepare_data(
        mut self,
        cache_dir: &std::path::Path,
        store: Option<&Remote>,
    ) -> Result<Self> {
        if let Some(mut plan) = self.data.prepare(cache_dir)? {
            if let Some(store) = store.filter(|_| self.run.resolved_cluster().is_some()) {
                plan.upload(&store.join(DATASETS_DIR))?;
            }
            self.data_json = serde_json::to_string(&plan).expect("the data plan serialises").into();
        }
        Ok(self)
    }

    /// Whether it has datasets that `prepare_data` has not prepared yet.
    fn data_unprepared(&self) -> bool {
        !self.data.is_empty() && self.data_json.is_empty()
    }

    /// The Torch backend's settings (Ray's `torch_config`): what models on a GPU average
    /// their gradients through (see [`TorchConfig`]).
    pub fn torch_config(mut self, config: TorchConfig) -> Self {
        self.backend = Arc::new(config);
        self
    }

    /// What its worker group sets up around the train function: Torch's (the default) or a
    /// tree library's (which `rtune`'s `XGBoostTrainer` sets).
    pub fn backend(mut self, backend: impl Backend + 'static) -> Self {
        self.backend = Arc::new(backend);
        self
    }

    pub fn scaling(mut self, scaling: ScalingConfig) -> Self {
        self.scaling = scaling;
        self
    }

    pub fn run_config(mut self, run: RunConfig) -> Self {
        self.run = run;
        self
    }

    /// Starts the first attempt from `checkpoint` (seen as `ctx.checkpoint()`).
    pub fn resume_from_checkpoint(mut self, checkpoint: Checkpoint) -> Self {
        self.resume = Some(checkpoint);
        self
    }

    /// The train loop config.
    pub(crate) fn params(&self) -> &Params {
        &self.params
    }

    /// The run settings.
    pub(crate) fn run(&self) -> &RunConfig {
        &self.run
    }

    /// The scaling settings.
    pub(crate) fn scaling_config(&self) -> &ScalingConfig {
        &self.scaling
    }

    /// Checks the settings, as `fit` does before anything starts.
    pub(crate) fn validate(&self) -> Result<()> {
        self.scaling.validate()?;
        self.run.validate()?;
        self.data.validate()?;
        self.scaling.check_placement(&self.run)?;
        if self.scaling.is_elastic() && !self.backend.resizes_in_place() {
            return Err(Error::config(
                Setting::NumWorkers,
                format!(
                    "{} trains on a group of a fixed size (its library's collective cannot \
                     take ranks in or let them go): give one number of workers, not a min and \
                     a max",
                    self.backend.name()
                ),
            ));
        }
        check_finite_params(&self.params)
    }

    /// One trial of a sweep: like `fit`, on the process's shared driver, in `run_dir` (made
    /// here), steered by `steering` (a scheduler's decision is answered to the workers with
    /// the report that led to it). Its settings are the sweep's, checked once by `Tuner::plan`:
    /// only its params are its own.
    pub(crate) async fn run_trial(
        &self,
        driver: &'static Driver,
        run_dir: PathBuf,
        steering: &mut dyn Steering,
    ) -> Result<TrainResult> {
        let started_at = Instant::now();
        check_finite_params(&self.params)?;
        if self.data_unprepared() {
            return Err(Error::Data("the sweep's datasets were not prepared".into()));
        }
        let target = match self.run.resolved_cluster() {
            None => self.place_locally(driver).await?,
            Some((address, token)) => Target::Cluster { address, token },
        };
        // The experiment folder was proven writable when the sweep began: a trial's folder in it
        // needs no probe file (a file made and removed per trial is one more inode to allocate).
        std::fs::create_dir_all(&run_dir).map_err(|e| Error::io(&run_dir, e))?;
        self.run_placed(driver, run_dir, target, steering, started_at).await
    }

    /// The common end of `fit` and `run_trial`, once placed and with a run directory:
    /// `params.json`, the attempts, and the result (an error when the failures ran out).
    async fn run_placed(
        &self,
        driver: &'static Driver,
        run_dir: PathBuf,
        target: Target,
        steering: &mut dyn Steering,
        started_at: Instant,
    ) -> Result<TrainResult> {
        let params_json = serde_json::to_string(&self.params).expect("params serialise");
        storage::atomic_write(&run_dir.join(storage::PARAMS_FILE), params_json.as_bytes())?;
        let mut result =
            run::Run::to_end(self, driver, (run_dir, params_json), target, steering).await?;
        result.fit_seconds = started_at.elapsed().as_secs_f64();
        match result.error {
            Some(_) => Err(Error::TrainingFailed(Box::new(result))),
            None => Ok(result),
        }
    }

    /// Runs the training to its end. Config mistakes fail before anything starts; a run whose
    /// failures exceed `max_failures` returns `Error::TrainingFailed` with everything reported
    /// so far.
    pub fn fit(self) -> Result<TrainResult> {
        let started = Instant::now();
        self.validate()?;
        let driver = Driver::get()?;
        // On an object store: one that cannot be listed is refused before anything starts.
        let store = match Remote::of_run(&self.run) {
            Some(remote) => {
                let remote = remote?;
                driver.block_on(remote.check())?;
                Some(remote)
            }
            None => None,
        };
        // Placement first: a group that can never run on the local machine (too big, or GPUs its
        // workers cannot use) is a config error, before any file exists (a cluster answers that
        // when asked to reserve). On the local machine this waits while other runs of this process
        // hold what the group needs.
        let target = match self.run.resolved_cluster() {
            None => {
                driver.check_local(&self.scaling)?;
                driver.block_on(self.place_locally(driver))?
            }
            Some((address, token)) => Target::Cluster { address, token },
        };
        let run_dir = self.make_run_dir()?;
        // The run's folder on the store, where its checkpoints go up from their rank.
        let store =
            store.map(|s| s.join(&run_dir.file_name().unwrap_or_default().to_string_lossy()));
        let mut this = self;
        this.store_url = store.as_ref().map(|s| s.url().to_owned());
        let this = if this.data_unprepared() {
            match this.prepare_data(&run_dir.join(DATASETS_DIR), store.as_ref()) {
                Ok(this) => this,
                Err(e) => {
                    // Nothing ran: leave no run behind (the folder was made empty above).
                    let _ = std::fs::remove_dir_all(&run_dir);
                    return Err(e);
                }
            }
        } else {
            this
        };
        let params = this.params.clone();
        let outcome = driver.block_on(this.run_placed(
            driver,
            run_dir.clone(),
            target,
            &mut Unsteered,
            started,
        ));
        // The run's folder goes to the store as it ended, failed or not (its checkpoints are
        // there already).
        if let Some(store) = store {
            let mut syncer = Syncer::new(store, run_dir);
            driver.block_on(syncer.sync())?;
        }
        let result = outcome?;
        if !result.unread_params.is_empty() {
            tracing::warn!("{}", unread_note(&result.unread_params, &params));
        }
        Ok(result)
    }

    fn make_run_dir(&self) -> Result<PathBuf> {
        let storage = self.run.resolved_storage_path();
        let name = self.run.name.clone().unwrap_or_else(|| {
            let t = unix_time();
            format!("TorchTrainer_{}_{:03}", t as u64, (t.fract() * 1000.0) as u32)
        });
        let run_dir = storage.join(&name);
        if run_dir.join(ResultFiles::RESULT_JSON).exists() {
            return Err(Error::config(
                Setting::Name,
                format!(
                    "{} already holds a run; pick another name or remove it",
                    run_dir.display()
                ),
            ));
        }
        storage::ensure_writable_dir(&run_dir).map_err(|e| {
            Error::config(Setting::StoragePath, format!("cannot write the run directory: {e}"))
        })?;
        Ok(run_dir)
    }

    /// What the run's reservations in the local pool are labelled.
    fn pool_label(&self) -> &str {
        self.run.name.as_deref().unwrap_or("TorchTrainer")
    }

    /// Reserves the worker group's resources in the process's shared local pool.
    async fn place_locally(&self, driver: &'static Driver) -> Result<Target> {
        let began = Instant::now();
        let held = driver.reserve_local(&self.scaling, self.pool_label()).await?;
        Ok(Target::Local(held, began.elapsed().as_secs_f64()))
    }
}

/// Params travel to workers and into `params.json` as JSON, which has no NaN or infinity
/// (serde would write `null` and the value would come back as something else): refuse them.
fn check_finite_params(params: &Params) -> Result<()> {
    fn finite(v: &Value) -> bool {
        match v {
            Value::Float(x) => x.is_finite(),
            Value::List(items) => items.iter().all(finite),
            Value::Map(m) => m.iter().all(|(_, v)| finite(v)),
            _ => true,
        }
    }
    match params.flatten().into_iter().find(|(_, v)| !finite(v)) {
        None => Ok(()),
        Some((key, v)) => Err(Error::config(
            Setting::Params,
            format!(
                "`{key}` = {} is not a finite number; params are stored as JSON, which has no \
                 NaN or infinity: use a finite number",
                v.describe()
            ),
        )),
    }
}

/// One line on params a train function never read: a search over them changes nothing. The
/// nearest key it did read is named (a renamed param: `LR` beside `lr`).
pub(crate) fn unread_note(unread: &[String], params: &Params) -> String {
    let read: Vec<&str> = params.keys().filter(|k| !unread.iter().any(|u| u == k)).collect();
    let names: Vec<String> = unread.iter().map(|k| format!("`{k}`")).collect();
    let hint = unread
        .iter()
        .find_map(|k| {
            crate::config::nearest(k, &read).map(|near| format!(" (did you mean `{near}`?)"))
        })
        .unwrap_or_default();
    format!(
        "param{} {} never read by the train function: {} nothing{hint}",
        if unread.len() > 1 { "s" } else { "" },
        names.join(", "),
        if unread.len() > 1 { "they change" } else { "it changes" },
    )
}
