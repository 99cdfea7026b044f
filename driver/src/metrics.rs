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
/// `record`'s rows); with several ranks, each rank's is under `ranks/R/`.
pub const RANK_METRICS: [&str; 3] = ["time_step_s", "time_data_s", "time_collective_s"];

/// Whether rtune, not the train function, puts `name` into reports.
pub fn added_by_rtune(name: &str) -> bool {
    AUTO_METRICS.contains(&name) || RANK_METRICS.contains(&name) || name.starts_with("ranks/")
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
pub fn number_of(v: &serde_json::Value) -> Option<f64> {
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

/// A number as tables and cards show it: integers whole, others to 4 decimals or in e-notation.
pub fn number_text(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v}")
    } else if v != 0.0 && !(1e-3..1e5).contains(&v.abs()) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// A param's value as tables show it: floats as `number_text` does, anything else as written.
pub fn param_text(v: &rtune_searchers::Value) -> String {
    match (v.as_i64(), v.as_f64()) {
        (None, Some(x)) => number_text(x),
        _ => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
