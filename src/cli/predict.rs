//! `rtune predict`: batch prediction over a parquet or CSV file (gzipped or not, with a header
//! row or, given `--no-header`, the model's columns in order) with an exported model (its
//! TorchScript `model.pt` and `preprocessor.json`), in batches of bounded memory: the input's
//! rows with a `prediction` column appended (and `prob_<class>` columns for a classifier).

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use polars::prelude::{
    Column, CsvReadOptions, CsvWriter, DataFrame, ParquetReader, ParquetWriter, Schema, SerReader,
    SerWriter,
};
use tch::Kind;

use crate::data::{DATA_SCHEMA_FILE, DataSchema, LabelKind, read_rows};
use crate::error::Error;
use crate::train::TORCHSCRIPT_FILE;

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
    /// Where the model runs.
    pub device: tch::Device,
}

/// A `--device` flag: cpu, cuda or cuda:N (clap names the flag in its error).
pub(super) fn device(text: &str) -> Result<tch::Device, String> {
    crate::sys::cuda::parse_device(text)
        .ok_or_else(|| format!("{text:?} is not a device; use cpu, cuda or cuda:N (e.g. cuda:1)"))
}

/// Predicts every row of the input; returns a line about what was written.
pub(super) fn predict(args: &PredictArgs<'_>) -> Result<String> {
    let device = crate::sys::cuda::use_device(args.device)
        .map_err(|e| anyhow!("--device: {e}; or predict on the CPU (--device cpu)"))?;
    let (schema, module) = load(args.model, device)?;
    if format_of(args.output)? == FileFormat::CsvGz {
        bail!("{}: write the predictions to a .parquet or .csv file", args.output.display());
    }
    if args.output.exists() {
        bail!("{} already exists; write the predictions to a new file", args.output.display());
    }
    let header = args.no_header.then_some(&schema);
    let mut reader = Reader::open(args.input, args.batch_rows.max(1), header)?;
    let tmp = temp_path(args.output)?;
    let mut writer: Option<Writer> = None;
    let (mut rows, mut first_row) = (0usize, 0usize);
    let result = (|| -> Result<()> {
        while let Some(frame) = reader.next_batch()? {
            if writer.is_none() {
                check_columns(&frame, &schema, args.allow_extra, args.input)?;
            }
            let what = format!(
                "{} (rows {first_row}..{})",
                args.input.display(),
                first_row + frame.height()
            );
            let predicted = predict_batch(&schema, &module, device, frame, &what)?;
            first_row += predicted.height();
            rows += predicted.height();
            match &mut writer {
                Some(w) => w.write(&predicted)?,
                None => writer = Some(Writer::create(&tmp, args.output, &predicted)?),
            }
        }
        match writer.take() {
            Some(w) => w.finish(),
            None => bail!("{} has no rows to predict", args.input.display()),
        }
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, args.output)
        .with_context(|| format!("cannot move the predictions to {}", args.output.display()))?;
    Ok(format!("predicted {rows} rows of {} into {}", args.input.display(), args.output.display()))
}

/// The export's input schema and TorchScript module; errors say what is missing or wrong.
fn load(dir: &Path, device: tch::Device) -> Result<(DataSchema, tch::CModule)> {
    if !dir.is_dir() {
        bail!("{} is not a folder; give the folder `rtune export` wrote", dir.display());
    }
    let script = dir.join(TORCHSCRIPT_FILE);
    if !script.is_file() {
        bail!(
            "{} has no {TORCHSCRIPT_FILE}: predict from a folder `rtune export` wrote for a \
             trainable whose model it knows (`Registry::model`)",
            dir.display()
        );
    }
    let schema = DataSchema::read(dir)?.ok_or_else(|| {
        anyhow!(
            "{} has no {DATA_SCHEMA_FILE}: its model was not trained on datasets, so its input \
             columns are unknown",
            dir.display()
        )
    })?;
    let mut module = tch::CModule::load_on_device(&script, device).map_err(|e| {
        anyhow!("{}: not a TorchScript module rtune can load: {e}", script.display())
    })?;
    module.set_eval();
    Ok((schema, module))
}

/// The input must hold every feature; other columns (the label aside) only when allowed.
fn check_columns(
    frame: &DataFrame,
    schema: &DataSchema,
    allow_extra: bool,
    input: &Path,
) -> Result<()> {
    let names: Vec<String> =
        frame.get_column_names().iter().map(|n| n.as_str().to_owned()).collect();
    let missing: Vec<&String> = schema.features.iter().filter(|f| !names.contains(f)).collect();
    if !missing.is_empty() {
        return Err(Error::Data(format!(
            "{} lacks the model's input column(s) {}",
            input.display(),
            quoted(missing)
        ))
        .into());
    }
    let extra: Vec<&String> = names
        .iter()
        .filter(|n| !schema.features.contains(n) && schema.label.as_ref() != Some(*n))
        .collect();
    if !extra.is_empty() && !allow_extra {
        return Err(Error::Data(format!(
            "{} has column(s) the model does not take: {}; pass --allow-extra to copy them to \
             the output unchanged",
            input.display(),
            quoted(extra)
        ))
        .into());
    }
    Ok(())
}

fn quoted(names: Vec<&String>) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// `frame` with the model's predictions appended.
fn predict_batch(
    schema: &DataSchema,
    module: &tch::CModule,
    device: tch::Device,
    mut frame: DataFrame,
    what: &str,
) -> Result<DataFrame> {
    let table = schema.table(&frame, false, what)?;
    let x = schema.inputs(&table, what)?.f_to_device(device)?;
    let outputs = tch::no_grad(|| module.forward_ts(&[x]))?
        .f_to_device(tch::Device::Cpu)?
        .f_to_kind(Kind::Float)?;
    let mut columns = Vec::new();
    match schema.label_kind {
        Some(LabelKind::Class) => {
            let classes: Vec<i64> = Vec::try_from(outputs.f_argmax(-1, false)?)?;
            let names = schema.label_classes();
            columns.push(match names {
                Some(names) => Column::new(
                    "prediction".into(),
                    classes.iter().map(|&c| names.get(c as usize).cloned()).collect::<Vec<_>>(),
                ),
                None => Column::new("prediction".into(), classes),
            });
            let probs: Vec<Vec<f32>> =
                Vec::try_from(outputs.f_softmax(-1, Kind::Float)?.f_transpose(0, 1)?)?;
            for (c, p) in probs.into_iter().enumerate() {
                let name = names.and_then(|n| n.get(c).cloned()).unwrap_or_else(|| c.to_string());
                columns.push(Column::new(format!("prob_{name}").into(), p));
            }
        }
        _ => {
            let values: Vec<Vec<f32>> =
                Vec::try_from(outputs.f_reshape([table.rows as i64, -1])?.f_transpose(0, 1)?)?;
            if values.len() == 1 {
                columns.push(Column::new("prediction".into(), values[0].clone()));
            } else {
                for (j, v) in values.into_iter().enumerate() {
                    columns.push(Column::new(format!("prediction_{j}").into(), v));
                }
            }
        }
    }
    frame.hstack_mut(&columns)?;
    // The parquet writer takes a batch whose columns are chunked alike.
    frame.align_chunks();
    Ok(frame)
}

/// A hidden file next to `output`, renamed onto it when every row is written.
fn temp_path(output: &Path) -> Result<PathBuf> {
    let name = output.file_name().context("the output file needs a name")?.to_string_lossy();
    Ok(output.with_file_name(format!(".{name}.partial")))
}

#[derive(Clone, Copy, PartialEq)]
enum FileFormat {
    Parquet,
    Csv,
    /// Gzipped CSV (read only).
    CsvGz,
}

fn format_of(path: &Path) -> Result<FileFormat> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase());
    match name.as_deref() {
        Some(n) if n.ends_with(".parquet") => Ok(FileFormat::Parquet),
        Some(n) if n.ends_with(".csv") => Ok(FileFormat::Csv),
        Some(n) if n.ends_with(".csv.gz") => Ok(FileFormat::CsvGz),
        _ => bail!("{}: use a .parquet, .csv or .csv.gz file", path.display()),
    }
}

/// The header of a CSV file without one: the model's input columns in order, then its label
/// when the rows have one column more.
fn header_for(schema: &DataSchema, first_line: &str, path: &Path) -> Result<String> {
    let columns = first_line.split(',').count();
    let mut names = schema.features.clone();
    match &schema.label {
        _ if columns == names.len() => {}
        Some(label) if columns == names.len() + 1 => names.push(label.clone()),
        label => bail!(
            "{}: --no-header reads the model's {} input columns in order{}, but the first row \
             has {columns} values",
            path.display(),
            names.len(),
            label.as_ref().map_or(String::new(), |l| format!(" (then `{l}`)"))
        ),
    }
    Ok(names.join(","))
}

/// The input, a batch of rows at a time.
enum Reader {
    /// Row slices: only the row groups holding them are read.
    Parquet { path: PathBuf, rows: usize, next: usize, batch: usize },
    /// Lines: the header, then `batch` lines at a time parsed with the first batch's types.
    /// (A quoted value spanning lines is not supported.)
    Csv {
        path: PathBuf,
        lines: std::io::Lines<Box<dyn BufRead>>,
        /// The header row, and a first row read to make a header from (`--no-header`).
        header: String,
        pending: Option<String>,
        types: Option<Arc<Schema>>,
        batch: usize,
    },
}

impl Reader {
    /// Opens the input; `no_header` gives the columns of a CSV file without a header row.
    fn open(path: &Path, batch: usize, no_header: Option<&DataSchema>) -> Result<Reader> {
        let format = format_of(path)?;
        if format == FileFormat::Parquet && no_header.is_some() {
            bail!("--no-header is for CSV files; {} is parquet", path.display());
        }
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        Ok(match format {
            FileFormat::Parquet => {
                let rows = ParquetReader::new(file)
                    .num_rows()
                    .with_context(|| format!("{} is not a parquet file", path.display()))?;
                Reader::Parquet { path: path.to_owned(), rows, next: 0, batch }
            }
            FileFormat::Csv | FileFormat::CsvGz => {
                let read: Box<dyn BufRead> = match format {
                    FileFormat::CsvGz => {
                        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
                    }
                    _ => Box::new(BufReader::new(file)),
                };
                let mut lines = read.lines();
                let first = lines
                    .next()
                    .transpose()
                    .with_context(|| format!("cannot read {}", path.display()))?
                    .with_context(|| format!("{} is empty (no header row)", path.display()))?;
                let (header, pending) = match no_header {
                    Some(schema) => (header_for(schema, &first, path)?, Some(first)),
                    None => (first, None),
                };
                Reader::Csv { path: path.to_owned(), lines, header, pending, types: None, batch }
            }
        })
    }

    fn next_batch(&mut self) -> Result<Option<DataFrame>> {
        match self {
            Reader::Parquet { path, rows, next, batch } => {
                if *next >= *rows {
                    return Ok(None);
                }
                let len = (*batch).min(*rows - *next);
                let frame = read_rows(path, None, *next..*next + len, "the input")?;
                *next += len;
                Ok(Some(frame))
            }
            Reader::Csv { path, lines, header, pending, types, batch } => {
                let mut text = format!("{header}\n");
                let mut n = 0;
                for line in pending.take().map(Ok).into_iter().chain(lines.by_ref()) {
                    let line = line.with_context(|| format!("reading {}", path.display()))?;
                    if line.trim().is_empty() {
                        continue;
                    }
                    text.push_str(&line);
                    text.push('\n');
                    n += 1;
                    if n == *batch {
                        break;
                    }
                }
                if n == 0 {
                    return Ok(None);
                }
                let frame = CsvReadOptions::default()
                    .with_has_header(true)
                    .with_schema(types.clone())
                    .into_reader_with_file_handle(Cursor::new(text.into_bytes()))
                    .finish()
                    .with_context(|| format!("{}: a row does not parse", path.display()))?;
                if types.is_none() {
                    *types = Some(Arc::new(frame.schema().as_ref().clone()));
                }
                Ok(Some(frame))
            }
        }
    }
}

/// The output, written a batch at a time.
enum Writer {
    Parquet(Box<polars::io::parquet::write::BatchedWriter<File>>),
    Csv(File),
}

impl Writer {
    fn create(tmp: &Path, output: &Path, first: &DataFrame) -> Result<Writer> {
        let file = File::create(tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        let mut writer = match format_of(output)? {
            FileFormat::Parquet => {
                Writer::Parquet(Box::new(ParquetWriter::new(file).batched(first.schema())?))
            }
            FileFormat::CsvGz => bail!("{}: write a .parquet or .csv file", output.display()),
            FileFormat::Csv => {
                let mut file = file;
                CsvWriter::new(&mut file).include_header(true).finish(&mut first.clone())?;
                return Ok(Writer::Csv(file));
            }
        };
        writer.write(first)?;
        Ok(writer)
    }

    fn write(&mut self, frame: &DataFrame) -> Result<()> {
        match self {
            Writer::Parquet(w) => w.write_batch(frame)?,
            Writer::Csv(file) => {
                CsvWriter::new(file).include_header(false).finish(&mut frame.clone())?
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        let file = match self {
            Writer::Parquet(w) => {
                w.finish()?;
                return Ok(());
            }
            Writer::Csv(file) => file,
        };
        file.sync_all()?;
        Ok(())
    }
}
