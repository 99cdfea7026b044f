//! `rtune predict --workers N` (BatchPredictor across the pool): the same answers as one
//! process, for 1, 2 and 4 workers and parquet, CSV and gzipped CSV input; a worker killed
//! mid-run retried on what it had not finished; mistakes refused before any worker starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rtune::polars::prelude::{
    CsvReadOptions, DataFrame, DataType, ParquetReader, ParquetWriter, SerReader,
};

use crate::cli::rtune;
use crate::common::{text, wait_for};

/// A digits model trained briefly and exported into `dir/model`.
pub(crate) fn digits_export(dir: &Path) -> Result<PathBuf> {
    let file = dir.join("sweep.toml");
    std::fs::write(
        &file,
        format!(
            r#"
name = "digits"
storage_path = "{}"

[trainable]
builtin = "digits-mlp"

[param_space]
epochs = 2
hidden = 32

[tune]
metric = "val_loss"
mode = "min"
num_samples = 1
"#,
            dir.join("results").display()
        ),
    )?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let model = dir.join("model");
    let experiment = dir.join("results/digits");
    let out = rtune(&["export", experiment.to_str().unwrap(), "--to", model.to_str().unwrap()])?;
    ensure!(out.status.success(), "{}", text(&out));
    Ok(model)
}

/// The shipped digits (gzipped, no header) `copies` times over, as a CSV file with a header.
pub(crate) fn digits_csv(path: &Path, copies: usize) -> Result<()> {
    use std::io::Read;
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv.gz");
    let mut rows = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(shipped)?).read_to_string(&mut rows)?;
    let header: Vec<String> =
        (0..64).map(|i| format!("pixel_{i}")).chain(["digit".to_owned()]).collect();
    let mut text = header.join(",") + "\n";
    for _ in 0..copies {
        text.push_str(&rows);
    }
    std::fs::write(path, text)?;
    Ok(())
}

fn read(path: &Path) -> Result<DataFrame> {
    let frame = if path.extension().is_some_and(|e| e == "parquet") {
        ParquetReader::new(std::fs::File::open(path)?).finish()?
    } else {
        CsvReadOptions::default().try_into_reader_with_file_path(Some(path.into()))?.finish()?
    };
    Ok(frame)
}

/// The two outputs hold the same rows: every column equal, probabilities within 1e-6.
pub(crate) fn same_predictions(ours: &Path, one_process: &Path) -> Result<()> {
    let (a, b) = (read(ours)?, read(one_process)?);
    ensure!(a.get_column_names() == b.get_column_names(), "columns differ");
    ensure!(a.height() == b.height(), "{} rows against {}", a.height(), b.height());
    for (x, y) in a.columns().iter().zip(b.columns()) {
        if x.name().starts_with("prob_") {
            let (x, y) = (x.cast(&DataType::Float64)?, y.cast(&DataType::Float64)?);
            let (x, y) = (x.f64()?, y.f64()?);
            let far = x
                .into_no_null_iter()
                .zip(y.into_no_null_iter())
                .position(|(p, q)| (p - q).abs() > 1e-6);
            ensure!(far.is_none(), "{}: row {far:?} differs", x.name());
        } else {
            ensure!(x == y, "column {} differs", x.name());
        }
    }
    Ok(())
}

pub(crate) fn predict(model: &Path, input: &Path, output: &Path, more: &[&str]) -> Result<String> {
    let (m, i, o) = (model.to_str().unwrap(), input.to_str().unwrap(), output.to_str().unwrap());
    let out = rtune(&[&["predict", "--model", m, "--input", i, "--output", o], more].concat())?;
    ensure!(out.status.success(), "{}", text(&out));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// 1, 2 and 4 workers, several parts each, give what one process gives, for parquet, CSV
/// and gzipped CSV without a header; a worker SIGKILLed mid-run is retried on the parts it
/// had not made whole; bad input is refused before a worker starts, and leaves nothing.
pub fn predictions_across_workers_match_one_process() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let model = digits_export(d)?;
    let csv = d.join("digits.csv");
    digits_csv(&csv, 1)?;
    let parquet = d.join("digits.parquet");
    ParquetWriter::new(std::fs::File::create(&parquet)?).finish(&mut read(&csv)?)?;
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv.gz");
    let inputs: [(&Path, &str, &[&str]); 3] =
        [(&csv, "csv", &[]), (&parquet, "parquet", &[]), (&shipped, "csv", &["--no-header"])];
    for (n, (input, ext, more)) in inputs.into_iter().enumerate() {
        let batch = ["--batch-rows", "100"];
        let one = d.join(format!("one-{n}.{ext}"));
        predict(&model, input, &one, &[&batch[..], more].concat())?;
        for workers in ["1", "2", "4"] {
            let across = d.join(format!("across-{n}-{workers}.{ext}"));
            let args = ["--workers", workers, "--part-rows", "200", "--cpus-per-worker", "0.5"];
            let said = predict(&model, input, &across, &[&batch[..], more, &args].concat())?;
            ensure!(said.contains("predicted 1797 rows"), "{said}");
            same_predictions(&across, &one)
                .with_context(|| format!("{} on {workers} worker(s)", input.display()))?;
            let left: Vec<_> = std::fs::read_dir(d)?
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.file_name())
                .collect();
            ensure!(left.is_empty(), "left behind: {left:?}");
        }
    }

    // A worker SIGKILLed once it has made a part whole, while it makes the next.
    let big = d.join("big.csv");
    digits_csv(&big, 10)?;
    let one = d.join("big-one.parquet");
    predict(&model, &big, &one, &["--batch-rows", "50"])?;
    let across = d.join("big-across.parquet");
    let args = ["--workers", "2", "--batch-rows", "50", "--part-rows", "50"];
    let (m, i, o) = (model.to_str().unwrap(), big.to_str().unwrap(), across.to_str().unwrap());
    let child = Command::new(crate::cli::RTUNE)
        .args([&["predict", "--model", m, "--input", i, "--output", o], &args[..]].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let parts = d.join(".big-across.parquet.parts/parts");
    let mut victim = None;
    wait_for(Duration::from_secs(120), || {
        let names: Vec<String> = std::fs::read_dir(&parts)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let whole = names.iter().any(|n| n.ends_with(".parquet"));
        // A part being written is `.<start>.parquet.<pid>`.
        victim = names
            .iter()
            .filter(|n| n.starts_with('.'))
            .find_map(|n| n.rsplit('.').next()?.parse::<i32>().ok());
        Ok(whole && victim.is_some())
    })
    .context("no worker was seen writing its second part")?;
    let victim = victim.expect("seen");
    // SAFETY: a worker process of the child started above.
    let killed = unsafe { libc::kill(victim, libc::SIGKILL) } == 0;
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    same_predictions(&across, &one).context("after a worker was killed")?;
    ensure!(killed, "worker {victim} had ended before it was killed: {said}");
    let again: usize = said
        .split("retried, ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .with_context(|| format!("no retry said: {}", text(&out)))?;
    ensure!(again < 17_970, "all {again} rows were predicted again: {said}");

    // A row that does not parse, past the first batch the driver checks, fails the workers
    // (each retry too); the error names it, and nothing is left.
    let broken_row = d.join("broken_row.csv");
    let mut lines: Vec<String> =
        std::fs::read_to_string(&csv)?.lines().map(str::to_owned).collect();
    lines[1500] = lines[1500].replacen(',', ",x", 1);
    std::fs::write(&broken_row, lines.join("\n") + "\n")?;
    let output = d.join("broken.parquet.out.parquet");
    let (m, i, o) =
        (model.to_str().unwrap(), broken_row.to_str().unwrap(), output.to_str().unwrap());
    let args = ["--workers", "2", "--batch-rows", "100", "--part-rows", "100"];
    let out =
        rtune(&[&["predict", "--model", m, "--input", i, "--output", o], &args[..]].concat())?;
    ensure!(
        out.status.code() == Some(2)
            && text(&out).contains("prediction failed after 4 attempt(s); rank ")
            && text(&out).contains("a row of rows 1498..1598 does not parse"),
        "{}",
        text(&out)
    );
    let left: Vec<_> = std::fs::read_dir(d)?.flatten().map(|e| e.file_name()).collect();
    ensure!(!output.exists() && !left.iter().any(|n| n.to_string_lossy().starts_with('.')));

    // Mistakes, found here before any worker starts; no output, no parts left.
    let without = d.join("without.csv");
    let text_in = std::fs::read_to_string(&csv)?;
    std::fs::write(
        &without,
        text_in.lines().map(|l| l.split_once(',').unwrap().1.to_owned() + "\n").collect::<String>(),
    )?;
    let not_parquet = d.join("broken.parquet");
    std::fs::write(&not_parquet, "not parquet at all")?;
    let headerless = d.join("headerless.csv");
    std::fs::write(&headerless, text_in.split_once('\n').unwrap().1)?;
    let cases: [(&Path, &Path, &str); 4] = [
        (&model, &without, "lacks the model's input column(s) `pixel_0`"),
        (&model, &headerless, "has no header row (its first row is numbers): pass --no-header"),
        (&model, &not_parquet, "is not a parquet file"),
        (d, &csv, "has no model.pt"),
    ];
    for (model, input, said) in cases {
        let output = d.join("refused.csv");
        let (m, i, o) =
            (model.to_str().unwrap(), input.to_str().unwrap(), output.to_str().unwrap());
        let out = rtune(&["predict", "--model", m, "--input", i, "--output", o, "--workers", "2"])?;
        ensure!(out.status.code() == Some(2) && text(&out).contains(said), "{}", text(&out));
        ensure!(!text(&out).contains("attempt"), "a worker ran: {}", text(&out));
        ensure!(!output.exists() && !d.join(".refused.csv.parts").exists(), "output left");
    }
    Ok(())
}
