//! `rtune serve`: an export behind the Open Inference Protocol (`rtune_driver::serve`), with
//! this binary's models predicting.

use std::time::Duration;

use anyhow::{Result, anyhow};
use rtune_cli::ServeArgs;
use rtune_driver::serve::{Batching, Limits, ServeConfig};

/// Serves until SIGTERM; the line that says where goes to stdout once every replica is ready.
pub(super) fn serve(args: &ServeArgs) -> Result<()> {
    let dir = args.model.as_ref().ok_or_else(|| anyhow!("no model to serve"))?;
    let device = crate::cuda::use_device(crate::cuda::torch_device(args.device))
        .map_err(|e| anyhow!("--device: {e}; or serve on the CPU (--device cpu)"))?;
    let name = match &args.name {
        Some(name) => name.clone(),
        None => dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
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
    let (model, load) = crate::model::serve::model(dir, name, args.model_version.clone(), device)?;
    let config = ServeConfig {
        http: args.http.clone(),
        grpc: args.grpc.clone(),
        token: args.token.clone(),
        replicas: args.replicas as usize,
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
    let replicas = config.replicas;
    rtune_driver::serve::serve(config, model, load, |at| {
        let replicas =
            if replicas == 1 { "1 replica".to_owned() } else { format!("{replicas} replicas") };
        println!(
            "serving `{name}` (version {version}, {platform}) on {replicas}: HTTP http://{}, gRPC {}",
            at.http, at.grpc
        );
    })?;
    eprintln!("rtune serve: stopped; every request in flight was answered");
    Ok(())
}
