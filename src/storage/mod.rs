//! The on-disk side of a run: atomic file replacement, the Ray-compatible result files
//! (`result.json`, one JSON object a line; `progress.csv`) and checkpoint folders (`checkpoint`).
//! Nothing here knows about workers or schedulers; callers hand it finished rows.
//!
//! Crash safety: a file that is replaced is written to a temporary name in the same folder,
//! fsynced, renamed over the old one and the folder fsynced, so a crash leaves either the old or
//! the new file, never half of one. `result.json` is append-only; `progress.csv` is rewritten
//! whole when a metric first appears late, so no column is silently dropped (Ray drops them).
//!
//! Appended rows are written at once but not fsynced one by one: a row handed to the kernel
//! survives the death of any process (driver, worker, node agent), and only an OS crash or a
//! power cut could lose what was not yet synced. [`ResultFiles::sync`] makes the rows durable;
//! the driver calls it with every checkpoint and at the end of a run, so the rows a checkpoint
//! resumes from are on disk with it. (fsync per row was half the cost of a report.)

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

pub mod checkpoint;

/// `2026-11-23_11-58-10` (UTC) for seconds since the Unix epoch: Ray's `date` field and the
/// date in trial directory names.
pub fn date_string(unix_seconds: f64) -> String {
    let t = unix_seconds as i64;
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}_{:02}-{:02}-{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

pub use crate::sys::unix_time;

/// Writes `bytes` to `path` atomically (temp file, fsync, rename, fsync of the folder).
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically(path, bytes, 0o666)
}

/// [`atomic_write`] of a file only its owner may read and write (one holding a token).
pub fn atomic_write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically(path, bytes, 0o600)
}

/// Writes a temporary file created with `mode` (less the umask), syncs it, renames it over
/// `path` and syncs the folder.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
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
        file.write_all(bytes).at(&tmp)?;
        file.sync_all().at(&tmp)?;
    }
    fs::rename(&tmp, path).at(path)?;
    fsync_dir(dir)
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
pub fn ensure_writable_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).at(dir)?;
    let probe = dir.join(format!(".rtune_write_probe_{}", std::process::id()));
    File::create(&probe).at(&probe)?;
    fs::remove_file(&probe).at(&probe)
}

/// One reported row: metric name → value, in column order.
pub type Row = BTreeMap<String, serde_json::Value>;

/// `result.json` and `progress.csv` of one run or trial.
#[derive(Debug)]
pub struct ResultFiles {
    json_path: PathBuf,
    csv_path: PathBuf,
    columns: Vec<String>,
    /// How many rows the files hold, and the last one (flattened). The earlier rows are read
    /// back from result.json in the rare case that needs them (a column first seen late), so a
    /// long run keeps one row in memory, not all of them.
    rows: usize,
    last: Option<Row>,
    /// The files as opened for appending (reopened after a rewrite replaced them).
    json: Option<File>,
    csv: Option<File>,
    /// Each file's length and where its last line starts (for `replace_last`).
    json_end: Ends,
    csv_end: Ends,
}

/// A file's length and the offset of its last line.
#[derive(Debug, Default, Clone, Copy)]
struct Ends {
    len: u64,
    last: u64,
}

impl Ends {
    fn appended(&mut self, bytes: usize) {
        self.last = self.len;
        self.len += bytes as u64;
    }

    /// After writing `text` whole, whose last line is `last_line`.
    fn whole(text: &str, last_line: usize) -> Ends {
        Ends { len: text.len() as u64, last: (text.len() - last_line) as u64 }
    }
}

/// `file`, opened for appending first if it is not yet (`ends` then learns its length).
fn appending<'a>(file: &'a mut Option<File>, path: &Path, ends: &mut Ends) -> Result<&'a mut File> {
    if file.is_none() {
        let f = OpenOptions::new().create(true).append(true).open(path).at(path)?;
        ends.len = f.metadata().at(path)?.len();
        *file = Some(f);
    }
    Ok(file.as_mut().expect("opened above"))
}

impl ResultFiles {
    pub const RESULT_JSON: &'static str = "result.json";
    pub const PROGRESS_CSV: &'static str = "progress.csv";

    pub fn new(dir: &Path) -> Self {
        ResultFiles {
            json_path: dir.join(Self::RESULT_JSON),
            csv_path: dir.join(Self::PROGRESS_CSV),
            columns: Vec::new(),
            rows: 0,
            last: None,
            json: None,
            csv: None,
            json_end: Ends::default(),
            csv_end: Ends::default(),
        }
    }

    /// Appends one row to both files.
    pub fn append(&mut self, row: Row) -> Result<()> {
        self.put_json_line(&row, false)?;
        let row = flatten(row);
        let added = self.add_columns(&row);
        self.rows += 1;
        // The header is written with the first row (and again when a column is added, with
        // every row read back from result.json).
        let first = self.rows == 1;
        if first {
            self.write_csv(std::slice::from_ref(&row))?;
        }
        self.last = Some(row);
        match (first, added) {
            (true, _) => Ok(()),
            (false, true) => self.rewrite_csv(),
            (false, false) => self.put_csv_line(false),
        }
    }

    /// The rows of `dir/result.json`, oldest first (none when there is no file). A last line
    /// cut short by a process killed mid-write is left out; any other unreadable line is an
    /// error naming the file and the line.
    pub fn read_rows(dir: &Path) -> Result<Vec<Row>> {
        read_rows_at(&dir.join(Self::RESULT_JSON))
    }

    /// fsyncs both files: every row appended so far survives an OS crash too.
    pub fn sync(&self) -> Result<()> {
        for path in [&self.json_path, &self.csv_path] {
            match File::open(path) {
                Ok(f) => f.sync_data().at(path)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(crate::error::Error::io(path, e)),
            }
        }
        Ok(())
    }

    /// Replaces both files with `rows` (used when a run rolls back to a checkpoint, so the files
    /// hold each iteration once).
    pub fn rewrite(&mut self, rows: Vec<Row>) -> Result<()> {
        let mut json = String::new();
        let mut last_line = 0;
        for row in &rows {
            let before = json.len();
            json.push_str(&serde_json::to_string(row).expect("a map of JSON values serialises"));
            json.push('\n');
            last_line = json.len() - before;
        }
        atomic_write(&self.json_path, json.as_bytes())?;
        self.json = None;
        self.json_end = Ends::whole(&json, last_line);
        let rows: Vec<Row> = rows.into_iter().map(flatten).collect();
        self.columns.clear();
        for row in &rows {
            self.add_columns(row);
        }
        self.write_csv(&rows)?;
        self.rows = rows.len();
        self.last = rows.into_iter().last();
        Ok(())
    }

    /// Writes progress.csv anew from result.json (which already holds the latest row), as when
    /// a column is added.
    fn rewrite_csv(&mut self) -> Result<()> {
        let rows: Vec<Row> = read_rows_at(&self.json_path)?.into_iter().map(flatten).collect();
        self.write_csv(&rows)
    }

    fn write_csv(&mut self, rows: &[Row]) -> Result<()> {
        self.csv = None;
        let mut text = csv_line(self.columns.iter().cloned());
        let mut last_line = 0;
        for row in rows {
            let line = csv_line(self.columns.iter().map(|c| cell(Some(row), c)));
            last_line = line.len();
            text.push_str(&line);
        }
        atomic_write(&self.csv_path, text.as_bytes())?;
        self.csv_end = Ends::whole(&text, last_line);
        Ok(())
    }

    /// Replaces the last row in both files (cutting it off and appending `row`), as when a
    /// run's last row becomes `done`.
    pub fn replace_last(&mut self, row: Row) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        self.put_json_line(&row, true)?;
        let row = flatten(row);
        let added = self.add_columns(&row);
        self.last = Some(row);
        if added { self.rewrite_csv() } else { self.put_csv_line(true) }
    }

    /// Adds `row`'s columns that the table lacks, in its order; whether there were any.
    fn add_columns(&mut self, row: &Row) -> bool {
        let before = self.columns.len();
        for key in row.keys() {
            if !self.columns.contains(key) {
                self.columns.push(key.clone());
            }
        }
        self.columns.len() > before
    }

    /// Writes `row` as result.json's last line: appended, or over the last one.
    fn put_json_line(&mut self, row: &Row, over_last: bool) -> Result<()> {
        let mut line = serde_json::to_string(row).expect("a map of JSON values serialises");
        line.push('\n');
        put_line(&mut self.json, &self.json_path, &mut self.json_end, &line, over_last)
    }

    /// Writes the last row as progress.csv's last line: appended, or over the last one.
    fn put_csv_line(&mut self, over_last: bool) -> Result<()> {
        let line = csv_line(self.columns.iter().map(|c| cell(self.last.as_ref(), c)));
        put_line(&mut self.csv, &self.csv_path, &mut self.csv_end, &line, over_last)
    }
}

/// The rows of the result.json at `path` (see [`ResultFiles::read_rows`]).
fn read_rows_at(path: &Path) -> Result<Vec<Row>> {
    read_lines_at(path)
}

/// The lines of the result.json at `path`, each read as a `T` (a [`Row`], or only the fields
/// a reader needs, which is several times faster than building every row's JSON values);
/// the same rules as [`ResultFiles::read_rows`].
pub fn read_lines_at<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
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

/// Appends `line` to the file (cutting its last line off first with `over_last`).
fn put_line(
    file: &mut Option<File>,
    path: &Path,
    ends: &mut Ends,
    line: &str,
    over_last: bool,
) -> Result<()> {
    let f = appending(file, path, ends)?;
    if over_last {
        f.set_len(ends.last).at(path)?;
        ends.len = ends.last;
    }
    f.write_all(line.as_bytes()).at(path)?;
    ends.appended(line.len());
    Ok(())
}

/// Nested objects become `outer/inner` columns, as in Ray's `progress.csv` (`config/lr`).
fn flatten(row: Row) -> Row {
    fn walk(prefix: &str, value: serde_json::Value, out: &mut Row) {
        match value {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    walk(&format!("{prefix}/{k}"), v, out);
                }
            }
            other => {
                out.insert(prefix.to_owned(), other);
            }
        }
    }
    let mut out = Row::new();
    for (k, v) in row {
        walk(&k, v, &mut out);
    }
    out
}

fn cell(row: Option<&Row>, column: &str) -> String {
    match row.and_then(|r| r.get(column)) {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

fn csv_line(cells: impl Iterator<Item = String>) -> String {
    let mut line = cells
        .map(|c| {
            if c.contains([',', '"', '\n']) { format!("\"{}\"", c.replace('"', "\"\"")) } else { c }
        })
        .collect::<Vec<_>>()
        .join(",");
    line.push('\n');
    line
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
