//! `rtune predict`: batch prediction over a parquet or CSV file (gzipped or not, with a header
//! row or, given `--no-header`, the model's columns in order) with an exported model, in this
//! process or on `--workers` from the pool ([`BatchPredictor`]).

use anyhow::{Result, anyhow};
use rtune_cli::PredictArgs;

use crate::model::BatchPredictor;

/// Predicts every row of the input, on workers of `cluster` (address, token) when given;
/// returns a line about what was written.
pub(super) fn predict(args: &PredictArgs, cluster: Option<(String, String)>) -> Result<String> {
    let model = args.model.as_ref().ok_or_else(|| anyhow!("no model to predict with"))?;
    let mut predictor = BatchPredictor::new(model)
        .batch_rows(args.batch_rows)
        .no_header(args.no_header)
        .allow_extra(args.allow_extra);
    match args.workers {
        None => {
            let device = crate::cuda::use_device(crate::cuda::torch_device(args.device))
                .map_err(|e| anyhow!("--device: {e}; or predict on the CPU (--device cpu)"))?;
            predictor = predictor.device(device);
        }
        Some(workers) => {
            let scaling = super::workers(
                workers as usize,
                args.cpus_per_worker,
                args.gpus_per_worker,
                args.use_gpu,
            );
            predictor = predictor.workers(scaling).part_rows(args.part_rows);
            if let Some((address, token)) = cluster {
                predictor = predictor.cluster(address, Some(token));
            }
        }
    }
    let done = predictor.predict(&args.input, &args.output)?;
    let on = match done.workers {
        0 => String::new(),
        1 => " on 1 worker".to_owned(),
        n => format!(" on {n} workers"),
    };
    let retried = match done.failures {
        0 => String::new(),
        n => format!(
            "; {n} worker failure(s) retried, {} of the rows predicted again",
            done.rows_in_last_attempt
        ),
    };
    Ok(format!(
        "predicted {} rows of {} into {}{on}{retried}",
        done.rows,
        args.input.display(),
        args.output.display()
    ))
}
