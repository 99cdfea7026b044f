//! Batch prediction (Ray's `BatchPredictor`): every row of a parquet or CSV file through an
//! exported model (`rtune export`: its TorchScript `model.pt` and `preprocessor.json`), in
//! batches of bounded memory, in this process or on workers reserved from the pool that trials
//! use (this machine's, a cluster's, a Slurm allocation's). The output is the input's rows in
//! order with a `prediction` column (and `prob_<class>` columns for a classifier).
//!
//! Across workers, the rows are split into one range per worker, and each range into parts of
//! whole batches. Each worker loads the export once and writes its parts in order, each made
//! whole by a rename, into a scratch folder next to the output. A worker that dies fails the
//! attempt; the next attempt's workers skip the parts already whole, so only what was not
//! finished is predicted again. The parts are then put together in input order into a hidden
//! file renamed onto the output: a run that fails leaves no output, and no scratch.

mod io;
pub(super) mod model;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rtune_searchers::Params;

use self::io::{FileFormat, Reader, Writer, temp_path};
use self::model::ExportedModel;
use crate::worker::TrainContext;
use rtune_collective::ReduceOp;
use rtune_driver::config::{FailureConfig, RunConfig, ScalingConfig};
use rtune_driver::error::{Error, IoContext, Result};
use rtune_driver::outcome::TrainResult;
use rtune_driver::storage::{remote, staging};
use rtune_driver::train::TorchTrainer;

/// Predicts files with an export, here or across workers (see the module's docs).
#[derive(Debug, Clone)]
pub struct BatchPredictor {
    model: PathBuf,
    batch_rows: usize,
    no_header: bool,
    allow_extra: bool,
    device: tch::Device,
    workers: Option<ScalingConfig>,
    part_rows: usize,
    run: RunConfig,
}

/// What a prediction did.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicted {
    pub rows: usize,
    /// Workers it ran on (0: in this process).
    pub workers: usize,
    /// Worker failures retried.
    pub failures: usize,
    /// Rows the workers' last attempt predicted: all of them, unless a failure was retried
    /// (the parts made whole before it are kept).
    pub rows_in_last_attempt: usize,
    pub seconds: f64,
}

impl BatchPredictor {
    /// Predicts with the export in folder `model`, in this process on the CPU, 65,536 rows a
    /// batch, until told otherwise.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        BatchPredictor {
            model: model.into(),
            batch_rows: 65_536,
            no_header: false,
            allow_extra: false,
            device: tch::Device::Cpu,
            workers: None,
            part_rows: 65_536,
            run: RunConfig::default().failure_config(FailureConfig::max_failures(3)),
        }
    }

    /// Rows per batch: what is in memory at once (with the model's outputs).
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows.max(1);
        self
    }

    /// The CSV input has no header row: its columns are the model's inputs in order (then the
    /// label, when there is one column more).
    pub fn no_header(mut self, on: bool) -> Self {
        self.no_header = on;
        self
    }

    /// Copies columns the model does not take to the output instead of refusing the file.
    pub fn allow_extra(mut self, on: bool) -> Self {
        self.allow_extra = on;
        self
    }

    /// Where the model runs in this process (workers run it on their own device).
    pub fn device(mut self, device: tch::Device) -> Self {
        self.device = device;
        self
    }

    /// Predicts on `scaling.num_workers` workers reserved from the pool (each with its CPUs,
    /// and GPUs with `use_gpu`), instead of in this process.
    pub fn workers(mut self, scaling: ScalingConfig) -> Self {
        self.workers = Some(scaling);
        self
    }

    /// Rows a worker's part holds at least (whole batches; 65,536 by default): what a worker
    /// that dies may have to predict again.
    pub fn part_rows(mut self, rows: usize) -> Self {
        self.part_rows = rows.max(1);
        self
    }

    /// The workers' pool is the cluster whose head is at `address` (HOST:PORT), reached with
    /// `token` (instead of `$RTUNE_ADDRESS` or this machine's pool).
    pub fn cluster(mut self, address: impl Into<String>, token: Option<String>) -> Self {
        self.run = self.run.cluster(address, token);
        self
    }

    /// Where the workers' pool is (`cluster`, else `$RTUNE_ADDRESS`, else this machine) and how
    /// many worker failures are retried (3 by default); its name and storage path are not
    /// used (the workers' run lives in a scratch folder next to the output).
    pub fn run_config(mut self, run: RunConfig) -> Self {
        self.run = run;
        self
    }

    /// Predicts every row of `input` (.parquet, .csv or .csv.gz) into `output` (.parquet or
    /// .csv, a file that does not exist yet). Mistakes in the export, the input or the output
    /// are found before any worker starts. The export, the input and the output may be on an
    /// object store (`s3://` URLs): the export and the input are read from their staging
    /// copies (each worker's machine fetches its own), and the output is made in its staging
    /// folder, then uploaded.
    pub fn predict(&self, input: &Path, output: &Path) -> Result<Predicted> {
        let began = Instant::now();
        let format = FileFormat::of_output(output)?;
        let store_output = output.to_str().filter(|_| remote::is_url(output));
        let exists = match store_output {
            Some(url) => staging::object_exists(url)?,
            None => output.exists(),
        };
        if exists {
            return Err(Error::Data(format!(
                "{} already exists; write the predictions to a new file",
                output.display()
            )));
        }
        let local_output = match store_output {
            Some(url) => {
                let path = staging::staged_object_path(url)?;
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).at(parent)?;
                }
                path
            }
            None => output.to_owned(),
        };
        let model = staging::local_copy(&self.model)?;
        let local_input = staging::staged_file(input)?;
        let tmp = temp_path(&local_output, "partial")?;
        let done = match &self.workers {
            None => self.predict_here(&model, &local_input, &tmp, format),
            Some(scaling) => self
                .plan(scaling, &model, &local_input, &local_output)
                .and_then(|plan| self.predict_across(&plan, input, &tmp, format)),
        };
        let done = done.and_then(|done| {
            match store_output {
                Some(url) => staging::put_object(url, &tmp)?,
                None => std::fs::rename(&tmp, output).at(output)?,
            }
            Ok(done)
        });
        let _ = std::fs::remove_file(&tmp);
        let mut done = done?;
        done.seconds = began.elapsed().as_secs_f64();
        Ok(done)
    }

    fn predict_here(
        &self,
        model: &Path,
        input: &Path,
        tmp: &Path,
        format: FileFormat,
    ) -> Result<Predicted> {
        let device = crate::cuda::use_device(self.device).map_err(|e| {
            Error::config("BatchPredictor.device", format!("{e}; or predict on the CPU"))
        })?;
        let model = ExportedModel::load(model, device)?;
        let header = self.no_header.then_some(&model.schema);
        let mut reader = Reader::open(input, self.batch_rows, header)?;
        let check = Some(self.allow_extra);
        let rows = predict_into(&model, &mut reader, usize::MAX, tmp, format, input, 0, check)?;
        if rows == 0 {
            return Err(Error::Data(format!("{} has no rows to predict", input.display())));
        }
        Ok(Predicted { rows, workers: 0, failures: 0, rows_in_last_attempt: rows, seconds: 0.0 })
    }

    /// Checks the export and the input here (what a worker would find wrong), and splits the
    /// rows among the workers.
    fn plan(
        &self,
        scaling: &ScalingConfig,
        model: &Path,
        input: &Path,
        output: &Path,
    ) -> Result<Plan> {
        scaling.validate()?;
        self.run.validate()?;
        let model = ExportedModel::load(model, tch::Device::Cpu)?;
        let header = self.no_header.then_some(&model.schema);
        let mut reader = Reader::open(input, self.batch_rows, header)?;
        let Some(first) = reader.next_batch()? else {
            return Err(Error::Data(format!("{} has no rows to predict", input.display())));
        };
        model.check_columns(&first, self.allow_extra, input)?;
        // The preprocessor takes its rows (a column of text where it wants numbers is named).
        model.predict(first.head(Some(8)), &format!("{} (its first rows)", input.display()))?;
        let rows = first.height() + reader.count_rows()?;
        let workers = scaling.num_workers.min(rows);
        let part_rows = self.part_rows.div_ceil(self.batch_rows) * self.batch_rows;
        Ok(Plan {
            rows,
            workers,
            part_rows,
            scaling: ScalingConfig { num_workers: workers, max_workers: None, ..scaling.clone() },
            scratch: temp_path(output, "parts")?,
        })
    }

    /// On the workers: `input` as given (a URL each worker stages).
    fn predict_across(
        &self,
        plan: &Plan,
        input: &Path,
        tmp: &Path,
        format: FileFormat,
    ) -> Result<Predicted> {
        // Left by a run of this output that was killed: its parts are not this run's.
        if plan.scratch.exists() {
            std::fs::remove_dir_all(&plan.scratch).at(&plan.scratch)?;
        }
        let parts = plan.scratch.join("parts");
        std::fs::create_dir_all(&parts).at(&parts)?;
        let done = self.run_workers(plan, input, &parts, format).and_then(|result| {
            assemble(&plan.pieces(), &parts, format, tmp)?;
            let last = result.metrics.as_ref().and_then(|m| m.get("rows").copied()).unwrap_or(0.0);
            Ok(Predicted {
                rows: plan.rows,
                workers: plan.workers,
                failures: result.failures.len(),
                rows_in_last_attempt: last as usize,
                seconds: 0.0,
            })
        });
        let _ = std::fs::remove_dir_all(&plan.scratch);
        done
    }

    fn run_workers(
        &self,
        plan: &Plan,
        input: &Path,
        parts: &Path,
        format: FileFormat,
    ) -> Result<TrainResult> {
        // A store's URL as it is (each worker stages it), a path made absolute.
        let absolute = |p: &Path| match p.to_str().filter(|_| remote::is_url(p)) {
            Some(url) => Ok(url.to_owned()),
            None => std::path::absolute(p).at(p).map(|p| p.display().to_string()),
        };
        let params = Params::new()
            .with("model", absolute(&self.model)?)
            .with("input", absolute(input)?)
            .with("no_header", self.no_header)
            .with("batch_rows", self.batch_rows)
            .with("parts", absolute(parts)?)
            .with("format", format.extension())
            .with("rows", plan.rows)
            .with("part_rows", plan.part_rows);
        let mut run = self.run.clone();
        run.name = Some("workers".into());
        run.storage_path = Some(plan.scratch.clone());
        TorchTrainer::new(predict_rank)
            .train_loop_config(params)
            .scaling(plan.scaling.clone())
            .run_config(run)
            .fit()
            .map_err(|e| match e {
                Error::TrainingFailed(result) => {
                    let last = result.failures.last().map_or(String::new(), |f| f.to_string());
                    Error::Worker(format!(
                        "prediction failed after {} attempt(s); {last}",
                        result.failures.len()
                    ))
                }
                e => e,
            })
    }
}

/// How the rows are split among the workers.
struct Plan {
    rows: usize,
    workers: usize,
    /// Rows a part holds (the last of a worker's range fewer): whole batches.
    part_rows: usize,
    scaling: ScalingConfig,
    /// The folder next to the output the workers write their parts into.
    scratch: PathBuf,
}

impl Plan {
    /// Every part, in input order.
    fn pieces(&self) -> Vec<Range<usize>> {
        (0..self.workers).flat_map(|rank| self.pieces_of(rank)).collect()
    }

    /// Worker `rank`'s parts, in order.
    fn pieces_of(&self, rank: usize) -> Vec<Range<usize>> {
        pieces(self.rows, self.workers, rank, self.part_rows)
    }
}

/// Worker `rank`'s (of `workers`) share of `rows` rows, as parts of `part_rows`.
fn pieces(rows: usize, workers: usize, rank: usize, part_rows: usize) -> Vec<Range<usize>> {
    let (start, end) = (rows * rank / workers, rows * (rank + 1) / workers);
    (start..end).step_by(part_rows.max(1)).map(|s| s..(s + part_rows).min(end)).collect()
}

/// The file of the part that starts at row `start`.
fn part_path(parts: &Path, start: usize, format: FileFormat) -> PathBuf {
    parts.join(format!("{start:012}.{}", format.extension()))
}

/// Predicts up to `limit` rows of `reader` into a new file `path` (none when it has no rows);
/// the first batch's columns are checked when `check` says whether extra ones are allowed.
/// Row numbers in errors count from `first_row`. Returns the rows written.
#[allow(clippy::too_many_arguments)]
fn predict_into(
    model: &ExportedModel,
    reader: &mut Reader,
    limit: usize,
    path: &Path,
    format: FileFormat,
    input: &Path,
    first_row: usize,
    check: Option<bool>,
) -> Result<usize> {
    let mut writer: Option<Writer> = None;
    let mut rows = 0;
    while rows < limit {
        let Some(frame) = reader.next_batch()? else { break };
        if let (None, Some(allow_extra)) = (&writer, check) {
            model.check_columns(&frame, allow_extra, input)?;
        }
        let at = first_row + rows;
        let what = format!("{} (rows {at}..{})", input.display(), at + frame.height());
        let predicted = model.predict(frame, &what)?;
        rows += predicted.height();
        match &mut writer {
            Some(w) => w.write(&predicted)?,
            None => writer = Some(Writer::create(path, format, &predicted)?),
        }
    }
    if let Some(w) = writer {
        w.finish(path)?;
    }
    Ok(rows)
}

/// One worker of a batch prediction: its range of the rows, part by part, skipping the parts
/// an earlier attempt made whole.
fn predict_rank(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let p = ctx.params();
    let model_dir = staging::local_copy(Path::new(&p.get::<String>("model")?))?;
    let input = staging::staged_file(Path::new(&p.get::<String>("input")?))?;
    let parts = PathBuf::from(p.get::<String>("parts")?);
    let no_header = p.get::<bool>("no_header")?;
    let batch_rows = p.get::<usize>("batch_rows")?;
    let rows = p.get::<usize>("rows")?;
    let part_rows = p.get::<usize>("part_rows")?;
    let format = match p.get::<String>("format")?.as_str() {
        "parquet" => FileFormat::Parquet,
        _ => FileFormat::Csv,
    };
    let mine = pieces(rows, ctx.world_size(), ctx.world_rank(), part_rows);
    // A worker writes its parts in order: those whole are the first ones.
    let todo: Vec<Range<usize>> = mine
        .iter()
        .skip_while(|piece| part_path(&parts, piece.start, format).exists())
        .cloned()
        .collect();
    let mut written = 0;
    if let (Some(first), Some(last)) = (todo.first(), todo.last()) {
        let model = ExportedModel::load(&model_dir, ctx.device())?;
        let header = no_header.then_some(&model.schema);
        let range = first.start..last.end;
        let mut reader = Reader::open_range(&input, batch_rows, header, range)?;
        for piece in &todo {
            let path = part_path(&parts, piece.start, format);
            let tmp = temp_path(&path, &format!("{}", std::process::id()))?;
            let n = predict_into(
                &model,
                &mut reader,
                piece.len(),
                &tmp,
                format,
                &input,
                piece.start,
                None,
            )?;
            anyhow::ensure!(
                n == piece.len(),
                "{}: rows {}..{} held {n} rows (the file changed while it was predicted?)",
                input.display(),
                piece.start,
                piece.end
            );
            std::fs::rename(&tmp, &path).at(&path)?;
            written += n;
        }
    }
    // The rows all workers predicted in this attempt (exact in two f32s).
    let mut sum = [(written / 65_536) as f32, (written % 65_536) as f32];
    ctx.all_reduce(&mut sum, ReduceOp::Sum)?;
    ctx.report([("rows", f64::from(sum[0]) * 65_536.0 + f64::from(sum[1]))])?;
    Ok(())
}

/// The parts put together in input order into the new file `tmp`.
fn assemble(pieces: &[Range<usize>], parts: &Path, format: FileFormat, tmp: &Path) -> Result<()> {
    use std::io::BufRead;
    let paths: Vec<PathBuf> = pieces.iter().map(|p| part_path(parts, p.start, format)).collect();
    if let Some(missing) = paths.iter().find(|p| !p.exists()) {
        return Err(Error::Worker(format!("the workers left no part {}", missing.display())));
    }
    match format {
        FileFormat::Parquet => {
            let mut writer: Option<Writer> = None;
            for path in &paths {
                let frame = rtune_driver::data::read_rows(path, None, 0..usize::MAX, "a part")?;
                match &mut writer {
                    Some(w) => w.write(&frame)?,
                    None => writer = Some(Writer::create(tmp, format, &frame)?),
                }
            }
            if let Some(w) = writer {
                w.finish(tmp)?;
            }
        }
        FileFormat::Csv | FileFormat::CsvGz => {
            let mut out = std::io::BufWriter::new(std::fs::File::create(tmp).at(tmp)?);
            for (i, path) in paths.iter().enumerate() {
                let mut part = std::io::BufReader::new(std::fs::File::open(path).at(path)?);
                if i > 0 {
                    // Each part has the header; the output has it once.
                    part.read_line(&mut String::new()).at(path)?;
                }
                std::io::copy(&mut part, &mut out).at(tmp)?;
            }
            let file = out.into_inner().map_err(|e| Error::io(tmp, e.into_error()))?;
            file.sync_all().at(tmp)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workers' parts cover every row once, in order, whatever the split.
    #[test]
    fn the_parts_cover_every_row_once_in_order() {
        for rows in [1, 2, 7, 100, 65_537, 200_001] {
            for workers in 1..=5.min(rows) {
                for part_rows in [1, 3, 64, 65_536] {
                    let all: Vec<Range<usize>> =
                        (0..workers).flat_map(|r| pieces(rows, workers, r, part_rows)).collect();
                    assert_eq!(all.first().map(|p| p.start), Some(0));
                    assert_eq!(all.last().map(|p| p.end), Some(rows));
                    for pair in all.windows(2) {
                        assert_eq!(pair[0].end, pair[1].start, "{rows} {workers} {part_rows}");
                    }
                    assert!(all.iter().all(|p| !p.is_empty() && p.len() <= part_rows));
                }
            }
        }
    }
}
