//! `[run]` of a sweep file: stop criteria, failures, checkpoints, the cluster, the object store,
//! and the trackers the sweep is also logged to.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rtune_searchers::Mode;

use super::{MAX_COUNT, num_of, positive};
use crate::doc::{Fields, Item, Kind, Report};
use rtune_driver::config::{CheckpointConfig, FailureConfig, StoreSettings};

/// `[run]`: what `read_run` gives.
pub(super) struct RunParts {
    pub(super) stop: BTreeMap<String, f64>,
    pub(super) failure: FailureConfig,
    pub(super) checkpoint: CheckpointConfig,
    pub(super) cluster: Option<String>,
    pub(super) strict_params: bool,
    pub(super) sync_period: Option<std::time::Duration>,
    pub(super) store: StoreSettings,
    pub(super) mlflow: Option<MlflowSettings>,
    pub(super) optuna: Option<PathBuf>,
    /// `tensorboard = true`: each trial's results as TensorBoard event files in its folder.
    pub(super) tensorboard: bool,
}

/// `[run.mlflow]`: the MLflow tracking server (else `MLFLOW_TRACKING_URI`) and experiment (else
/// one named as the sweep).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MlflowSettings {
    pub tracking_uri: Option<String>,
    pub experiment: Option<String>,
    /// The best trial's latest checkpoint goes into the parent run's artifacts.
    pub log_artifacts: bool,
}

impl MlflowSettings {
    pub(super) fn logger(&self) -> rtune_driver::callback::MlflowLogger {
        let logger = match &self.tracking_uri {
            Some(uri) => rtune_driver::callback::MlflowLogger::new(uri),
            None => rtune_driver::callback::MlflowLogger::from_env(),
        };
        let logger = logger.log_artifacts(self.log_artifacts);
        match &self.experiment {
            Some(name) => logger.experiment(name),
            None => logger,
        }
    }
}

pub(super) fn read_run(item: &Item, report: &mut Report<'_>) -> RunParts {
    let mut fields = Fields::of(item, "run", report);
    let mut stop = BTreeMap::new();
    if let Some(table) = fields.get("stop") {
        if let Kind::Table(entries) = &table.kind {
            for (metric, origin, value) in entries {
                match num_of(&value.kind) {
                    Some(x) if x.is_finite() => {
                        stop.insert(metric.clone(), x);
                    }
                    _ => report.add(
                        &format!("run.stop.{metric}"),
                        origin,
                        "must be a finite number: the trial stops at its first report >= it",
                    ),
                }
            }
        } else {
            report.add("run.stop", &table.origin, "must be a table of metric = threshold");
        }
    }
    let mut failure = FailureConfig::default();
    if let Some(table) = fields.get("failure") {
        let mut f = Fields::of(table, "run.failure", report);
        if let Some(n) = f.value::<i64>("max_failures", report) {
            if n < -1 || n > i32::MAX as i64 {
                f.refuse("max_failures", format!("is {n}; use -1 (unlimited), 0 or more"), report);
            }
            failure = FailureConfig::max_failures(n.clamp(-1, i32::MAX as i64) as i32);
        }
        f.done(report);
    }
    let mut checkpoint = CheckpointConfig::new();
    if let Some(table) = fields.get("checkpoint") {
        let mut c = Fields::of(table, "run.checkpoint", report);
        if let Some(n) = positive(&mut c, "num_to_keep", MAX_COUNT, report) {
            checkpoint = checkpoint.num_to_keep(n);
        }
        let attribute = c.value::<String>("score_attribute", report);
        let order = c.one_of("score_order", &["max", "min"], report);
        if c.one_of("upload", &["sync", "async"], report).as_deref() == Some("async") {
            checkpoint = checkpoint.upload(rtune_driver::config::CheckpointUpload::Async);
        }
        if let Some(attribute) = attribute {
            let mode = if order.as_deref() == Some("min") { Mode::Min } else { Mode::Max };
            checkpoint = checkpoint.score(attribute, mode);
        }
        c.done(report);
    }
    let cluster = fields.value::<String>("cluster", report);
    let strict_params = fields.value::<bool>("strict_params", report).unwrap_or(false);
    let sync_period = seconds(&mut fields, "sync_period_s", report);
    let mut store = StoreSettings::default();
    if let Some(table) = fields.get("store") {
        let mut f = Fields::of(table, "run.store", report);
        for secret in ["access_key_id", "secret_access_key", "session_token"] {
            if f.get(secret).is_some() {
                let why = "credentials are not read from a sweep file (it is copied into the \
                           experiment): set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and \
                           AWS_SESSION_TOKEN in the environment";
                f.refuse(secret, why, report);
            }
        }
        store.endpoint = f.value::<String>("endpoint", report);
        if let Some(endpoint) = &store.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            let why =
                format!("is {endpoint:?}; use the server's URL, e.g. \"http://127.0.0.1:9000\"");
            f.refuse("endpoint", why, report);
        }
        store.region = f.value::<String>("region", report);
        store.retry_timeout = seconds(&mut f, "retry_timeout_s", report);
        f.done(report);
    }
    let mlflow = fields.get("mlflow").map(|table| {
        let mut f = Fields::of(table, "run.mlflow", report);
        let settings = MlflowSettings {
            tracking_uri: f.value::<String>("tracking_uri", report),
            experiment: f.value::<String>("experiment", report),
            log_artifacts: f.value::<bool>("log_artifacts", report).unwrap_or(false),
        };
        if let Err(why) = settings.logger().tracking_uri() {
            f.refuse("tracking_uri", why, report);
        }
        f.done(report);
        settings
    });
    let optuna = fields.value::<String>("optuna", report).map(PathBuf::from);
    if let Some(journal) = &optuna
        && let Err(why) = rtune_driver::callback::OptunaJournal::new(journal).check()
    {
        fields.refuse("optuna", format!("is {journal:?}: {why}"), report);
    }
    let tensorboard = fields.value::<bool>("tensorboard", report).unwrap_or(false);
    fields.done(report);
    RunParts {
        tensorboard,
        stop,
        failure,
        checkpoint,
        cluster,
        strict_params,
        sync_period,
        store,
        mlflow,
        optuna,
    }
}

/// A number of seconds > 0 at `key`, as a duration.
fn seconds(
    fields: &mut Fields<'_>,
    key: &'static str,
    report: &mut Report<'_>,
) -> Option<std::time::Duration> {
    match fields.value::<f64>(key, report)? {
        s if s <= 0.0 => {
            fields.refuse(key, format!("is {s}; use a number of seconds > 0"), report);
            None
        }
        s => rtune_driver::config::duration(s).map_err(|why| fields.refuse(key, why, report)).ok(),
    }
}
