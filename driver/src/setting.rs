//! The settings a user gives, each by its two names: the API's (`TuneConfig.num_samples`) and the
//! sweep file's (`tune.num_samples`). An error about a setting names it by this type
//! ([`Field::Setting`]), so the library says `invalid TuneConfig.num_samples` and the command
//! line says `tune.num_samples` at the file's line, from one check, with no renaming of text.

use std::fmt;

macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident => $api:literal, $key:literal;)*) => {
        /// A setting a user gives (through the API or a sweep file).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Setting {
            $($(#[$doc])* $name,)*
        }

        impl Setting {
            /// Every setting, in the order of the sweep file's tables.
            pub const ALL: &'static [Setting] = &[$(Setting::$name,)*];

            /// Its name in the API: `TuneConfig.num_samples`.
            pub fn api(self) -> &'static str {
                match self {
                    $(Setting::$name => $api,)*
                }
            }

            /// Its key path in a sweep file: `tune.num_samples` (a const: the sweep file's rows
            /// name their key by it).
            pub const fn key(self) -> &'static str {
                match self {
                    $(Setting::$name => $key,)*
                }
            }
        }
    };
}

settings! {
    Name => "RunConfig.name", "name";
    StoragePath => "RunConfig.storage_path", "storage_path";
    /// The train function's params: the trainer's defaults with a trial's params over them.
    Params => "train_loop_config", "param_space";
    /// A builtin train function, and the trainer that runs it (`XGBoostTrainer`'s library).
    Builtin => "trainer", "trainable.builtin";
    /// A trainer's datasets, columns and preprocessor.
    Datasets => "datasets", "datasets";
    Command => "CommandTrainable.argv", "trainable.command";
    WorkingDir => "CommandTrainable.working_dir", "trainable.working_dir";
    StopGrace => "CommandTrainable.stop_grace", "trainable.stop_grace_s";
    /// The scaling as a whole (what no one of its fields says alone).
    Scaling => "ScalingConfig", "scaling";
    NumWorkers => "ScalingConfig.num_workers", "scaling.num_workers";
    UseGpu => "ScalingConfig.use_gpu", "scaling.use_gpu";
    ResourcesPerWorker => "ScalingConfig.resources_per_worker", "scaling.resources_per_worker";
    PlacementStrategy => "ScalingConfig.placement_strategy", "scaling.placement_strategy";
    Sharding => "ScalingConfig.sharding", "scaling.sharding";
    ShrinkForWaiting => "ScalingConfig.shrink_for_waiting", "scaling.shrink_for_waiting";
    Metric => "TuneConfig.metric", "tune.metric";
    Mode => "TuneConfig.mode", "tune.mode";
    /// Several objectives: a sweep file writes them as arrays in `metric` and `mode`.
    Objectives => "TuneConfig.objectives", "tune.metric";
    Constraints => "TuneConfig.constraints", "tune.constraints";
    NumSamples => "TuneConfig.num_samples", "tune.num_samples";
    MaxConcurrentTrials => "TuneConfig.max_concurrent_trials", "tune.max_concurrent_trials";
    TimeBudget => "TuneConfig.time_budget_s", "tune.time_budget_s";
    Seed => "TuneConfig.seed", "tune.seed";
    SearchAlg => "TuneConfig.search_alg", "tune.search";
    Scheduler => "TuneConfig.scheduler", "tune.scheduler";
    ReuseActors => "TuneConfig.reuse_actors", "tune.reuse_actors";
    FailFast => "TuneConfig.fail_fast", "tune.fail_fast";
    Stop => "RunConfig.stop", "run.stop";
    MaxFailures => "FailureConfig.max_failures", "run.failure.max_failures";
    NumToKeep => "CheckpointConfig.num_to_keep", "run.checkpoint.num_to_keep";
    ScoreAttribute => "CheckpointConfig.score_attribute", "run.checkpoint.score_attribute";
    ScoreOrder => "CheckpointConfig.score_order", "run.checkpoint.score_order";
    CheckpointUpload => "CheckpointConfig.upload", "run.checkpoint.upload";
    Cluster => "RunConfig.cluster", "run.cluster";
    StrictParams => "RunConfig.strict_params", "run.strict_params";
    SyncPeriod => "RunConfig.sync_period", "run.sync_period_s";
    StoreEndpoint => "StoreSettings.endpoint", "run.store.endpoint";
    StoreRegion => "StoreSettings.region", "run.store.region";
    StoreRetryTimeout => "StoreSettings.retry_timeout", "run.store.retry_timeout_s";
    StoreConnections => "StoreSettings.connections", "run.store.connections";
    Optuna => "OptunaJournal", "run.optuna";
    Mlflow => "MlflowLogger", "run.mlflow";
    MlflowTrackingUri => "MlflowLogger.tracking_uri", "run.mlflow.tracking_uri";
    TensorBoard => "TensorBoardLogger", "run.tensorboard";
    /// The address of the sweep's metrics endpoint.
    Metrics => "monitor::serve", "run.metrics";
}

impl Setting {
    /// The setting the API names so, if any.
    pub(crate) fn from_api(api: &str) -> Option<Setting> {
        Setting::ALL.iter().copied().find(|s| s.api() == api)
    }
}

/// What a configuration error is about: one of the user's settings, or something named
/// otherwise (`cluster token`, `head --bind`, an environment variable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Setting(Setting),
    Named(&'static str),
}

impl Field {
    /// The setting, where the error is about one.
    pub fn setting(self) -> Option<Setting> {
        match self {
            Field::Setting(s) => Some(s),
            Field::Named(_) => None,
        }
    }
}

impl From<Setting> for Field {
    fn from(setting: Setting) -> Self {
        Field::Setting(setting)
    }
}

impl From<&'static str> for Field {
    /// A field named by text, which is no setting's: an error about a setting names its
    /// `Setting`, so that it goes with its sweep-file key.
    fn from(name: &'static str) -> Self {
        debug_assert!(Setting::from_api(name).is_none(), "name the Setting of {name}");
        Field::Named(name)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Setting(s) => f.write_str(s.api()),
            Field::Named(name) => f.write_str(name),
        }
    }
}

/// Mistakes in settings, each naming its setting: what a `problems()` check gives, so that a
/// sweep file's reader says all of them at once and the API the first
/// ([`error::first`](crate::error::first)).
pub type Problems = Vec<(Setting, String)>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each setting has its own API name (so `from_api` finds it), and a sweep-file key; two
    /// settings share a key only where the file writes both in one place.
    #[test]
    fn names_are_unique() {
        for (i, s) in Setting::ALL.iter().enumerate() {
            assert_eq!(Setting::from_api(s.api()), Some(*s));
            for t in &Setting::ALL[..i] {
                assert_ne!(s.api(), t.api());
                if s.key() == t.key() {
                    assert_eq!((*t, *s), (Setting::Metric, Setting::Objectives));
                }
            }
        }
        assert_eq!(Field::from("cluster token"), Field::Named("cluster token"));
        assert_eq!(Field::from(Setting::NumSamples).to_string(), "TuneConfig.num_samples");
    }
}
