//! `rtune serve`: an export behind the Open Inference Protocol (`rtune_driver::serve`), with
//! this binary's models predicting.

use std::time::Duration;

use anyhow::{Result, anyhow};
use rtune_cli::ServeArgs;
use rtune_driver::config::RunConfig;
use rtune_driver::serve::{Batching, Limits, ServeConfig};

use crate::model::serve::ReplicaPool;

/// Serves until SIGTERM; the line that says where goes to stdout once every replica is ready.
pub(super) fn serve(args: &ServeArgs) -> Result<()> {
    let dir = args.model.as_ref().ok_or_else(|| anyhow!("no model to serve"))?;
    // The folder's own name (`.` too); a folder that is not there is said by `describe`.
    let name = match &args.name {
        Some(name) => name.clone(),
        None => dir
            .canonicalize()
            .unwrap_or_else(|_| dir.clone())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("{}: name the model (--name)", dir.display()))?,
    };
    if !(args.batch_wait_ms.is_finite() && args.batch_wait_ms >= 0.0) {
        return Err(anyhow!(
            "--batch-wait-ms is {}: give milliseconds, 0 or more",
            args.batch_wait_ms
        ));
    }
    if !(args.max_request_mb.is_finite() && args.max_request_mb > 0.0) {
        return Err(anyhow!("--max-request-mb is {}: give a positive size", args.max_request_mb));
    }
    let model = crate::model::serve::describe(dir, name, args.model_version.clone())?;
    let (load, pool) = if args.in_process {
        let device = crate::cuda::use_device(crate::cuda::torch_device(args.device))
            .map_err(|e| anyhow!("--device: {e}; or serve on the CPU (--device cpu)"))?;
        (crate::model::serve::in_process(dir, device), None)
    } else {
        let scaling = super::workers(1, args.cpus_per_replica, args.gpus_per_replica, false);
        let pool =
            ReplicaPool::start(dir, args.replicas as usize, scaling, RunConfig::new("serve"))?;
        (pool.load(), Some(pool))
    };
    let config = ServeConfig {
        http: args.http.clone(),
        grpc: args.grpc.clone(),
        token: args.token.clone(),
        replicas: if args.in_process { 1 } else { args.replicas as usize },
        batching: Batching {
            max_batch_size: args.max_batch_size as usize,
            batch_wait: Duration::from_secs_f64(args.batch_wait_ms / 1e3),
            max_queued: args.max_queued as usize,
        },
        limits: Limits {
            max_body_bytes: (args.max_request_mb * 1024.0 * 1024.0) as usize,
            request_timeout: args.request_timeout,
        },
        report_every: (!args.quiet).then_some(Duration::from_secs(1)),
    };
    let (name, version, platform) =
        (model.name.clone(), model.version.clone(), model.platform.clone());
    let replicas = match (args.in_process, config.replicas) {
        (true, _) => "this process".to_owned(),
        (false, 1) => "1 replica".to_owned(),
        (false, n) => format!("{n} replicas"),
    };
    let served = rtune_driver::serve::serve(config, model, load, |at| {
        println!(
            "serving `{name}` (version {version}, {platform}) on {replicas}: HTTP http://{}, gRPC {}",
            at.http, at.grpc
        );
    });
    if let Some(pool) = pool {
        pool.stop();
    }
    served?;
    eprintln!("rtune serve: stopped; every request in flight was answered");
    Ok(())
}
