//! `rtune predict`: batch prediction over a parquet or CSV file (gzipped or not, with a header
//! row or, given `--no-header`, the model's columns in order) with an exported model, in this
//! process or on `--workers` from the pool ([`BatchPredictor`]).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, anyhow};

use crate::config::ScalingConfig;
use crate::train::BatchPredictor;

pub(super) struct PredictArgs<'a> {
    /// An export folder (`rtune export`).
    pub model: &'a Path,
    pub input: &'a Path,
    /// The CSV input has no header row (its columns are the model's, in order).
    pub no_header: bool,
    pub output: &'a Path,
    /// Rows per batch (what is in memory at once, with the model's outputs).
    pub batch_rows: usize,
    /// Copy columns the model does not use to the output instead of refusing the file.
    pub allow_extra: bool,
    /// Where the model runs in this process.
    pub device: tch::Device,
    /// Workers from the pool to predict on instead, with their CPUs and GPUs.
    pub workers: Option<usize>,
    pub cpus_per_worker: f64,
    pub gpus_per_worker: Option<f64>,
    pub use_gpu: bool,
    /// Rows a worker's part holds at least.
    pub part_rows: usize,
}

/// A `--device` flag: cpu, cuda or cuda:N (clap names the flag in its error).
pub(super) fn device(text: &str) -> Result<tch::Device, String> {
    crate::sys::cuda::parse_device(text)
        .ok_or_else(|| format!("{text:?} is not a device; use cpu, cuda or cuda:N (e.g. cuda:1)"))
}

/// Predicts every row of the input; returns a line about what was written.
pub(super) fn predict(args: &PredictArgs<'_>) -> Result<String> {
    let mut predictor = BatchPredictor::new(args.model)
        .batch_rows(args.batch_rows)
        .no_header(args.no_header)
        .allow_extra(args.allow_extra);
    match args.workers {
        None => {
            let device = crate::sys::cuda::use_device(args.device)
                .map_err(|e| anyhow!("--device: {e}; or predict on the CPU (--device cpu)"))?;
            predictor = predictor.device(device);
        }
        Some(workers) => {
            let mut resources = BTreeMap::from([("CPU".to_owned(), args.cpus_per_worker)]);
            if let Some(gpus) = args.gpus_per_worker {
                resources.insert("GPU".to_owned(), gpus);
            }
            let use_gpu = args.use_gpu || args.gpus_per_worker.is_some_and(|g| g > 0.0);
            let scaling =
                ScalingConfig::workers(workers).use_gpu(use_gpu).resources_per_worker(resources);
            predictor = predictor.workers(scaling).part_rows(args.part_rows);
        }
    }
    let done = predictor.predict(args.input, args.output)?;
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
