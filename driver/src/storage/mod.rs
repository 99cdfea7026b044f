//! The on-disk side of a run: atomic file replacement, the Ray-compatible result files
//! (`result.json`, one JSON object a line; `progress.csv`) and checkpoint folders (`checkpoint`).
//! Nothing here knows about workers or schedulers; callers hand it finished rows.
//!
//! Crash safety: a file that is replaced is written to a temporary name in the same folder,
//! fsynced, renamed over the old one and the folder fsynced, so a crash leaves either the old or
//! the new file, never half of one. `result.json` is append-only; `progress.csv` is rewritten
//! whole when a metric first appears late, so no column is silently dropped (Ray drops them).
//!
//! Appended rows are not fsynced one by one, and rows that come fast are held for up to
//! [`FLUSH_EVERY`] and written together: a row handed to the kernel survives the death of any
//! process (driver, worker, node agent), and only an OS crash or a power cut could lose what was
//! not yet synced. [`ResultFiles::sync`] writes the held rows and makes them durable; the
//! driver calls it with every checkpoint and at the end of a run, so the rows a checkpoint
//! resumes from are on disk with it, and a killed driver loses only held rows after its runs'
//! last checkpoints, which a resume redoes. (fsync per row was half the cost of a report.)

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{IoContext, Result};

/// The file a finished sweep leaves its table in (`ResultGrid::dataframe`): a staging copy
/// that holds it is a finished experiment's.
pub const RESULTS_PARQUET: &str = "results.parquet";

pub mod checkpoint;
pub mod remote;
pub mod staging;
pub(crate) mod sync;

/// Runs `f` while holding an exclusive `flock` of the file `path` (made if missing): one
/// process of this machine at a time.
pub(crate) fn locked<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    use std::os::fd::AsRawFd;
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(path).at(path)?;
    // SAFETY: flock on a descriptor this function owns; the lock goes when `file` is closed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(crate::error::Error::io(path, std::io::Error::last_os_error()));
    }
    let out = f();
    drop(file);
    out
}

/// `2026-11-23_11-58-10` (UTC) for seconds since the Unix epoch: Ray's `date` field and the
/// date in trial directory names.
pub fn date_string(unix_seconds: f64) -> String {
    let [year, month, day, hour, minute, second] = crate::sys::utc_fields(unix_seconds);
    format!("{year:04}-{month:02}-{day:02}_{hour:02}-{minute:02}-{second:02}")
}

pub use crate::sys::unix_time;

/// Writes `bytes` to `path` atomically (temp file, fsync, rename, fsync of the folder).
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically(path, bytes, 0o666)
}

/// [`atomic_write`] of what `write` writes, which goes to the file as it is written (through a
/// buffer) instead of being held whole in memory first.
pub(crate) fn atomic_write_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    replace(path, 0o666, true, write)
}

/// [`atomic_write`] of a file only its owner may read and write (one holding a token).
pub fn atomic_write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically(path, bytes, 0o600)
}

/// Replaces `path` with `bytes` atomically for every process (a temporary file renamed over
/// it: a reader sees the old file or the new one, whoever dies when), without making the new
/// file durable: an OS crash may bring back the old one. For files whose durability something
/// else provides ([`ResultFiles::sync`]), or that only order live processes (the attempt
/// fence: after an OS crash no worker is left to fence out). Two fsyncs fewer than
/// [`atomic_write`], which a trial paid several times over on its way in and out.
pub(crate) fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    replace(path, 0o666, false, |w| w.write_all(bytes))
}

/// Writes a temporary file created with `mode` (less the umask), syncs it, renames it over
/// `path` and syncs the folder.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    replace(path, mode, true, |w| w.write_all(bytes))
}

/// Writes a temporary file created with `mode` (less the umask) and renames it over `path`;
/// with `durable`, syncs the file before and the folder after.
fn replace(
    path: &Path,
    mode: u32,
    durable: bool,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".tmp_{name}_{}", std::process::id()));
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .at(&tmp)?;
        let mut buffered = std::io::BufWriter::new(&mut file);
        write(&mut buffered).and_then(|()| buffered.flush()).at(&tmp)?;
        drop(buffered);
        if durable {
            file.sync_all().at(&tmp)?;
        }
    }
    fs::rename(&tmp, path).at(path)?;
    if durable { fsync_dir(dir) } else { Ok(()) }
}

/// Makes a rename or a new entry in `dir` durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// fsyncs every file under `dir` (recursively) and the folders themselves.
pub fn fsync_tree(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).at(dir)? {
        let path = entry.at(dir)?.path();
        if path.is_dir() {
            fsync_tree(&path)?;
        } else {
            File::open(&path).and_then(|f| f.sync_all()).at(&path)?;
        }
    }
    fsync_dir(dir)
}

/// Creates `dir` (and parents) and proves it writable by creating and removing a file in it, so
/// an unwritable storage path fails before any worker starts.
pub(crate) fn ensure_writable_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).at(dir)?;
    let probe = dir.join(format!(".rtune_write_probe_{}", std::process::id()));
    File::create(&probe).at(&probe)?;
    fs::remove_file(&probe).at(&probe)
}

/// One reported row: metric name → value, in column order.
pub(crate) type Row = BTreeMap<String, serde_json::Value>;

/// How often at most a run's appended rows are written out while reports come faster: a row
/// that comes later than this after the last write is written at once, one that comes sooner
/// is held (with the others that come within the same span) and written when the span is up
/// ([`ResultFiles::flush_due`]). One write per file per report was a tenth of the driver's
/// CPU at thousands of reports a second.
/// A run's params (its train function's `train_loop_config`), in its run folder and in an
/// export.
pub const PARAMS_FILE: &str = "params.json";

pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// `result.json` and `progress.csv` of one run or trial.
///
/// Rows are appended to both; rows that come fast are held for up to [`FLUSH_EVERY`] and
/// written together. Held rows are written by [`ResultFiles::flush`] (which the run's owner
/// calls when [`ResultFiles::flush_due`] says), by [`ResultFiles::sync`], before anything reads
/// the files back or replaces their last line, and when the files are dropped. So the files
/// lag the rows by at most that span, and rows held when the driver is killed are rows after
/// the run's last checkpoint (each checkpoint syncs), which a resume redoes anyway.
#[derive(Debug)]
pub(crate) struct ResultFiles {
    json: Appender,
    csv: Appender,
    /// progress.csv's columns, in order: a row's keys, those of a nested object as
    /// `outer/inner` (Ray's flattening, `config/lr`); and the same as a set.
    columns: Vec<String>,
    known: HashSet<String>,
    /// How many rows the files hold, and the last one. The earlier rows are read back from
    /// result.json in the rare case that needs them (a column first seen late), so a long run
    /// keeps one row in memory, not all of them.
    rows: usize,
    last: Option<Row>,
    /// When the files were last written to (None: not yet).
    written: Option<Instant>,
}

/// A file that lines are appended to: opened once for appending, reopened after it was
/// replaced whole; lines may be held back and written later, together.
#[derive(Debug)]
struct Appender {
    path: PathBuf,
    file: Option<File>,
    /// The file's length and where its last line starts (for `put_over_last`), as written.
    len: u64,
    last: u64,
    /// Lines appended but not written yet, and the length of the last of them.
    held: Vec<u8>,
    held_last: usize,
    /// Replaced whole since the last `sync` (the folder's entry is to be synced too).
    replaced: bool,
}

impl Appender {
    fn new(path: PathBuf) -> Self {
        Appender {
            path,
            file: None,
            len: 0,
            last: 0,
            held: Vec::new(),
            held_last: 0,
            replaced: false,
        }
    }

    /// Holds the line that `write` appends to the buffer it is given.
    fn hold_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.held.len();
        write(&mut self.held);
        self.held_last = self.held.len() - start;
    }

    /// Writes the held lines.
    fn flush(&mut self) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let mut held = std::mem::take(&mut self.held);
        let written = match self.opened() {
            Ok(f) => f.write_all(&held).at(&self.path),
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            self.held = held; // still to be written
            return Err(e);
        }
        self.last = self.len + (held.len() - self.held_last) as u64;
        self.len += held.len() as u64;
        held.clear();
        self.held = held; // its buffer, for the next lines
        Ok(())
    }

    /// The file, opened for appending first if it is not yet (its length learnt then).
    fn opened(&mut self) -> Result<&mut File> {
        if self.file.is_none() {
            let path = &self.path;
            let f = OpenOptions::new().create(true).append(true).open(path).at(path)?;
            self.len = f.metadata().at(path)?.len();
            self.file = Some(f);
        }
        Ok(self.file.as_mut().expect("opened above"))
    }

    /// Writes `line` over the file's last line (at once, after any held lines).
    fn put_over_last(&mut self, line: &[u8]) -> Result<()> {
        self.flush()?;
        let last = self.last;
        self.opened()?.set_len(last).at(&self.path)?;
        self.len = last;
        self.hold_with(|out| out.extend_from_slice(line));
        self.flush()
    }

    /// Replaces the file with `text`, whose last line is `last_line` bytes long (atomically;
    /// held lines are dropped: `text` is the whole file). Durable with the next `sync`.
    fn replace(&mut self, text: &[u8], last_line: usize) -> Result<()> {
        self.held.clear();
        replace_file(&self.path, text)?;
        self.replaced = true;
        self.file = None;
        self.len = text.len() as u64;
        self.last = (text.len() - last_line) as u64;
        Ok(())
    }

    /// fsyncs what was written, and the folder's entry if the file was replaced since.
    fn sync(&mut self) -> Result<()> {
        self.sync_data()?;
        if std::mem::take(&mut self.replaced) {
            fsync_dir(self.path.parent().unwrap_or(Path::new(".")))?;
        }
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        let opened;
        let file = match &self.file {
            Some(f) => f,
            None => match File::open(&self.path) {
                Ok(f) => {
                    opened = f;
                    &opened
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(crate::error::Error::io(&self.path, e)),
            },
        };
        file.sync_data().at(&self.path)
    }
}

impl ResultFiles {
    pub(crate) const RESULT_JSON: &'static str = "result.json";
    pub(crate) const PROGRESS_CSV: &'static str = "progress.csv";

    pub fn new(dir: &Path) -> Self {
        ResultFiles {
            json: Appender::new(dir.join(Self::RESULT_JSON)),
            csv: Appender::new(dir.join(Self::PROGRESS_CSV)),
            columns: Vec::new(),
            known: HashSet::new(),
            rows: 0,
            last: None,
            written: None,
        }
    }

    /// Appends one row to both files: written at once, or held until `flush_due`.
    pub fn append(&mut self, row: Row) -> Result<()> {
        self.json.hold_with(|out| json_line(&row, out));
        // A row shaped as the last one (the usual case) has no column the table lacks.
        let added = !self.last.as_ref().is_some_and(|last| same_columns(last, &row))
            && self.add_columns(&row);
        self.rows += 1;
        // The header is written with the first row (and again when a column is added, with
        // every row read back from result.json).
        let first = self.rows == 1;
        if first {
            self.write_csv(std::slice::from_ref(&row))?;
        }
        self.last = Some(row);
        match (first, added) {
            (true, _) => {}
            (false, true) => self.rewrite_csv()?,
            (false, false) => {
                let (columns, last) = (&self.columns, self.last.as_ref());
                self.csv.hold_with(|out| csv_row(columns, last, out));
            }
        }
        if self.written.is_none_or(|at| at.elapsed() >= FLUSH_EVERY) {
            self.flush()
        } else {
            Ok(())
        }
    }

    /// When held rows are due to be written (None when none are held).
    pub(crate) fn flush_due(&self) -> Option<Instant> {
        let held = !self.json.held.is_empty() || !self.csv.held.is_empty();
        held.then(|| self.written.map_or_else(Instant::now, |at| at + FLUSH_EVERY))
    }

    /// Writes the held rows.
    pub fn flush(&mut self) -> Result<()> {
        self.json.flush()?;
        self.csv.flush()?;
        self.written = Some(Instant::now());
        Ok(())
    }

    /// The rows of `dir/result.json`, oldest first (none when there is no file). A last line
    /// cut short by a process killed mid-write is left out; any other unreadable line is an
    /// error naming the file and the line.
    pub fn read_rows(dir: &Path) -> Result<Vec<Row>> {
        read_rows_at(&dir.join(Self::RESULT_JSON))
    }

    /// Writes the held rows and fsyncs both files: every row appended so far survives an OS
    /// crash too.
    pub fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.json.sync()?;
        self.csv.sync()
    }

    /// Replaces both files with `rows` (used when a run rolls back to a checkpoint, so the files
    /// hold each iteration once).
    pub(crate) fn rewrite(&mut self, rows: Vec<Row>) -> Result<()> {
        let mut json = Vec::new();
        let mut last_line = 0;
        for row in &rows {
            let start = json.len();
            json_line(row, &mut json);
            last_line = json.len() - start;
        }
        self.json.replace(&json, last_line)?;
        self.columns.clear();
        self.known.clear();
        for row in &rows {
            self.add_columns(row);
        }
        self.write_csv(&rows)?;
        self.rows = rows.len();
        self.last = rows.into_iter().last();
        Ok(())
    }

    /// Writes progress.csv anew from result.json (which holds the latest row, once written),
    /// as when a column is added.
    fn rewrite_csv(&mut self) -> Result<()> {
        self.json.flush()?;
        let rows = read_rows_at(&self.json.path)?;
        self.write_csv(&rows)
    }

    fn write_csv(&mut self, rows: &[Row]) -> Result<()> {
        let mut text = Vec::new();
        for (i, column) in self.columns.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            push_cell(&mut text, column.as_bytes());
        }
        text.push(b'\n');
        let mut last_line = 0;
        for row in rows {
            let start = text.len();
            csv_row(&self.columns, Some(row), &mut text);
            last_line = text.len() - start;
        }
        self.csv.replace(&text, last_line)
    }

    /// Replaces the last row in both files (cutting it off and appending `row`), as when a
    /// run's last row becomes `done`.
    pub(crate) fn replace_last(&mut self, row: Row) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut line = Vec::new();
        json_line(&row, &mut line);
        self.json.put_over_last(&line)?;
        let added = self.add_columns(&row);
        self.last = Some(row);
        if added {
            self.rewrite_csv()
        } else {
            let mut line = Vec::new();
            csv_row(&self.columns, self.last.as_ref(), &mut line);
            self.csv.put_over_last(&line)
        }
    }

    /// The last row appended (or put in place of the last).
    pub(crate) fn last_row(&self) -> Option<&Row> {
        self.last.as_ref()
    }

    /// Adds `row`'s columns that the table lacks, in the order of their names (as a first
    /// row's header has them); whether there were any.
    fn add_columns(&mut self, row: &Row) -> bool {
        let mut new = Vec::new();
        for_each_column(row, &mut |name| {
            if !self.known.contains(name) {
                new.push(name.to_owned());
            }
        });
        if new.is_empty() {
            return false;
        }
        new.sort();
        new.dedup();
        self.known.extend(new.iter().cloned());
        self.columns.extend(new);
        true
    }
}

impl Drop for ResultFiles {
    /// Held rows are written, not lost, when a run's record goes away without a last flush
    /// (an error ended its loop); an error here has nowhere to go but the log.
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!("result rows held for writing were lost: {e}");
        }
    }
}

/// Appends `row` as a line of result.json.
fn json_line(row: &Row, out: &mut Vec<u8>) {
    serde_json::to_writer(&mut *out, row).expect("a map of JSON values serialises");
    out.push(b'\n');
}

/// The rows of the result.json at `path` (see [`ResultFiles::read_rows`]).
fn read_rows_at(path: &Path) -> Result<Vec<Row>> {
    read_lines_at(path)
}

/// The lines of the result.json at `path`, each read as a `T` (a [`Row`], or only the fields
/// a reader needs, which is several times faster than building every row's JSON values);
/// the same rules as [`ResultFiles::read_rows`].
pub(crate) fn read_lines_at<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(crate::error::Error::io(path, e)),
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut rows = Vec::with_capacity(lines.len());
    for (n, line) in lines.iter().enumerate() {
        match serde_json::from_str::<T>(line) {
            Ok(row) => rows.push(row),
            Err(_) if n + 1 == lines.len() && !text.ends_with('\n') => break,
            Err(e) => {
                return Err(crate::error::Error::io(
                    path,
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("line {} is not a JSON object: {e}", n + 1),
                    ),
                ));
            }
        }
    }
    Ok(rows)
}

/// Calls `f` with each of `row`'s column names: a nested object's values are columns of
/// their own, `outer/inner`, as in Ray's `progress.csv` (`config/lr`); an empty one is a
/// column.
fn for_each_column(row: &Row, f: &mut impl FnMut(&str)) {
    fn walk(name: &mut String, value: &serde_json::Value, f: &mut impl FnMut(&str)) {
        let Some(map) = nested(value) else { return f(name) };
        for (key, value) in map {
            let len = name.len();
            name.push('/');
            name.push_str(key);
            walk(name, value, f);
            name.truncate(len);
        }
    }
    let mut name = String::new();
    for (key, value) in row {
        name.clear();
        name.push_str(key);
        walk(&mut name, value, f);
    }
}

/// The object whose values are columns of their own (see [`for_each_column`]): a non-empty one.
fn nested(value: &serde_json::Value) -> Option<&serde_json::Map<String, serde_json::Value>> {
    value.as_object().filter(|m| !m.is_empty())
}

/// Whether two rows have the same columns (see [`for_each_column`]), found without making
/// their names.
fn same_columns(a: &Row, b: &Row) -> bool {
    fn same<'v>(
        a: impl ExactSizeIterator<Item = (&'v String, &'v serde_json::Value)>,
        b: impl ExactSizeIterator<Item = (&'v String, &'v serde_json::Value)>,
    ) -> bool {
        a.len() == b.len()
            && a.zip(b).all(|((ka, va), (kb, vb))| {
                ka == kb
                    && match (nested(va), nested(vb)) {
                        (Some(x), Some(y)) => same(x.iter(), y.iter()),
                        (None, None) => true,
                        _ => false,
                    }
            })
    }
    same(a.iter(), b.iter())
}

/// The value of `row` in `column` (see [`for_each_column`]), without flattening the row: a key
/// that is the whole name, or one that ends at a `/` and holds an object to look further in.
fn column_value<'r>(row: &'r Row, column: &str) -> Option<&'r serde_json::Value> {
    fn find<'v>(
        get: &dyn Fn(&str) -> Option<&'v serde_json::Value>,
        column: &str,
    ) -> Option<&'v serde_json::Value> {
        if let Some(v) = get(column).filter(|v| nested(v).is_none()) {
            return Some(v);
        }
        column.match_indices('/').find_map(|(at, _)| match get(&column[..at]) {
            Some(serde_json::Value::Object(inner)) => find(&|k| inner.get(k), &column[at + 1..]),
            _ => None,
        })
    }
    find(&|k| row.get(k), column)
}

/// Appends `row` (None: an empty one) as a line of progress.csv in `columns`.
fn csv_row(columns: &[String], row: Option<&Row>, out: &mut Vec<u8>) {
    let mut scratch = Vec::new();
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match row.and_then(|r| column_value(r, column)) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(s)) => push_cell(out, s.as_bytes()),
            Some(v) => {
                scratch.clear();
                serde_json::to_writer(&mut scratch, v).expect("a JSON value serialises");
                push_cell(out, &scratch);
            }
        }
    }
    out.push(b'\n');
}

/// Appends one CSV cell, quoted where it holds a separator, a quote or a line break.
fn push_cell(out: &mut Vec<u8>, cell: &[u8]) {
    if cell.iter().any(|b| matches!(b, b',' | b'"' | b'\n')) {
        out.push(b'"');
        for &b in cell {
            if b == b'"' {
                out.push(b'"');
            }
            out.push(b);
        }
        out.push(b'"');
    } else {
        out.extend_from_slice(cell);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(pairs: &[(&str, serde_json::Value)]) -> Row {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn the_last_row_is_replaced_in_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ResultFiles::new(dir.path());
        for i in 1..=3 {
            files.append(row(&[("loss", json!(i)), ("done", json!(false))])).unwrap();
        }
        files.replace_last(row(&[("loss", json!(3)), ("done", json!(true))])).unwrap();
        files.append(row(&[("loss", json!(4)), ("done", json!(false))])).unwrap();
        files.replace_last(row(&[("loss", json!(4)), ("done", json!(true))])).unwrap();
        let csv = fs::read_to_string(dir.path().join("progress.csv")).unwrap();
        assert_eq!(csv, "done,loss\nfalse,1\nfalse,2\ntrue,3\ntrue,4\n");
        let json = fs::read_to_string(dir.path().join("result.json")).unwrap();
        assert_eq!(json.lines().count(), 4);
        assert_eq!(json.lines().last().unwrap(), r#"{"done":true,"loss":4}"#);
        assert_eq!(ResultFiles::read_rows(dir.path()).unwrap()[2]["done"], json!(true));
    }

    #[test]
    fn late_metric_gets_its_column_and_earlier_rows_stay() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ResultFiles::new(dir.path());
        files.append(row(&[("loss", json!(1.5)), ("training_iteration", json!(1))])).unwrap();
        files
            .append(row(&[
                ("acc", json!(0.5)),
                ("loss", json!(1.0)),
                ("training_iteration", json!(2)),
            ]))
            .unwrap();
        files.append(row(&[("loss", json!(0.5)), ("training_iteration", json!(3))])).unwrap();
        files.flush().unwrap();
        let csv = fs::read_to_string(dir.path().join("progress.csv")).unwrap();
        assert_eq!(csv, "loss,training_iteration,acc\n1.5,1,\n1.0,2,0.5\n0.5,3,\n");
        let json = fs::read_to_string(dir.path().join("result.json")).unwrap();
        assert_eq!(json.lines().count(), 3);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(json.lines().nth(1).unwrap()).unwrap(),
            json!({"acc": 0.5, "loss": 1.0, "training_iteration": 2})
        );
    }

    #[test]
    fn nested_values_are_columns_in_the_csv_and_objects_in_the_json() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ResultFiles::new(dir.path());
        let config = json!({"lr": 0.1, "model": {"width": 64}});
        files.append(row(&[("loss", json!(1.5)), ("config", config.clone())])).unwrap();
        let csv = fs::read_to_string(dir.path().join("progress.csv")).unwrap();
        assert_eq!(csv, "config/lr,config/model/width,loss\n0.1,64,1.5\n");
        let json = fs::read_to_string(dir.path().join("result.json")).unwrap();
        let back: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(back["config"], config);
    }

    /// Column names with a `/` of their own, an empty nested object and cells that need
    /// quoting read as Ray's flattening gives them; a row lacking a column leaves it empty.
    #[test]
    fn slashed_names_empty_objects_and_quoted_cells_in_the_csv() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ResultFiles::new(dir.path());
        let config = json!({"opt": "adam,w", "extra": {}, "net": {"depth": 2}});
        files
            .append(row(&[
                ("val/loss", json!(0.5)),
                ("config", config),
                ("note", json!("say \"hi\"")),
                ("tags", json!([1, 2])),
            ]))
            .unwrap();
        files.append(row(&[("val/loss", json!(0.25))])).unwrap();
        files.flush().unwrap();
        let csv = fs::read_to_string(dir.path().join("progress.csv")).unwrap();
        assert_eq!(
            csv,
            "config/extra,config/net/depth,config/opt,note,tags,val/loss\n\
             {},2,\"adam,w\",\"say \"\"hi\"\"\",\"[1,2]\",0.5\n\
             ,,,,,0.25\n"
        );
    }

    /// Rows are told to have the columns of the last one (no column to add) only when every
    /// name, nested ones too, is the same.
    #[test]
    fn rows_with_the_same_columns_are_told_from_others() {
        let a = row(&[("x", json!(1)), ("config", json!({"lr": 0.1, "m": {"w": 1}}))]);
        let same = row(&[("x", json!("s")), ("config", json!({"lr": 0.5, "m": {"w": 2}}))]);
        assert!(same_columns(&a, &same));
        for other in [
            row(&[("x", json!(1))]),
            row(&[("x", json!(1)), ("config", json!({"lr": 0.1, "m": {"w": 1, "d": 2}}))]),
            row(&[("x", json!(1)), ("config", json!({"lr": 0.1, "m": 3}))]),
            row(&[("x", json!(1)), ("config", json!({}))]),
            row(&[("y", json!(1)), ("config", json!({"lr": 0.1, "m": {"w": 1}}))]),
        ] {
            assert!(!same_columns(&a, &other), "{other:?}");
        }
        // An empty object is a column of its own, as a number is.
        assert!(same_columns(&row(&[("c", json!({}))]), &row(&[("c", json!(2))])));
    }

    /// Rows that come within FLUSH_EVERY of the last write are held, due when that span is up,
    /// and written by `flush`, by `sync`, and when the files are dropped; replacing the last
    /// row writes the held ones first.
    #[test]
    fn rows_that_come_fast_are_held_and_written_together() {
        let dir = tempfile::tempdir().unwrap();
        let lines = |name| fs::read_to_string(dir.path().join(name)).unwrap().lines().count();
        let mut files = ResultFiles::new(dir.path());
        let started = Instant::now();
        files.append(row(&[("training_iteration", json!(1))])).unwrap();
        assert_eq!(files.flush_due(), None, "the first row is written at once");
        files.append(row(&[("training_iteration", json!(2))])).unwrap();
        files.append(row(&[("training_iteration", json!(3))])).unwrap();
        if started.elapsed() < FLUSH_EVERY {
            let due = files.flush_due().expect("rows 2 and 3 are held");
            assert!(due > started && due <= Instant::now() + FLUSH_EVERY);
            assert_eq!((lines(ResultFiles::RESULT_JSON), lines(ResultFiles::PROGRESS_CSV)), (1, 2));
        }
        files.flush().unwrap();
        assert_eq!(files.flush_due(), None);
        assert_eq!((lines(ResultFiles::RESULT_JSON), lines(ResultFiles::PROGRESS_CSV)), (3, 4));

        files.append(row(&[("training_iteration", json!(4))])).unwrap();
        files.replace_last(row(&[("training_iteration", json!(5))])).unwrap();
        let json = fs::read_to_string(dir.path().join(ResultFiles::RESULT_JSON)).unwrap();
        assert!(json.ends_with("{\"training_iteration\":3}\n{\"training_iteration\":5}\n"));

        files.append(row(&[("training_iteration", json!(6))])).unwrap();
        files.sync().unwrap();
        assert_eq!(lines(ResultFiles::RESULT_JSON), 5);
        files.append(row(&[("training_iteration", json!(7))])).unwrap();
        drop(files);
        assert_eq!((lines(ResultFiles::RESULT_JSON), lines(ResultFiles::PROGRESS_CSV)), (6, 7));
    }

    #[test]
    fn rewrite_replaces_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ResultFiles::new(dir.path());
        for i in 1..=4 {
            files.append(row(&[("training_iteration", json!(i))])).unwrap();
        }
        files.rewrite(vec![row(&[("training_iteration", json!(1))])]).unwrap();
        let json = fs::read_to_string(dir.path().join("result.json")).unwrap();
        assert_eq!(json, "{\"training_iteration\":1}\n");
        let csv = fs::read_to_string(dir.path().join("progress.csv")).unwrap();
        assert_eq!(csv, "training_iteration\n1\n");
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        atomic_write(&path, b"one").unwrap();
        atomic_write(&path, b"two").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
