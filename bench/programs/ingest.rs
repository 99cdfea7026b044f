//! Ingest throughput: rows per second from a parquet file into tch tensors through rtune's
//! dataset path, for comparison with a PyTorch `DataLoader` over the same file read with
//! pyarrow (`bench/ingest_torch.py`; `bench/ingest.sh` runs both, alternately).
//!
//! Run: `cargo run --release --example bench_ingest -- [--rows 1000000] [--cols 64]
//!       [--batch 256] [--runs 5] [--file /tmp/rtune-ingest-1000000x64.parquet]`
//!
//! The file (float32 feature columns `f0`.. and an int64 `label`) is written once if missing.
//! One TorchTrainer run with 1 worker process (1 torch thread) then, `runs` times: reads its
//! shard (`ctx.dataset_shard("train")`: the parquet rows, checked, into a `[rows, cols]` float
//! tensor) and iterates one shuffled epoch of `batch`-row batches (`iter_batches`). Printed:
//! the median (min-max) rows/s of the read, of the epoch, and of both together; and the
//! driver's one-off preparation (columns checked, the training rows read once), which a sweep
//! pays once for all its trials.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use rtune::data::{Columns, Dataset};
use rtune::polars::prelude::{Column, DataFrame, ParquetWriter};
use rtune::worker::BatchSpec;
use rtune::{Params, RunConfig, ScalingConfig, TorchTrainer, TrainContext};

struct Args {
    rows: usize,
    cols: usize,
    batch: usize,
    runs: usize,
    file: PathBuf,
}

fn parse() -> Result<Args> {
    let mut a = Args { rows: 1_000_000, cols: 64, batch: 256, runs: 5, file: PathBuf::new() };
    let mut file = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rows" => a.rows = value.parse()?,
            "--cols" => a.cols = value.parse()?,
            "--batch" => a.batch = value.parse()?,
            "--runs" => a.runs = value.parse()?,
            "--file" => file = Some(PathBuf::from(value)),
            _ => anyhow::bail!("unknown flag {flag}"),
        }
    }
    a.file = file.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("rtune-ingest-{}x{}.parquet", a.rows, a.cols))
    });
    Ok(a)
}

/// Writes `rows` x `cols` float32 features (a fixed pseudo-random pattern) and a label.
fn write_file(a: &Args) -> Result<()> {
    let mut columns: Vec<Column> = (0..a.cols)
        .map(|j| {
            let values: Vec<f32> = (0..a.rows)
                .map(|i| ((i.wrapping_mul(2_654_435_761) ^ j.wrapping_mul(40_503)) % 1000) as f32)
                .collect();
            Column::new(format!("f{j}").into(), values)
        })
        .collect();
    columns
        .push(Column::new("label".into(), (0..a.rows as i64).map(|i| i % 10).collect::<Vec<_>>()));
    let mut frame = DataFrame::new(a.rows, columns)?;
    let tmp = a.file.with_extension("tmp");
    ParquetWriter::new(std::fs::File::create(&tmp)?).finish(&mut frame)?;
    std::fs::rename(&tmp, &a.file)?;
    Ok(())
}

/// `runs` times: read the shard, iterate one shuffled epoch; report the seconds of each.
fn ingest(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let (runs, batch) = (ctx.params().get::<u64>("runs")?, ctx.params().get::<usize>("batch")?);
    for run in 0..runs {
        let started = Instant::now();
        let mut shard = ctx.dataset_shard("train")?;
        let read_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let mut rows = 0;
        for (x, _y) in shard.iter_batches(&BatchSpec::new(batch).shuffle(run))? {
            rows += x.size()[0];
        }
        let epoch_s = started.elapsed().as_secs_f64();
        anyhow::ensure!(rows as usize == shard.len(), "{rows} rows of {}", shard.len());
        ctx.report([("read_s", read_s), ("epoch_s", epoch_s), ("rows", rows as f64)])?;
    }
    Ok(())
}

/// Median, min and max.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() -> Result<()> {
    rtune::init();
    let a = parse()?;
    if !a.file.exists() {
        let started = Instant::now();
        write_file(&a)?;
        eprintln!("wrote {} in {:.1} s", a.file.display(), started.elapsed().as_secs_f64());
    }
    let storage = tempfile::tempdir()?;
    let started = Instant::now();
    let result = TorchTrainer::new(ingest)
        .datasets([("train", Dataset::parquet(&a.file))])
        .columns(Columns::new().label("label"))
        .train_loop_config(Params::new().with("runs", a.runs as i64).with("batch", a.batch as i64))
        .scaling(ScalingConfig::workers(1))
        .run_config(RunConfig::new("ingest").storage_path(storage.path()))
        .fit()?;
    let wall = started.elapsed().as_secs_f64();
    let rows = a.rows as f64;
    let column =
        |name: &str| -> Vec<f64> { result.metrics_history.iter().map(|m| m[name]).collect() };
    let (read, epoch) = (column("read_s"), column("epoch_s"));
    let total: Vec<f64> = read.iter().zip(&epoch).map(|(r, e)| r + e).collect();
    println!("rtune ({} rows x {} cols, batch {}, {} runs)", a.rows, a.cols, a.batch, a.runs);
    for (what, seconds) in [("read", read), ("epoch", epoch), ("read+epoch", total)] {
        let (median, lo, hi) = spread(seconds.iter().map(|s| rows / s).collect());
        println!("  {what:<11} {:>12.0} rows/s  (min {lo:.0}, max {hi:.0})", median);
    }
    let in_loop: f64 = result.metrics_history.iter().map(|m| m["read_s"] + m["epoch_s"]).sum();
    println!("  driver preparation and start-up (once per sweep): {:.2} s", wall - in_loop);
    Ok(())
}
