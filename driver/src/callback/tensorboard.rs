//! [`TensorBoardLogger`]: each trial's results as TensorBoard event files in its directory
//! (`events.out.tfevents.<time>.<host>`), one scalar per metric at step `training_iteration`, so
//! `tensorboard --logdir <experiment>` shows every trial side by side, as Ray's TBX logger does.
//!
//! The file format is TensorFlow's: TFRecords (length, masked CRC-32C of the length, the data,
//! its masked CRC-32C) holding `Event` protocol buffers, the first one naming the file version.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use prost::Message;
use rtune_searchers::Metrics;

use super::{Callback, TrialInfo};
use crate::error::{Error, Result};

/// See the module docs.
#[derive(Debug, Default)]
pub struct TensorBoardLogger {
    /// The open event file of each running trial, by its directory.
    files: Mutex<BTreeMap<PathBuf, File>>,
}

impl TensorBoardLogger {
    pub fn new() -> Self {
        TensorBoardLogger::default()
    }

    fn close(&self, trial: &TrialInfo) -> Result<()> {
        let file = self.files.lock().unwrap_or_else(|p| p.into_inner()).remove(&trial.path);
        match file {
            Some(f) => f.sync_data().map_err(|e| Error::io(&trial.path, e)),
            None => Ok(()),
        }
    }
}

impl Callback for TensorBoardLogger {
    fn name(&self) -> String {
        "TensorBoardLogger".into()
    }

    /// Opens a new event file (a trial that goes on after a pause gets another; TensorBoard
    /// reads every file of the directory).
    fn on_trial_start(&self, trial: &TrialInfo) -> Result<()> {
        std::fs::create_dir_all(&trial.path).map_err(|e| Error::io(&trial.path, e))?;
        let now = crate::sys::unix_time();
        let name = format!(
            "events.out.tfevents.{}.{}.{}",
            now as u64,
            crate::sys::hostname(),
            (now.fract() * 1e6) as u64
        );
        let path = trial.path.join(name);
        let mut file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let version = Event {
            wall_time: now,
            step: 0,
            what: Some(What::FileVersion("brain.Event:2".into())),
        };
        write_record(&mut file, &version.encode_to_vec()).map_err(|e| Error::io(&path, e))?;
        self.files.lock().unwrap_or_else(|p| p.into_inner()).insert(trial.path.clone(), file);
        Ok(())
    }

    fn on_trial_result(&self, trial: &TrialInfo, result: &Metrics) -> Result<()> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let Some(file) = files.get_mut(&trial.path) else { return Ok(()) };
        let values = result
            .iter()
            .filter(|(name, v)| v.is_finite() && name.as_str() != "timestamp")
            .map(|(name, &v)| SummaryValue { tag: name.clone(), simple_value: Some(v as f32) })
            .collect();
        let event = Event {
            wall_time: result.get("timestamp").copied().unwrap_or_else(crate::sys::unix_time),
            step: result.get("training_iteration").copied().unwrap_or(0.0) as i64,
            what: Some(What::Summary(Summary { value: values })),
        };
        write_record(file, &event.encode_to_vec()).map_err(|e| Error::io(&trial.path, e))
    }

    fn on_trial_complete(&self, trial: &TrialInfo) -> Result<()> {
        self.close(trial)
    }

    fn on_trial_error(&self, trial: &TrialInfo, _: &str) -> Result<()> {
        self.close(trial)
    }
}

/// TensorFlow's `Event` (the fields rtune writes).
#[derive(Clone, PartialEq, prost::Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(oneof = "What", tags = "3, 5")]
    what: Option<What>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum What {
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

#[derive(Clone, PartialEq, prost::Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

/// `Summary.Value` with its `simple_value` (a oneof member in TensorFlow's schema, so it is
/// written even when it is 0).
#[derive(Clone, PartialEq, prost::Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(float, optional, tag = "2")]
    simple_value: Option<f32>,
}

/// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
fn write_record(out: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    let len = (data.len() as u64).to_le_bytes();
    let mut record = Vec::with_capacity(data.len() + 16);
    record.extend_from_slice(&len);
    record.extend_from_slice(&masked_crc(&len).to_le_bytes());
    record.extend_from_slice(data);
    record.extend_from_slice(&masked_crc(data).to_le_bytes());
    out.write_all(&record)
}

fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// CRC-32C (Castagnoli), bit by bit through a 256-entry table.
fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (i, entry) in table.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0x82f6_3b78 ^ (c >> 1) } else { c >> 1 };
            }
            *entry = c;
        }
        table
    });
    !data.iter().fold(!0u32, |crc, &b| table[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_values() {
        // RFC 3720's check value, and TensorFlow's masked CRC of an empty record's length.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
    }
}
