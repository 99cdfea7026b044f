//! What a train function reports: named numbers. Anything else (a string, a nested object) is a
//! clear error at the `report` call, not a surprise in the result table.

use crate::error::{Error, Result};

/// Metric name → value, the searchers' own type: what a train function reports is exactly what
/// schedulers and searchers read. NaN and infinities are allowed (a diverged run reports them).
pub use rtune_searchers::Metrics;

/// Names rtune adds to every report; a train function may not set them.
pub const AUTO_METRICS: [&str; 5] =
    ["training_iteration", "time_total_s", "time_this_iter_s", "timestamp", "checkpoint_dir_name"];

/// Names rtune adds to a report where the workers measured them: rank 0's time (see
/// [`add_rank_figures`]); with several ranks, each rank's is under `ranks/R/`.
pub(crate) const RANK_METRICS: [&str; 5] =
    ["time_step_s", "time_data_s", "time_collective_s", "gpu_utilization", "gpu_memory_bytes"];

/// Names rtune adds to a report of how the run went around its steps (rank 0's figures; see
/// [`add_run_figures`]): the time the previous report kept the train function waiting, the
/// checkpoint the report carries, the uploads that ended, and the report's wait for an earlier
/// checkpoint's upload (uploads behind the checkpoints).
pub(crate) const RUN_METRICS: [&str; 5] = [
    "time_report_s",
    "checkpoint_bytes",
    "time_checkpoint_write_s",
    "time_checkpoint_upload_s",
    "time_checkpoint_wait_s",
];

/// Names rtune adds to the first report of each attempt: how its worker group started (see
/// [`add_group_start`]).
pub(crate) const START_METRICS: [&str; 4] =
    ["group_attempt", "time_group_reserve_s", "time_group_spawn_s", "time_group_join_s"];

/// Names rtune adds to every report of a run with its group's shape: `world_size` (the ranks
/// the report came from) and, once an elastic group resized, `group_resizes` (how many times).
pub const GROUP_METRICS: [&str; 2] = ["world_size", "group_resizes"];

/// Whether rtune, not the train function, puts `name` into reports.
pub(crate) fn added_by_rtune(name: &str) -> bool {
    AUTO_METRICS.contains(&name) || is_figure(name)
}

/// Whether `name` is one of the figures rtune measures around the train function: the ranks'
/// ([`add_rank_figures`]), the run's ([`add_run_figures`]) or its group's start
/// ([`add_group_start`]).
pub fn is_figure(name: &str) -> bool {
    RANK_METRICS.contains(&name)
        || name.starts_with("ranks/")
        || RUN_METRICS.contains(&name)
        || START_METRICS.contains(&name)
        || GROUP_METRICS.contains(&name)
}

/// What rank 0 measured around its steps since the last report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunFigures {
    /// How long the previous report kept the train function waiting.
    pub report_s: f64,
    /// The checkpoint this report carries (0: none): its bytes, and the train function's time
    /// writing it (from `new_checkpoint` to its commit).
    pub checkpoint_bytes: f64,
    pub checkpoint_write_s: f64,
    /// The time of the uploads to the run's store that ended since the last report.
    pub checkpoint_upload_s: f64,
    /// How long this report waited for an earlier checkpoint's background upload.
    pub checkpoint_wait_s: f64,
}

impl From<&crate::proto::RankTimes> for RunFigures {
    fn from(t: &crate::proto::RankTimes) -> Self {
        RunFigures {
            report_s: t.report_s,
            checkpoint_bytes: t.checkpoint_bytes as f64,
            checkpoint_write_s: t.checkpoint_write_s,
            checkpoint_upload_s: t.checkpoint_upload_s,
            checkpoint_wait_s: t.checkpoint_wait_s,
        }
    }
}

/// Writes rank 0's figures around its steps into a report's metrics: `time_report_s` always,
/// the checkpoint's where the report carries one, the uploads' where some ended. A metric the
/// train function reported under one of these names is kept as it reported it.
pub(crate) fn add_run_figures(metrics: &mut Metrics, f: &RunFigures) {
    let [report, bytes, write, upload, wait] = RUN_METRICS;
    metrics.entry(report.into()).or_insert(f.report_s);
    if f.checkpoint_bytes > 0.0 {
        metrics.entry(bytes.into()).or_insert(f.checkpoint_bytes);
        metrics.entry(write.into()).or_insert(f.checkpoint_write_s);
    }
    if f.checkpoint_upload_s > 0.0 {
        metrics.entry(upload.into()).or_insert(f.checkpoint_upload_s);
    }
    if f.checkpoint_wait_s > 0.0 {
        metrics.entry(wait.into()).or_insert(f.checkpoint_wait_s);
    }
}

/// Rank 0's figures around its steps, as [`add_run_figures`] wrote them (0 where absent).
pub fn run_figures(metrics: &Metrics) -> RunFigures {
    let [report, bytes, write, upload, wait] = RUN_METRICS.map(|k| metrics.get(k).copied());
    RunFigures {
        report_s: report.unwrap_or(0.0),
        checkpoint_bytes: bytes.unwrap_or(0.0),
        checkpoint_write_s: write.unwrap_or(0.0),
        checkpoint_upload_s: upload.unwrap_or(0.0),
        checkpoint_wait_s: wait.unwrap_or(0.0),
    }
}

/// How an attempt's worker group started: its resources reserved (waiting for them
/// included), its processes started, and every rank joined.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GroupStart {
    /// The run's attempt (0 first).
    pub attempt: u32,
    pub reserve_s: f64,
    pub spawn_s: f64,
    pub join_s: f64,
}

impl GroupStart {
    /// The whole start: reserve, spawn and join.
    pub fn total_s(&self) -> f64 {
        self.reserve_s + self.spawn_s + self.join_s
    }
}

/// Writes how the attempt's group started into (the first of its) report's metrics.
pub(crate) fn add_group_start(metrics: &mut Metrics, start: &GroupStart) {
    let values = [f64::from(start.attempt), start.reserve_s, start.spawn_s, start.join_s];
    for (key, value) in START_METRICS.into_iter().zip(values) {
        metrics.entry(key.into()).or_insert(value);
    }
}

/// How the attempt's group started, where a report's metrics say it (its first ones).
pub fn group_start(metrics: &Metrics) -> Option<GroupStart> {
    let [attempt, reserve, spawn, join] = START_METRICS.map(|k| metrics.get(k).copied());
    Some(GroupStart {
        attempt: attempt? as u32,
        reserve_s: reserve.unwrap_or(0.0),
        spawn_s: spawn.unwrap_or(0.0),
        join_s: join.unwrap_or(0.0),
    })
}

/// A rank's time between two reports, as a report's metrics hold it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RankFigures {
    /// The train function's time from the last report's return to this report.
    pub step_s: f64,
    /// The part of it spent waiting for the next batch.
    pub data_s: f64,
    /// The part of it spent in collectives.
    pub collective_s: f64,
    /// The bytes the rank put into them; kept in the metrics with several ranks only.
    pub collective_bytes: Option<f64>,
    /// Its GPU at the report, where NVML has it: the share of the time a kernel ran (0 to 1),
    /// and the device's memory in use.
    pub gpu_utilization: Option<f64>,
    pub gpu_memory_bytes: Option<f64>,
}

impl From<&crate::proto::RankTimes> for RankFigures {
    fn from(t: &crate::proto::RankTimes) -> Self {
        RankFigures {
            step_s: t.step_s,
            data_s: t.data_s,
            collective_s: t.collective_s,
            collective_bytes: Some(t.collective_bytes as f64),
            gpu_utilization: (t.gpu_memory_bytes > 0).then_some(t.gpu_utilization),
            gpu_memory_bytes: (t.gpu_memory_bytes > 0).then_some(t.gpu_memory_bytes as f64),
        }
    }
}

/// Writes the ranks' figures (in rank order) into a report's metrics: rank 0's as
/// `time_step_s`, `time_data_s` and `time_collective_s` (Ray's flat keys), and with several
/// ranks each rank's as `ranks/R/time_step_s`, .., and `ranks/R/collective_bytes`. A metric the
/// train function reported under one of these names is kept as it reported it.
pub fn add_rank_figures(metrics: &mut Metrics, ranks: &[RankFigures]) {
    let times = |f: &RankFigures| {
        [
            ("time_step_s", f.step_s),
            ("time_data_s", f.data_s),
            ("time_collective_s", f.collective_s),
        ]
    };
    let gpu = |f: &RankFigures| {
        [("gpu_utilization", f.gpu_utilization), ("gpu_memory_bytes", f.gpu_memory_bytes)]
            .into_iter()
            .filter_map(|(key, value)| Some((key, value?)))
    };
    if let Some(first) = ranks.first() {
        for (key, value) in times(first).into_iter().chain(gpu(first)) {
            metrics.entry(key.into()).or_insert(value);
        }
    }
    if ranks.len() > 1 {
        for (rank, f) in ranks.iter().enumerate() {
            for (key, value) in times(f).into_iter().chain(gpu(f)) {
                metrics.entry(format!("ranks/{rank}/{key}")).or_insert(value);
            }
            let bytes = f.collective_bytes.unwrap_or(0.0);
            metrics.entry(format!("ranks/{rank}/collective_bytes")).or_insert(bytes);
        }
    }
}

/// The ranks' figures a report's metrics hold, as [`add_rank_figures`] wrote them, in rank
/// order; empty where no worker measured them.
pub fn rank_figures(metrics: &Metrics) -> Vec<RankFigures> {
    let figure = |key: &str| metrics.get(key).copied();
    let mut ranks = Vec::new();
    while let Some(step_s) = figure(&format!("ranks/{}/time_step_s", ranks.len())) {
        let of = |name: &str| figure(&format!("ranks/{}/{name}", ranks.len()));
        ranks.push(RankFigures {
            step_s,
            data_s: of("time_data_s").unwrap_or(0.0),
            collective_s: of("time_collective_s").unwrap_or(0.0),
            collective_bytes: of("collective_bytes"),
            gpu_utilization: of("gpu_utilization"),
            gpu_memory_bytes: of("gpu_memory_bytes"),
        });
    }
    if ranks.is_empty()
        && let Some(step_s) = figure("time_step_s")
    {
        ranks.push(RankFigures {
            step_s,
            data_s: figure("time_data_s").unwrap_or(0.0),
            collective_s: figure("time_collective_s").unwrap_or(0.0),
            collective_bytes: None,
            gpu_utilization: figure("gpu_utilization"),
            gpu_memory_bytes: figure("gpu_memory_bytes"),
        });
    }
    ranks
}

/// Anything `TrainContext::report` accepts as metrics.
pub trait IntoMetrics {
    fn into_metrics(self) -> Result<Metrics>;
}

impl IntoMetrics for Metrics {
    fn into_metrics(self) -> Result<Metrics> {
        check_names(self)
    }
}

impl<const N: usize> IntoMetrics for [(&str, f64); N] {
    fn into_metrics(self) -> Result<Metrics> {
        check_names(self.iter().map(|&(k, v)| (k.to_owned(), v)).collect())
    }
}

impl IntoMetrics for &[(&str, f64)] {
    fn into_metrics(self) -> Result<Metrics> {
        check_names(self.iter().map(|&(k, v)| (k.to_owned(), v)).collect())
    }
}

impl IntoMetrics for Vec<(String, f64)> {
    fn into_metrics(self) -> Result<Metrics> {
        check_names(self.into_iter().collect())
    }
}

/// A JSON object of numbers, e.g. `serde_json::json!({"loss": 0.3})`.
impl IntoMetrics for serde_json::Value {
    fn into_metrics(self) -> Result<Metrics> {
        let serde_json::Value::Object(map) = self else {
            return Err(Error::Metric {
                name: "<metrics>".into(),
                problem: format!("must be a JSON object of numbers, got {}", json_kind(&self)),
            });
        };
        let mut metrics = Metrics::new();
        for (name, value) in map {
            match value.as_f64() {
                Some(v) => metrics.insert(name, v),
                None => {
                    return Err(Error::Metric {
                        problem: format!(
                            "is {} ({value}); metrics must be numbers (log other data to a file in the run directory)",
                            json_kind(&value)
                        ),
                        name,
                    });
                }
            };
        }
        check_names(metrics)
    }
}

fn check_names(metrics: Metrics) -> Result<Metrics> {
    if let Some(name) = metrics.keys().find(|k| AUTO_METRICS.contains(&k.as_str())) {
        return Err(Error::Metric {
            name: name.clone(),
            problem: "is set by rtune on every report; pick another name".into(),
        });
    }
    if let Some(name) = metrics.keys().find(|k| k.is_empty()) {
        return Err(Error::Metric { name: name.clone(), problem: "has an empty name".into() });
    }
    Ok(metrics)
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a bool",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Metrics as a JSON object, NaN and infinities as the strings [`number_or_tag`] writes.
pub fn to_json(metrics: &Metrics) -> serde_json::Map<String, serde_json::Value> {
    metrics.iter().map(|(k, &v)| (k.clone(), number_or_tag(v))).collect()
}

/// Metrics travel as JSON, which has no NaN or infinity: those become strings on the wire.
pub fn to_wire(metrics: &Metrics) -> String {
    serde_json::Value::Object(to_json(metrics)).to_string()
}

pub(crate) fn from_wire(text: &str) -> Result<Metrics> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Error::Protocol(format!("metrics JSON: {e}")))?;
    let serde_json::Value::Object(map) = value else {
        return Err(Error::Protocol("metrics JSON is not an object".into()));
    };
    map.into_iter()
        .map(|(k, v)| match number_of(&v) {
            Some(n) => Ok((k, n)),
            None => Err(Error::Protocol(format!("metric {k} is {v}"))),
        })
        .collect()
}

/// The number a JSON value written by [`number_or_tag`] stands for; `None` for anything else.
pub(crate) fn number_of(v: &serde_json::Value) -> Option<f64> {
    match v {
        serde_json::Value::String(s) => number_of_tag(s),
        _ => v.as_f64(),
    }
}

/// The number a tag written by [`number_or_tag`] stands for ("NaN", "Infinity", "-Infinity").
pub(crate) fn number_of_tag(tag: &str) -> Option<f64> {
    match tag {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// A metric value as it goes into result.json: a number, or "NaN"/"Infinity" as strings.
pub(crate) fn number_or_tag(v: f64) -> serde_json::Value {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        (if v > 0.0 { "Infinity" } else { "-Infinity" }).into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        serde_json::Value::from(v as i64)
    } else {
        serde_json::Value::from(v)
    }
}

/// How numbers and params are written for people (tables, cards, `Display`): the searchers'.
pub use rtune_searchers::{number_text, param_text};

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranks' figures read back as they were written; a metric the train function
    /// reported under one of their names is kept; one rank's bytes are not in the row.
    #[test]
    fn rank_figures_read_back_as_written() {
        let figures = |step: f64| RankFigures {
            step_s: step,
            data_s: 0.1,
            collective_s: 0.2,
            collective_bytes: Some(4000.0),
            gpu_utilization: None,
            gpu_memory_bytes: None,
        };
        let mut two = Metrics::from([("time_data_s".to_string(), 7.0)]);
        add_rank_figures(&mut two, &[figures(1.0), figures(2.0)]);
        assert_eq!(rank_figures(&two), [figures(1.0), figures(2.0)]);
        assert_eq!((two["time_step_s"], two["time_data_s"]), (1.0, 7.0));
        let mut one = Metrics::new();
        add_rank_figures(&mut one, &[figures(1.0)]);
        assert_eq!(rank_figures(&one), [RankFigures { collective_bytes: None, ..figures(1.0) }]);
        assert!(one.keys().all(|k| is_figure(k)), "{one:?}");
        assert_eq!(rank_figures(&Metrics::new()), []);
        // A GPU rank's device figures, where NVML had them.
        let on_gpu = |step: f64| RankFigures {
            gpu_utilization: Some(0.75),
            gpu_memory_bytes: Some(3e9),
            ..figures(step)
        };
        let mut gpus = Metrics::new();
        add_rank_figures(&mut gpus, &[on_gpu(1.0), on_gpu(2.0)]);
        assert_eq!(rank_figures(&gpus), [on_gpu(1.0), on_gpu(2.0)]);
        assert_eq!((gpus["gpu_utilization"], gpus["ranks/1/gpu_memory_bytes"]), (0.75, 3e9));
    }

    /// The run's figures and its group's start read back as written: the checkpoint's only
    /// where the report carries one, the start only where written (an attempt's first row).
    #[test]
    fn run_figures_and_group_starts_read_back_as_written() {
        let run = RunFigures {
            report_s: 0.5,
            checkpoint_bytes: 2048.0,
            checkpoint_write_s: 0.25,
            checkpoint_upload_s: 0.0,
            checkpoint_wait_s: 0.0,
        };
        let mut metrics = Metrics::from([("loss".to_string(), 0.1)]);
        add_run_figures(&mut metrics, &run);
        assert_eq!(run_figures(&metrics), run);
        assert!(!metrics.contains_key("time_checkpoint_upload_s"), "{metrics:?}");
        let mut plain = Metrics::new();
        add_run_figures(&mut plain, &RunFigures { report_s: 0.5, ..Default::default() });
        assert_eq!(plain.keys().collect::<Vec<_>>(), ["time_report_s"]);
        assert_eq!(group_start(&metrics), None);
        let start = GroupStart { attempt: 2, reserve_s: 1.0, spawn_s: 0.5, join_s: 0.25 };
        add_group_start(&mut metrics, &start);
        assert_eq!(group_start(&metrics), Some(start));
        assert_eq!(start.total_s(), 1.75);
        assert!(metrics.keys().filter(|k| *k != "loss").all(|k| added_by_rtune(k)));
    }
    use serde_json::json;

    #[test]
    fn non_numbers_are_named() {
        let err = json!({"loss": 0.5, "note": "good"}).into_metrics().unwrap_err().to_string();
        assert!(
            err.contains("`note`") && err.contains("a string") && err.contains("numbers"),
            "{err}"
        );
        let err = json!([1, 2]).into_metrics().unwrap_err().to_string();
        assert!(err.contains("JSON object"), "{err}");
        let err = [("training_iteration", 1.0)].into_metrics().unwrap_err().to_string();
        assert!(err.contains("set by rtune"), "{err}");
    }

    #[test]
    fn wire_round_trip_keeps_nan_and_infinity() {
        let m: Metrics =
            [("a", f64::NAN), ("b", f64::INFINITY), ("c", 0.25)].into_metrics().unwrap();
        let back = from_wire(&to_wire(&m)).unwrap();
        assert!(back["a"].is_nan());
        assert_eq!(back["b"], f64::INFINITY);
        assert_eq!(back["c"], 0.25);
    }
}
