//! Datasets a trainer reads (Ray Train's `datasets=`): where they come from, which columns are
//! features and label, and what the driver makes of them before any worker starts.
//!
//! The driver prepares the datasets once per `fit` (once per sweep with a Tuner: every trial
//! shares the result): a parquet file is used where it lies; a CSV file or an in-memory frame is
//! written once to a parquet file of the run's (`.datasets/NAME.parquet`), so that every worker
//! reads only the row groups of its own shard. It checks every dataset's columns and types,
//! and fits the preprocessor on the dataset named `train`, all before training starts. Workers
//! on other hosts read the same paths: on a cluster, datasets must lie on a shared file system.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use polars::prelude::{
    CsvReadOptions, DataFrame, DataType, ParquetReader, ParquetWriter, SerReader,
};
use serde::{Deserialize, Serialize};

use crate::data::preprocess::{Preprocessor, Scope};
use crate::data::table::{Col, Table, column_list, is_numeric};
use crate::error::{Error, Result};
use crate::storage;
use crate::storage::remote::Remote;

/// The dataset the preprocessor is fitted on.
pub const TRAIN_DATASET: &str = "train";

/// The file next to a checkpoint's weights that holds its `DataSchema`.
pub const DATA_SCHEMA_FILE: &str = "preprocessor.json";

/// Rows per row group of the parquet files rtune writes: a worker reads whole row groups.
const ROW_GROUP_ROWS: usize = 65_536;

/// Where a dataset's rows come from.
#[derive(Clone)]
pub struct Dataset {
    source: Source,
}

#[derive(Clone)]
enum Source {
    Parquet(PathBuf),
    Csv(PathBuf),
    Frame(DataFrame),
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::Parquet(p) => write!(f, "Dataset::parquet({})", p.display()),
            Source::Csv(p) => write!(f, "Dataset::csv({})", p.display()),
            Source::Frame(df) => write!(f, "Dataset::frame({} rows)", df.height()),
        }
    }
}

impl Dataset {
    /// A parquet file; workers read only their shard's row groups.
    pub fn parquet(path: impl Into<PathBuf>) -> Self {
        Dataset { source: Source::Parquet(path.into()) }
    }

    /// A CSV file with a header row (read once by the driver).
    pub fn csv(path: impl Into<PathBuf>) -> Self {
        Dataset { source: Source::Csv(path.into()) }
    }

    /// A polars frame built in Rust.
    pub fn frame(frame: DataFrame) -> Self {
        Dataset { source: Source::Frame(frame) }
    }
}

impl From<DataFrame> for Dataset {
    fn from(frame: DataFrame) -> Self {
        Dataset::frame(frame)
    }
}

/// Which columns are the model's inputs and which is its target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Columns {
    features: Option<Vec<String>>,
    label: Option<String>,
}

/// `Columns` resolved against a frame's schema.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub features: Vec<String>,
    pub label: Option<String>,
}

impl Resolved {
    /// Features, then the label.
    pub(crate) fn all_columns(&self) -> Vec<String> {
        self.features.iter().cloned().chain(self.label.clone()).collect()
    }
}

impl Columns {
    /// Every column is a feature, there is no label (until set).
    pub fn new() -> Self {
        Columns::default()
    }

    /// The feature columns, in the order the model sees them (by default: every column but the
    /// label, in the training data's order).
    pub fn features<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.features = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// The label column (the target).
    pub fn label(mut self, name: impl Into<String>) -> Self {
        self.label = Some(name.into());
        self
    }

    /// The features and label for a frame with these columns; an error names what is missing.
    pub(crate) fn resolve(&self, frame: &DataFrame, what: &str) -> Result<Resolved> {
        let names: Vec<String> =
            frame.get_column_names().iter().map(|n| n.as_str().to_owned()).collect();
        let features = match &self.features {
            Some(f) => f.clone(),
            None => names.iter().filter(|n| Some(*n) != self.label.as_ref()).cloned().collect(),
        };
        if let Some(label) = &self.label
            && features.contains(label)
        {
            return Err(Error::Data(format!(
                "`{label}` is both a feature and the label; list the features without it"
            )));
        }
        let missing: Vec<&String> =
            features.iter().chain(self.label.as_ref()).filter(|c| !names.contains(c)).collect();
        if !missing.is_empty() {
            return Err(Error::Data(format!(
                "{what} has no column {} (its columns: {})",
                missing.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "),
                names.join(", ")
            )));
        }
        if features.is_empty() {
            return Err(Error::Data(format!("{what} has no feature column")));
        }
        Ok(Resolved { features, label: self.label.clone() })
    }
}

/// A trainer's datasets, columns and preprocessor (set on `TorchTrainer`).
#[derive(Debug, Clone, Default)]
pub(crate) struct DataConfig {
    datasets: Vec<(String, Dataset)>,
    columns: Columns,
    preprocessor: Option<Preprocessor>,
}

/// How a label becomes a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelKind {
    /// Class indices (integer or boolean labels, or strings through an `OrdinalEncoder`):
    /// an int64 tensor.
    Class,
    /// Numbers (float labels): a float tensor.
    Value,
}

/// A preprocessed table's labels, as a worker makes them a tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum Labels {
    /// Class indices (int64).
    Classes(Vec<i64>),
    /// Values, for regression (float).
    Values(Vec<f32>),
}

/// What a model trained on datasets expects of its input, saved next to its weights
/// (`preprocessor.json`): the input columns, the label, and the fitted preprocessor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSchema {
    /// Input feature columns, before preprocessing.
    pub features: Vec<String>,
    pub label: Option<String>,
    pub label_kind: Option<LabelKind>,
    /// Fitted on the training dataset.
    pub preprocessor: Option<Preprocessor>,
    /// The columns of the model's input tensor, in order (after preprocessing).
    pub model_inputs: Vec<String>,
}

/// A dataset as the workers read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreparedDataset {
    pub path: PathBuf,
    pub rows: usize,
    /// Its folder on the run's object store, for workers that do not see the driver's files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The file a prepared dataset is in its folder on a store.
const STORED_FILE: &str = "data.parquet";

/// Everything the workers need to read the datasets (sent to them as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataPlan {
    pub schema: DataSchema,
    pub datasets: BTreeMap<String, PreparedDataset>,
}

impl DataPlan {
    /// Puts every dataset's file in `store` (as `<name>/data.parquet`), for workers that read
    /// nothing of the driver's (see [`DataPlan::bring_down`]).
    pub(crate) fn upload(&mut self, store: &Remote) -> Result<()> {
        for (name, dataset) in &mut self.datasets {
            let folder = store.join(name);
            let path = dataset.path.clone();
            crate::storage::remote::blocking(folder.upload(STORED_FILE, &path))?;
            dataset.url = Some(folder.url().to_owned());
        }
        Ok(())
    }

    /// Fetches what rank `rank` of `world` reads of every dataset that is on a store into
    /// `dir`, and reads it from there: the file's footer and the row groups that hold the
    /// rank's rows (`shard_range`), by range requests, each written at its offset in a sparse
    /// local file of the object's size. The reader decodes only those row groups (`read_rows`).
    pub fn bring_down(
        &mut self,
        dir: &Path,
        rank: usize,
        world: usize,
        settings: &crate::config::StoreSettings,
    ) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        for (name, dataset) in &mut self.datasets {
            let Some(url) = &dataset.url else { continue };
            let local = dir.join(format!("{name}.parquet"));
            let rows = crate::data::shard_range(dataset.rows, rank, world);
            let remote = Remote::with_settings(url, settings)?;
            let fetch = fetch_rows(&remote, &local, rows.clone());
            let (fetched, size) = storage::remote::blocking(fetch)?;
            tracing::info!(
                "dataset `{name}`: fetched {fetched} of {size} bytes from {url} for rows {rows:?}"
            );
            dataset.path = local;
        }
        Ok(())
    }
}

impl DataConfig {
    pub(crate) fn is_empty(&self) -> bool {
        self.datasets.is_empty()
    }

    /// Adds (or replaces) datasets by name.
    pub(crate) fn add(&mut self, datasets: impl IntoIterator<Item = (String, Dataset)>) {
        for (name, dataset) in datasets {
            self.datasets.retain(|(n, _)| *n != name);
            self.datasets.push((name, dataset));
        }
    }

    pub(crate) fn set_columns(&mut self, columns: Columns) {
        self.columns = columns;
    }

    pub(crate) fn set_preprocessor(&mut self, preprocessor: Preprocessor) {
        self.preprocessor = Some(preprocessor);
    }

    /// Settings that can never work, before any data is read.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.datasets.is_empty() {
            if self.preprocessor.is_some() {
                return Err(Error::Data(
                    "a preprocessor is set but no datasets: give them with TorchTrainer::datasets"
                        .into(),
                ));
            }
            return Ok(());
        }
        for (name, _) in &self.datasets {
            if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
                return Err(Error::Data(format!(
                    "dataset name {name:?}: use a plain name such as \"train\" or \"valid\""
                )));
            }
        }
        if self.preprocessor.is_some() && !self.datasets.iter().any(|(n, _)| n == TRAIN_DATASET) {
            return Err(Error::Data(format!(
                "the preprocessor is fitted on the dataset named `{TRAIN_DATASET}`, and there is \
                 none (datasets: {}); name the training data `{TRAIN_DATASET}`",
                self.names().join(", ")
            )));
        }
        Ok(())
    }

    fn names(&self) -> Vec<&str> {
        self.datasets.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Reads, checks and fits as the module docs say; CSV files and frames are written under
    /// `cache_dir`. None without datasets.
    pub(crate) fn prepare(&self, cache_dir: &Path) -> Result<Option<DataPlan>> {
        self.validate()?;
        if self.datasets.is_empty() {
            return Ok(None);
        }
        let mut datasets = BTreeMap::new();
        for (name, dataset) in &self.datasets {
            datasets.insert(name.clone(), prepare_one(name, dataset, cache_dir)?);
        }
        // The schema comes from the training data (or the first dataset without one).
        let (first, _) = &self.datasets[0];
        let fit_on = if datasets.contains_key(TRAIN_DATASET) { TRAIN_DATASET } else { first };
        let what = format!("dataset `{fit_on}`");
        let head = read_rows(&datasets[fit_on].path, None, 0..0, &what)?;
        let resolved = self.columns.resolve(&head, &what)?;
        for (name, prepared) in &datasets {
            let what = format!("dataset `{name}`");
            let frame = read_rows(&prepared.path, None, 0..0, &what)?;
            check_types(&frame, &resolved, &what)?;
        }
        let wanted = resolved.all_columns();
        let frame = read_rows(&datasets[fit_on].path, Some(&wanted), 0..usize::MAX, &what)?;
        let mut table = Table::from_frame(&frame, &wanted, &what)?;
        drop(frame);
        let mut scope = Scope { features: resolved.features.clone() };
        let preprocessor = match &self.preprocessor {
            Some(p) => {
                let mut p = p.clone();
                p.fit_table(&mut table, &mut scope, &what)?;
                Some(p)
            }
            None => None,
        };
        let label_kind = match &resolved.label {
            None => None,
            Some(label) => Some(label_kind(&head, &table, label, &what)?),
        };
        let schema = DataSchema {
            features: resolved.features,
            label: resolved.label,
            label_kind,
            preprocessor,
            model_inputs: scope.features,
        };
        // Every model input must now be a number without gaps (checked on the training data).
        schema.check_table(&table, &what)?;
        Ok(Some(DataPlan { schema, datasets }))
    }
}

/// A label's kind from its column type; strings must have been encoded.
fn label_kind(head: &DataFrame, table: &Table, label: &str, what: &str) -> Result<LabelKind> {
    let dtype = head.column(label).map(|c| c.dtype().clone()).unwrap_or(DataType::Null);
    match table.get(label) {
        Some(Col::Text(_)) => Err(Error::Data(format!(
            "the label `{label}` of {what} holds strings: add OrdinalEncoder::new([\"{label}\"]) \
             to the preprocessor to train on class indices"
        ))),
        _ if dtype.is_float() => Ok(LabelKind::Value),
        _ => Ok(LabelKind::Class),
    }
}

/// Every feature and the label must be numbers or strings.
fn check_types(frame: &DataFrame, resolved: &Resolved, what: &str) -> Result<()> {
    for name in resolved.features.iter().chain(&resolved.label) {
        let column = frame.column(name).map_err(|_| {
            Error::Data(format!(
                "{what} has no column `{name}` (its columns: {})",
                column_list(frame)
            ))
        })?;
        let dtype = column.dtype();
        if !is_numeric(dtype) && !matches!(dtype, DataType::String) {
            return Err(Error::Data(format!(
                "column `{name}` of {what} has type {dtype}: rtune reads numbers (integers, \
                 floats, booleans) and strings; cast it to one of those"
            )));
        }
    }
    Ok(())
}

impl DataSchema {
    /// `frame` made into model inputs (and labels, when `with_label`): its columns read, checked
    /// and preprocessed.
    pub fn table(&self, frame: &DataFrame, with_label: bool, what: &str) -> Result<Table> {
        let mut names = self.features.clone();
        if with_label && let Some(label) = &self.label {
            names.push(label.clone());
        }
        let mut table = Table::from_frame(frame, &names, what)?;
        if let Some(p) = &self.preprocessor {
            p.transform_table(&mut table, what)?;
        }
        Ok(table)
    }

    /// The model inputs of a preprocessed table, row-major: `rows` rows of `model_inputs`
    /// numbers (a worker makes it a `[rows, model_inputs]` float tensor).
    pub fn inputs(&self, table: &Table, what: &str) -> Result<Vec<f32>> {
        table.row_major(&self.model_inputs, what)
    }

    /// The labels of a preprocessed table: class indices or values, by the label's kind.
    pub fn labels(&self, table: &Table, what: &str) -> Result<Labels> {
        let label = self.label.as_deref().ok_or_else(|| {
            Error::Data(format!("{what} has no label: name one with Columns::label"))
        })?;
        let values = table.numbers(label, what)?;
        if let Some(row) = values.iter().position(|x| x.is_nan()) {
            return Err(Error::Data(format!(
                "the label `{label}` of {what} is missing in row {row}: drop unlabelled rows"
            )));
        }
        Ok(match self.label_kind {
            Some(LabelKind::Value) => Labels::Values(values.to_vec()),
            _ => {
                if let Some(row) = values.iter().position(|&x| x.fract() != 0.0) {
                    return Err(Error::Data(format!(
                        "the label `{label}` of {what} is {} in row {row}, not a class index",
                        values[row]
                    )));
                }
                Labels::Classes(values.iter().map(|&x| x as i64).collect())
            }
        })
    }

    fn check_table(&self, table: &Table, what: &str) -> Result<()> {
        for name in &self.model_inputs {
            match table.get(name) {
                Some(Col::Text(_)) => {
                    return Err(Error::Data(format!(
                        "feature `{name}` of {what} holds strings: add a OneHotEncoder (or an \
                         OrdinalEncoder) for it to the preprocessor"
                    )));
                }
                Some(Col::Num(v)) => {
                    if let Some(row) = v.iter().position(|x| x.is_nan()) {
                        return Err(Error::Data(format!(
                            "feature `{name}` of {what} has missing values (the first in row \
                             {row}): add a SimpleImputer to the preprocessor"
                        )));
                    }
                }
                None => return Err(Error::Data(format!("{what} has no column `{name}`"))),
            }
        }
        Ok(())
    }

    /// The class names of a string label (through its `OrdinalEncoder`), by class index.
    pub fn label_classes(&self) -> Option<&[String]> {
        self.preprocessor.as_ref()?.ordinal_categories(self.label.as_deref()?)
    }

    /// Reads `DATA_SCHEMA_FILE` from a checkpoint or export folder: None when it has none.
    pub fn read(dir: &Path) -> Result<Option<DataSchema>> {
        let path = dir.join(DATA_SCHEMA_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| Error::Checkpoint {
                path,
                message: format!("not an rtune preprocessor file: {e}"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}

/// A dataset as a parquet file the workers can slice, with its row count.
fn prepare_one(name: &str, dataset: &Dataset, cache_dir: &Path) -> Result<PreparedDataset> {
    let what = format!("dataset `{name}`");
    let (path, rows) = match &dataset.source {
        Source::Parquet(path) => {
            let path = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
            let mut reader = ParquetReader::new(open(&path, &what)?);
            let rows = reader.num_rows().map_err(|e| read_error(&path, &what, e))?;
            (path, rows)
        }
        Source::Csv(path) => {
            let frame = CsvReadOptions::default()
                .with_has_header(true)
                .try_into_reader_with_file_path(Some(path.clone()))
                .and_then(|r| r.finish())
                .map_err(|e| read_error(path, &what, e))?;
            write_cache(frame, name, cache_dir)?
        }
        Source::Frame(frame) => write_cache(frame.clone(), name, cache_dir)?,
    };
    if rows == 0 {
        return Err(Error::Data(format!("{what} ({}) has no rows", path.display())));
    }
    Ok(PreparedDataset { path, rows, url: None })
}

fn open(path: &Path, what: &str) -> Result<File> {
    File::open(path)
        .map_err(|e| Error::Data(format!("{what}: cannot open {}: {e}", path.display())))
}

fn read_error(path: &Path, what: &str, e: polars::error::PolarsError) -> Error {
    Error::Data(format!("{what}: cannot read {}: {e}", path.display()))
}

/// Writes `frame` to `cache_dir/NAME.parquet` (atomically) and returns the path and row count.
fn write_cache(mut frame: DataFrame, name: &str, cache_dir: &Path) -> Result<(PathBuf, usize)> {
    std::fs::create_dir_all(cache_dir).map_err(|e| Error::io(cache_dir, e))?;
    let path = std::path::absolute(cache_dir.join(format!("{name}.parquet")))
        .map_err(|e| Error::io(cache_dir, e))?;
    let tmp = path.with_extension(format!("parquet.tmp{}", std::process::id()));
    let mut file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    ParquetWriter::new(&mut file)
        .with_row_group_size(Some(ROW_GROUP_ROWS))
        .finish(&mut frame)
        .map_err(|e| Error::Data(format!("dataset `{name}`: writing {}: {e}", tmp.display())))?;
    file.sync_all().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    storage::fsync_dir(cache_dir)?;
    Ok((path, frame.height()))
}

/// The most a parquet footer is guessed to take: fetched with the file's last bytes at once
/// (a larger one takes a second request).
const FOOTER_GUESS: u64 = 64 << 10;

/// Writes into `local` (a sparse file of the object's size) the parts of the prepared dataset
/// at `remote` that hold `rows`: its magic, its footer and the row groups of those rows.
/// Returns the bytes fetched and the object's size.
async fn fetch_rows(
    remote: &Remote,
    local: &Path,
    rows: std::ops::Range<usize>,
) -> Result<(u64, u64)> {
    let size = remote.size(STORED_FILE).await?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(local)
        .map_err(|e| Error::io(local, e))?;
    file.set_len(size).map_err(|e| Error::io(local, e))?;
    let corrupt = |why: &str| Error::Data(format!("{}: {why}", remote.url()));
    if size < 12 {
        return Err(corrupt("not a parquet file (too short)"));
    }
    let tail = size.saturating_sub(FOOTER_GUESS).max(4);
    remote.fetch_ranges(STORED_FILE, [0..4, tail..size], &file).await?;
    let mut end = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut end, size - 8)
        .map_err(|e| Error::io(local, e))?;
    if &end[4..] != b"PAR1" {
        return Err(corrupt("not a parquet file (no footer)"));
    }
    let footer = u64::from(u32::from_le_bytes([end[0], end[1], end[2], end[3]])) + 8;
    let footer_start = size
        .checked_sub(footer)
        .filter(|s| *s >= 4)
        .ok_or_else(|| corrupt("its footer is longer than the file"))?;
    let mut fetched = 4 + (size - tail);
    if footer_start < tail {
        remote.fetch_ranges(STORED_FILE, std::iter::once(footer_start..tail), &file).await?;
        fetched += tail - footer_start;
    }
    let metadata = ParquetReader::new(File::open(local).map_err(|e| Error::io(local, e))?)
        .get_metadata()
        .map_err(|e| corrupt(&format!("its footer: {e}")))?
        .clone();
    let mut first = 0;
    let mut wanted = Vec::new();
    for group in &metadata.row_groups {
        let group_rows = first..first + group.num_rows();
        if group_rows.start < rows.end && rows.start < group_rows.end {
            wanted.push(group.full_byte_range());
        }
        first = group_rows.end;
    }
    remote.fetch_ranges(STORED_FILE, wanted.iter().cloned(), &file).await?;
    fetched += wanted.iter().map(|r| r.end - r.start).sum::<u64>();
    Ok((fetched, size))
}

/// Rows `range` (clamped to the file) of a prepared parquet file, only `columns` (all when
/// None). Only the row groups holding those rows are decoded.
pub fn read_rows(
    path: &Path,
    columns: Option<&[String]>,
    range: std::ops::Range<usize>,
    what: &str,
) -> Result<DataFrame> {
    let len = range.end.saturating_sub(range.start);
    ParquetReader::new(open(path, what)?)
        .with_columns(columns.map(<[String]>::to_vec))
        .with_slice(Some((range.start, len)))
        .finish()
        .map_err(|e| read_error(path, what, e))
}

#[cfg(test)]
mod tests {
    use polars::prelude::Column;

    use super::*;
    use crate::data::{OneHotEncoder, StandardScaler};

    fn frame(rows: usize) -> DataFrame {
        DataFrame::new(
            rows,
            vec![
                Column::new("id".into(), (0..rows as i64).collect::<Vec<_>>()),
                Column::new("x".into(), (0..rows).map(|i| i as f64 * 2.0).collect::<Vec<_>>()),
                Column::new("y".into(), (0..rows).map(|i| (i % 3) as i64).collect::<Vec<_>>()),
            ],
        )
        .unwrap()
    }

    #[test]
    fn frames_and_csv_become_parquet_and_the_schema_is_fitted_on_train() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("valid.csv");
        std::fs::write(&csv, "id,x,y\n0,100.0,1\n1,200.0,2\n").unwrap();
        let mut config = DataConfig::default();
        config.add([
            ("train".into(), Dataset::frame(frame(10))),
            ("valid".into(), Dataset::csv(&csv)),
        ]);
        config.set_columns(Columns::new().features(["x"]).label("y"));
        config.set_preprocessor(StandardScaler::new().into());
        let plan = config.prepare(&dir.path().join(".datasets")).unwrap().unwrap();
        assert_eq!(plan.datasets["train"].rows, 10);
        assert_eq!(plan.datasets["valid"].rows, 2);
        assert!(plan.datasets["valid"].path.ends_with(".datasets/valid.parquet"));
        assert_eq!(plan.schema.model_inputs, ["x"]);
        assert_eq!(plan.schema.label_kind, Some(LabelKind::Class));
        // Fitted on train (x = 0, 2, .., 18: mean 9), not on valid (mean 150).
        let valid = read_rows(&plan.datasets["valid"].path, None, 0..2, "v").unwrap();
        let table = plan.schema.table(&valid, true, "v").unwrap();
        let sd = (33.0f64).sqrt();
        let want = [((100.0 - 9.0) / sd) as f32, ((200.0 - 9.0) / sd) as f32];
        let inputs = plan.schema.inputs(&table, "v").unwrap();
        assert_eq!((table.rows, inputs), (2, want.to_vec()));
        assert_eq!(plan.schema.labels(&table, "v").unwrap(), Labels::Classes(vec![1, 2]));
        // A slice decodes only those rows.
        let rows =
            read_rows(&plan.datasets["train"].path, Some(&["id".into()]), 3..5, "t").unwrap();
        assert_eq!(
            rows.column("id").unwrap().i64().unwrap().into_no_null_iter().collect::<Vec<_>>(),
            [3, 4]
        );
    }

    #[test]
    fn column_mistakes_are_named_before_training() {
        let dir = tempfile::tempdir().unwrap();
        let prepare = |columns: Columns, preprocessor: Option<Preprocessor>| {
            let mut config = DataConfig::default();
            config.add([("train".into(), Dataset::frame(frame(4)))]);
            config.set_columns(columns);
            if let Some(p) = preprocessor {
                config.set_preprocessor(p);
            }
            config.prepare(dir.path()).unwrap_err().to_string()
        };
        let err = prepare(Columns::new().features(["x", "z"]).label("w"), None);
        assert!(
            err.contains("dataset `train` has no column `z`, `w` (its columns: id, x, y)"),
            "{err}"
        );
        let err = prepare(Columns::new().features(["x", "y"]).label("y"), None);
        assert!(err.contains("`y` is both a feature and the label"), "{err}");

        let text = DataFrame::new(
            2,
            vec![Column::new("c".into(), ["a", "b"]), Column::new("y".into(), [0i64, 1])],
        )
        .unwrap();
        let mut config = DataConfig::default();
        config.add([("train".into(), Dataset::frame(text))]);
        config.set_columns(Columns::new().label("y"));
        let err = config.prepare(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("feature `c` of dataset `train` holds strings: add a OneHotEncoder"),
            "{err}"
        );
        config.set_preprocessor(OneHotEncoder::new().into());
        let plan = config.prepare(dir.path()).unwrap().unwrap();
        assert_eq!(plan.schema.model_inputs, ["c=a", "c=b"]);

        let mut config = DataConfig::default();
        config.add([("training".into(), Dataset::parquet(dir.path().join("nope.parquet")))]);
        config.set_preprocessor(StandardScaler::new().into());
        let err = config.prepare(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(
                "fitted on the dataset named `train`, and there is none (datasets: training)"
            ),
            "{err}"
        );
        let mut config = DataConfig::default();
        config.add([("train".into(), Dataset::parquet(dir.path().join("nope.parquet")))]);
        let err = config.prepare(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("dataset `train`: cannot open") && err.contains("nope.parquet"),
            "{err}"
        );
    }
}
