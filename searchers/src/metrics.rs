//! Results as policies see them: a flat map of metric name → `f64`, and the direction of the
//! objective. `Mode` becomes a sign once, here, so no searcher or scheduler branches on it:
//! every policy compares *scores* (`sign × value`, higher is better), and a NaN or infinite
//! value is the worst score there is.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One reported result: metric name → value (the time attribute, e.g. `training_iteration`,
/// is a metric like any other).
pub type Metrics = BTreeMap<String, f64>;

/// Whether the metric is minimised or maximised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Lower is better (a loss).
    Min,
    /// Higher is better (an accuracy).
    Max,
}

impl Mode {
    /// `+1` for `Max`, `-1` for `Min`.
    pub fn sign(self) -> f64 {
        match self {
            Mode::Max => 1.0,
            Mode::Min => -1.0,
        }
    }

    /// The score of a metric value: higher is better; NaN and ±inf are the worst score.
    pub fn score(self, value: f64) -> f64 {
        if value.is_finite() { self.sign() * value } else { f64::NEG_INFINITY }
    }
}

/// The metric a policy optimises and its direction, set once at set-up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Objective {
    /// Metric name.
    pub metric: String,
    /// Direction.
    pub mode: Mode,
}

impl Objective {
    /// A checked objective (the metric name must not be empty).
    pub fn new(component: &'static str, metric: &str, mode: Mode) -> Result<Self> {
        if metric.is_empty() {
            return Err(Error::config(component, "metric", "\"\"", "a non-empty metric name"));
        }
        Ok(Self { metric: metric.to_string(), mode })
    }

    /// The score of a result (higher is better), or a typed error if the metric is missing.
    pub fn score(&self, result: &Metrics) -> Result<f64> {
        get_metric(result, &self.metric).map(|v| self.mode.score(v))
    }
}

/// A metric's raw value, or [`Error::MissingMetric`] naming the keys present.
pub fn get_metric(result: &Metrics, name: &str) -> Result<f64> {
    result.get(name).copied().ok_or_else(|| Error::MissingMetric {
        metric: name.to_string(),
        present: result.keys().cloned().collect(),
    })
}

/// Serde helper: scores are finite or the worst score (`-inf`); JSON has no infinities, so the
/// worst score is written as `null`.
pub(crate) mod score_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        (if v.is_finite() { Some(*v) } else { None }).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NEG_INFINITY))
    }
}

/// Serde helper for `Option<f64>` scores (see [`score_serde`]): `None` stays `None`, a worst
/// score is written as the string `"-inf"`.
pub(crate) mod opt_score_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Finite(f64),
        Worst(String),
    }

    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        v.map(|x| if x.is_finite() { Repr::Finite(x) } else { Repr::Worst("-inf".into()) })
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Ok(Option::<Repr>::deserialize(d)?.map(|r| match r {
            Repr::Finite(x) => x,
            Repr::Worst(_) => f64::NEG_INFINITY,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_normalise_direction_and_non_finite() {
        assert_eq!(Mode::Min.score(2.0), -2.0);
        assert_eq!(Mode::Max.score(2.0), 2.0);
        assert_eq!(Mode::Max.score(f64::NAN), f64::NEG_INFINITY);
        assert_eq!(Mode::Min.score(f64::NEG_INFINITY), f64::NEG_INFINITY);
        let o = Objective::new("test", "loss", Mode::Min).unwrap();
        let r = Metrics::from([("acc".to_string(), 1.0)]);
        assert_eq!(
            o.score(&r).unwrap_err(),
            Error::MissingMetric { metric: "loss".into(), present: vec!["acc".into()] }
        );
    }
}
