//! `rtune serve`'s model: an export (TorchScript or a tree model, with its preprocessor)
//! predicting a batch of rows exactly as `rtune predict` predicts a file's, behind the Open
//! Inference Protocol of [`rtune_driver::serve`]. Its replicas are worker processes reserved
//! from the pool trials use ([`ReplicaPool`]), each a one-worker run of [`serve_replica`] that
//! the pool's failure handling starts again when it dies, or (`--in-process`) the server's
//! own thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use polars::prelude::{Column, DataFrame};
use rtune_driver::cluster::client::address_toward;
use rtune_driver::config::{FailureConfig, RunConfig, ScalingConfig};
use rtune_driver::error::{Error, Result};
use rtune_driver::serve::protocol::Outputs;
use rtune_driver::serve::wire::{Dock, answer_batches};
use rtune_driver::serve::{Engine, Load, Model, TensorSpec};
use rtune_driver::train::TorchTrainer;
use rtune_searchers::Params;

use super::batch_predict::model::ExportedModel;
use crate::worker::TrainContext;

impl Engine for ExportedModel {
    fn predict(&mut self, frame: DataFrame) -> Result<DataFrame> {
        let inputs = frame.width();
        let predicted = ExportedModel::predict(self, frame, "the request")?;
        let outputs: Vec<Column> = predicted.columns()[inputs..].to_vec();
        Ok(DataFrame::new(predicted.height(), outputs)?)
    }
}

/// The export in `dir` as the server describes it (under `name`, `version`). The model is
/// loaded here to check it, and to learn its outputs from a prediction of one row (zeros in
/// every column, where its preprocessor takes them).
pub fn describe(dir: &Path, name: String, version: String) -> Result<Model> {
    let mut exported = ExportedModel::load(dir, tch::Device::Cpu)?;
    let schema = exported.schema.clone();
    let zeros: Vec<Column> =
        schema.features.iter().map(|f| Column::new(f.into(), vec![0f32])).collect();
    let outputs = DataFrame::new(1, zeros)
        .ok()
        .and_then(|frame| Engine::predict(&mut exported, frame).ok())
        .and_then(|frame| Outputs::from_frame(&frame).ok())
        .map(|outputs| outputs.0.iter().map(|o| o.spec()).collect::<Vec<TensorSpec>>())
        .unwrap_or_else(|| Model::default_outputs(&schema));
    let platform = exported.platform().to_owned();
    Ok(Model { name, version, platform, schema, outputs })
}

/// Each replica loads the export in `dir` on `device` in this process.
pub fn in_process(dir: &Path, device: tch::Device) -> Load {
    let dir = dir.to_owned();
    Arc::new(move || {
        let model: Box<dyn Engine> = Box::new(ExportedModel::load(&dir, device)?);
        Ok(model)
    })
}

/// How long a replica process has to start and dial in (a restarted one too).
const REPLICA_START: Duration = Duration::from_secs(300);

/// Replica processes from the pool: one run of [`serve_replica`] per replica, each with one
/// worker of `scaling`'s resources, started again whenever it dies.
pub struct ReplicaPool {
    dock: Arc<Dock>,
    runs: PathBuf,
    launchers: Vec<std::thread::JoinHandle<()>>,
}

impl ReplicaPool {
    /// Starts `count` replica processes of the export in `dir`; `run` says where the pool is
    /// (this machine's, or a cluster's). The processes dial in as they come up: [`load`]
    /// waits for the next.
    ///
    /// [`load`]: ReplicaPool::load
    pub fn start(
        dir: &Path,
        count: usize,
        scaling: ScalingConfig,
        run: RunConfig,
    ) -> Result<ReplicaPool> {
        // On a cluster the replicas may be on other nodes: they dial in where those reach
        // this machine; the export goes to them through the dock.
        let ip = match run.resolved_cluster() {
            Some((head, _)) => address_toward(&head)?,
            None => [127, 0, 0, 1].into(),
        };
        let dock = Arc::new(Dock::open(ip, dir)?);
        let runs = std::env::temp_dir().join(format!(
            "rtune-serve-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let params = Params::new()
            .with("dock", dock.address().to_string())
            .with("token", dock.token().to_owned());
        let mut launchers = Vec::with_capacity(count);
        for replica in 0..count {
            let mut run = run.clone();
            run.name = Some(format!("replica-{replica}"));
            run.storage_path = Some(runs.clone());
            // Forever: a replica that dies is started again, as long as the server runs.
            run.failure_config = FailureConfig::max_failures(-1);
            let trainer = TorchTrainer::new(serve_replica)
                .train_loop_config(params.clone())
                .scaling(scaling.clone())
                .run_config(run);
            let dock = Arc::downgrade(&dock);
            let launcher = std::thread::Builder::new()
                .name(format!("rtune-serve-launch-{replica}"))
                .spawn(move || {
                    if let (Err(e), Some(dock)) = (trainer.fit(), dock.upgrade()) {
                        dock.fail(format!("replica {replica}: {e}"));
                    }
                })
                .map_err(|e| Error::io("a replica's launcher thread", e))?;
            launchers.push(launcher);
        }
        Ok(ReplicaPool { dock, runs, launchers })
    }

    /// Waits for the next replica process to dial in.
    pub fn load(&self) -> Load {
        let dock = self.dock.clone();
        Arc::new(move || dock.accept(REPLICA_START))
    }

    /// Ends the replica processes (their links closed, they return) and waits for them, and
    /// removes their runs' folder.
    pub fn stop(self) {
        self.dock.close();
        for launcher in self.launchers {
            let _ = launcher.join();
        }
        let _ = std::fs::remove_dir_all(&self.runs);
    }
}

/// A replica process: dials the server's dock, loads the export it is sent on its device, and
/// answers batches until the server closes the link.
pub fn serve_replica(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let p = ctx.params();
    let (dock, token) = (p.get::<String>("dock")?, p.get::<String>("token")?);
    let device = ctx.device();
    answer_batches(&dock, &token, |dir| ExportedModel::load(dir, device))?;
    Ok(())
}
