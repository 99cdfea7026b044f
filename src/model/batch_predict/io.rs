//! The input a batch of rows at a time (all of it, or a range of its rows), and the output
//! written a batch at a time: parquet or CSV, gzipped CSV read only.

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use polars::prelude::{
    CsvReadOptions, CsvWriter, DataFrame, ParquetReader, ParquetWriter, Schema, SerReader,
    SerWriter,
};

use rtune_driver::data::{DataSchema, read_rows};
use rtune_driver::error::{Error, IoContext, Result};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum FileFormat {
    Parquet,
    Csv,
    /// Gzipped CSV (read only).
    CsvGz,
}

impl FileFormat {
    pub(super) fn of(path: &Path) -> Result<FileFormat> {
        let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase());
        match name.as_deref() {
            Some(n) if n.ends_with(".parquet") => Ok(FileFormat::Parquet),
            Some(n) if n.ends_with(".csv") => Ok(FileFormat::Csv),
            Some(n) if n.ends_with(".csv.gz") => Ok(FileFormat::CsvGz),
            _ => Err(Error::Data(format!(
                "{}: use a .parquet, .csv or .csv.gz file",
                path.display()
            ))),
        }
    }

    /// The extension of an output file (a part, the output) in this format.
    pub(super) fn extension(self) -> &'static str {
        match self {
            FileFormat::Parquet => "parquet",
            FileFormat::Csv | FileFormat::CsvGz => "csv",
        }
    }

    /// The output's format: parquet or plain CSV.
    pub(super) fn of_output(path: &Path) -> Result<FileFormat> {
        match FileFormat::of(path)? {
            FileFormat::CsvGz => Err(Error::Data(format!(
                "{}: write the predictions to a .parquet or .csv file",
                path.display()
            ))),
            format => Ok(format),
        }
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
        label => {
            return Err(Error::Data(format!(
                "{}: --no-header reads the model's {} input columns in order{}, but the first \
                 row has {columns} values",
                path.display(),
                names.len(),
                label.as_ref().map_or(String::new(), |l| format!(" (then `{l}`)"))
            )));
        }
    }
    Ok(names.join(","))
}

/// The input, a batch of rows at a time.
pub(super) enum Reader {
    /// Row slices: only the row groups holding them are read.
    Parquet { path: PathBuf, end: usize, next: usize, batch: usize },
    /// Lines: the header, then `batch` lines at a time parsed with the first batch's types.
    /// Blank lines are no rows. (A quoted value spanning lines is not supported.)
    Csv {
        path: PathBuf,
        lines: std::io::Lines<Box<dyn BufRead>>,
        /// The header row, and a first row read to make a header from (`--no-header`).
        header: String,
        pending: Option<String>,
        types: Option<Arc<Schema>>,
        batch: usize,
        /// Rows left to read (of a range), when not all.
        left: Option<usize>,
        /// The number of the next row (from 0, blank lines not counted).
        row: usize,
    },
}

impl Reader {
    /// Opens the input; `no_header` gives the columns of a CSV file without a header row.
    pub(super) fn open(
        path: &Path,
        batch: usize,
        no_header: Option<&DataSchema>,
    ) -> Result<Reader> {
        let format = FileFormat::of(path)?;
        if format == FileFormat::Parquet && no_header.is_some() {
            return Err(Error::Data(format!(
                "--no-header is for CSV files; {} is parquet",
                path.display()
            )));
        }
        let file = File::open(path).at(path)?;
        let batch = batch.max(1);
        Ok(match format {
            FileFormat::Parquet => {
                let rows = ParquetReader::new(file).num_rows().map_err(|e| {
                    Error::Data(format!("{} is not a parquet file: {e}", path.display()))
                })?;
                Reader::Parquet { path: path.to_owned(), end: rows, next: 0, batch }
            }
            FileFormat::Csv | FileFormat::CsvGz => {
                let read: Box<dyn BufRead> = match format {
                    FileFormat::CsvGz => {
                        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
                    }
                    _ => Box::new(BufReader::new(file)),
                };
                let mut lines = read.lines();
                let first = lines.next().transpose().at(path)?.ok_or_else(|| {
                    Error::Data(format!("{} is empty (no header row)", path.display()))
                })?;
                let (header, pending) = match no_header {
                    Some(schema) => (header_for(schema, &first, path)?, Some(first)),
                    None => (first, None),
                };
                Reader::Csv {
                    path: path.to_owned(),
                    lines,
                    header,
                    pending,
                    types: None,
                    batch,
                    left: None,
                    row: 0,
                }
            }
        })
    }

    /// Opens rows `range` of the input only, read as the whole input is: a CSV file's column
    /// types are the ones its first batch gives (as a reader of all of it takes them).
    pub(super) fn open_range(
        path: &Path,
        batch: usize,
        no_header: Option<&DataSchema>,
        range: Range<usize>,
    ) -> Result<Reader> {
        let mut reader = Reader::open(path, batch, no_header)?;
        match &mut reader {
            Reader::Parquet { end, next, .. } => {
                *end = range.end.min(*end);
                *next = range.start;
            }
            Reader::Csv { .. } => {
                let mut first = Reader::open(path, batch, no_header)?;
                first.next_batch()?;
                let types = first.types();
                let Reader::Csv { path, lines, pending, types: taken, left, row, .. } = &mut reader
                else {
                    unreachable!("opened as CSV above")
                };
                *taken = types;
                let mut skip = range.start;
                if skip > 0 && pending.take().is_some() {
                    skip -= 1;
                }
                while skip > 0 {
                    let line = lines.next().transpose().at(&*path)?.ok_or_else(|| {
                        Error::Data(format!("{} ends before row {}", path.display(), range.start))
                    })?;
                    if !line.trim().is_empty() {
                        skip -= 1;
                    }
                }
                *left = Some(range.len());
                *row = range.start;
            }
        }
        Ok(reader)
    }

    /// The CSV column types taken from the first batch, once read.
    fn types(&self) -> Option<Arc<Schema>> {
        match self {
            Reader::Csv { types, .. } => types.clone(),
            Reader::Parquet { .. } => None,
        }
    }

    /// Counts the rows not read yet (a CSV file is read through).
    pub(super) fn count_rows(mut self) -> Result<usize> {
        match &mut self {
            Reader::Parquet { end, next, .. } => Ok(end.saturating_sub(*next)),
            Reader::Csv { path, lines, pending, left, .. } => {
                let mut rows = usize::from(pending.is_some());
                for line in lines {
                    if !line.at(&*path)?.trim().is_empty() {
                        rows += 1;
                    }
                }
                Ok(left.map_or(rows, |left| rows.min(left)))
            }
        }
    }

    pub(super) fn next_batch(&mut self) -> Result<Option<DataFrame>> {
        match self {
            Reader::Parquet { path, end, next, batch } => {
                if *next >= *end {
                    return Ok(None);
                }
                let len = (*batch).min(*end - *next);
                let frame = read_rows(path, None, *next..*next + len, "the input")?;
                *next += len;
                Ok(Some(frame))
            }
            Reader::Csv { path, lines, header, pending, types, batch, left, row } => {
                let mut text = format!("{header}\n");
                let want = left.map_or(*batch, |left| left.min(*batch));
                let mut n = 0;
                if want > 0 {
                    for line in pending.take().map(Ok).into_iter().chain(lines.by_ref()) {
                        let line = line.at(&*path)?;
                        if line.trim().is_empty() {
                            continue;
                        }
                        text.push_str(&line);
                        text.push('\n');
                        n += 1;
                        if n == want {
                            break;
                        }
                    }
                }
                if n == 0 {
                    return Ok(None);
                }
                if let Some(left) = left {
                    *left -= n;
                }
                let frame = CsvReadOptions::default()
                    .with_has_header(true)
                    .with_schema(types.clone())
                    .into_reader_with_file_handle(Cursor::new(text.into_bytes()))
                    .finish()
                    .map_err(|e| {
                        Error::Data(format!(
                            "{}: a row of rows {row}..{} does not parse: {e}",
                            path.display(),
                            *row + n
                        ))
                    })?;
                *row += n;
                if types.is_none() {
                    *types = Some(Arc::new(frame.schema().as_ref().clone()));
                }
                Ok(Some(frame))
            }
        }
    }
}

/// The output, written a batch at a time.
pub(super) enum Writer {
    Parquet(Box<polars::io::parquet::write::BatchedWriter<File>>),
    Csv(File),
}

impl Writer {
    /// A new file `path` in `format`, its first batch `first` (its schema the file's).
    pub(super) fn create(path: &Path, format: FileFormat, first: &DataFrame) -> Result<Writer> {
        let file = File::create(path).at(path)?;
        let mut writer = match format {
            FileFormat::Parquet => {
                Writer::Parquet(Box::new(ParquetWriter::new(file).batched(first.schema())?))
            }
            FileFormat::Csv | FileFormat::CsvGz => {
                let mut file = file;
                CsvWriter::new(&mut file).include_header(true).finish(&mut first.clone())?;
                return Ok(Writer::Csv(file));
            }
        };
        writer.write(first)?;
        Ok(writer)
    }

    pub(super) fn write(&mut self, frame: &DataFrame) -> Result<()> {
        match self {
            Writer::Parquet(w) => w.write_batch(frame)?,
            Writer::Csv(file) => {
                CsvWriter::new(file).include_header(false).finish(&mut frame.clone())?
            }
        }
        Ok(())
    }

    /// Ends the file `path` it writes, its rows on disk.
    pub(super) fn finish(self, path: &Path) -> Result<()> {
        match self {
            Writer::Parquet(w) => {
                w.finish()?;
            }
            Writer::Csv(file) => file.sync_all().at(path)?,
        }
        Ok(())
    }
}

/// A hidden file next to `output`, renamed onto it when every row is written.
pub(super) fn temp_path(output: &Path, suffix: &str) -> Result<PathBuf> {
    let name = output
        .file_name()
        .ok_or_else(|| Error::Data(format!("{}: the output file needs a name", output.display())))?
        .to_string_lossy();
    Ok(output.with_file_name(format!(".{name}.{suffix}")))
}
