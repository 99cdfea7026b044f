//! `rtune predict`: batch prediction over a parquet or CSV file (gzipped or not, with a header
//! row or, given `--no-header`, the model's columns in order) with an exported model, in this
//! process or on `--workers` from the pool ([`BatchPredictor`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, anyhow};

use crate::config::ScalingConfig;
use crate::train::BatchPredictor;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  rtune predict --model best-model --input test.csv --output predicted.parquet\n\n\
    The output holds the input's rows with a `prediction` column (a class, or a value) and, \
    for a classifier, a `prob_<class>` column per class."
)]
pub(super) struct PredictArgs {
    /// A folder `rtune export` wrote (a path or an `s3://` URL).
    #[arg(long, alias = "checkpoint")]
    model: PathBuf,
    /// A .parquet, .csv or .csv.gz file with the model's input columns (a path or an `s3://`
    /// URL).
    #[arg(long)]
    input: PathBuf,
    /// The CSV input has no header row: its columns are the model's inputs in order (then
    /// the label, when there is one column more, as in data/digits.csv.gz).
    #[arg(long)]
    no_header: bool,
    /// The .parquet or .csv file to create (a path or an `s3://` URL).
    #[arg(long)]
    output: PathBuf,
    /// Rows per batch: what is in memory at once.
    #[arg(long, default_value_t = 65_536)]
    batch_rows: usize,
    /// Copy columns the model does not take to the output (by default they are an error).
    #[arg(long)]
    allow_extra: bool,
    /// Where the model runs: cpu, cuda (the first visible GPU) or cuda:N.
    #[arg(long, default_value = "cpu", value_parser = device)]
    device: tch::Device,
    /// Predict on N workers reserved from the pool trials use (this machine's, or the
    /// cluster's at $RTUNE_ADDRESS), each a range of the rows; a worker that dies is retried
    /// on what it had not finished.
    #[arg(long, value_name = "N", conflicts_with = "device",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub workers: Option<u64>,
    /// CPUs each worker holds (its libtorch threads).
    #[arg(long, default_value_t = 1.0, requires = "workers")]
    cpus_per_worker: f64,
    /// Each worker predicts on a GPU of the pool.
    #[arg(long, requires = "workers")]
    use_gpu: bool,
    /// GPUs each worker holds (a fraction shares one; implies --use-gpu).
    #[arg(long, value_name = "F", requires = "workers")]
    gpus_per_worker: Option<f64>,
    /// Rows of a worker's part (whole batches), made whole at once: what a worker that dies
    /// may have to predict again.
    #[arg(long, default_value_t = 65_536, requires = "workers")]
    part_rows: usize,
}

/// A `--device` flag: cpu, cuda or cuda:N (clap names the flag in its error).
pub(super) fn device(text: &str) -> Result<tch::Device, String> {
    crate::sys::cuda::parse_device(text)
        .ok_or_else(|| format!("{text:?} is not a device; use cpu, cuda or cuda:N (e.g. cuda:1)"))
}

/// Predicts every row of the input, on workers of `cluster` (address, token) when given;
/// returns a line about what was written.
pub(super) fn predict(args: &PredictArgs, cluster: Option<(String, String)>) -> Result<String> {
    let mut predictor = BatchPredictor::new(&args.model)
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
            let workers = workers as usize;
            let mut resources = BTreeMap::from([("CPU".to_owned(), args.cpus_per_worker)]);
            if let Some(gpus) = args.gpus_per_worker {
                resources.insert("GPU".to_owned(), gpus);
            }
            let use_gpu = args.use_gpu || args.gpus_per_worker.is_some_and(|g| g > 0.0);
            let scaling =
                ScalingConfig::workers(workers).use_gpu(use_gpu).resources_per_worker(resources);
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
