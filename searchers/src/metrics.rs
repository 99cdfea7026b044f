//! Results as policies see them: a flat map of metric name → `f64`, and the direction of the
//! objective. `Mode` becomes a sign once, here, so no searcher or scheduler branches on it:
//! every policy compares *scores* (`sign × value`, higher is better). Infinities are ordered
//! like any other number (`+inf` is the best score in `Max` mode, `−inf` in `Min` mode). A NaN
//! (a diverged trial) is never better than anything: [`Mode::score`] makes it the worst score,
//! and the schedulers, which keep NaN apart so that it stays out of their cutoffs, say in their
//! docs what they do with it.

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

    /// The score of a metric value: higher is better; `±inf` are ordered like any number in
    /// this direction; NaN is the worst score (`−inf`).
    pub fn score(self, value: f64) -> f64 {
        if value.is_nan() { f64::NEG_INFINITY } else { self.sign() * value }
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

/// What a sweep optimises: nothing, one objective, or several (its trials judged by their
/// Pareto front, not ranked by one metric). One shape for the checked settings, the controller,
/// the results table, the views and the experiment's files, which write it as Ray does:
/// `metric` and `mode` for one objective, `objectives` for several.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WrittenObjectives", into = "WrittenObjectives")]
pub struct Objectives(Vec<Objective>);

/// How the experiment's files write [`Objectives`].
#[derive(Serialize, Deserialize)]
struct WrittenObjectives {
    metric: Option<String>,
    mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    objectives: Vec<Objective>,
}

impl From<WrittenObjectives> for Objectives {
    fn from(w: WrittenObjectives) -> Self {
        let one = w.metric.zip(w.mode).map(|(metric, mode)| Objective { metric, mode });
        Objectives(one.into_iter().chain(w.objectives).collect())
    }
}

impl From<Objectives> for WrittenObjectives {
    fn from(o: Objectives) -> Self {
        let one = o.single().cloned();
        WrittenObjectives {
            metric: one.as_ref().map(|o| o.metric.clone()),
            mode: one.map(|o| o.mode),
            objectives: o.several().to_vec(),
        }
    }
}

impl From<Vec<Objective>> for Objectives {
    fn from(objectives: Vec<Objective>) -> Self {
        Objectives(objectives)
    }
}

impl Objectives {
    /// One objective.
    pub fn one(metric: impl Into<String>, mode: Mode) -> Self {
        Objectives(vec![Objective { metric: metric.into(), mode }])
    }

    /// The objective of a sweep with exactly one.
    pub fn single(&self) -> Option<&Objective> {
        match self.0.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// The metric of a sweep with one objective.
    pub fn metric(&self) -> Option<&str> {
        self.single().map(|o| o.metric.as_str())
    }

    /// The mode of a sweep with one objective.
    pub fn mode(&self) -> Option<Mode> {
        self.single().map(|o| o.mode)
    }

    /// The objectives of a sweep with several; empty for one or none.
    pub fn several(&self) -> &[Objective] {
        if self.0.len() > 1 { &self.0 } else { &[] }
    }

    /// Every objective: none, one, or several.
    pub fn as_slice(&self) -> &[Objective] {
        &self.0
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Objective> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mode of the objective on `metric`, if it is one.
    pub fn mode_of(&self, metric: &str) -> Option<Mode> {
        self.0.iter().find(|o| o.metric == metric).map(|o| o.mode)
    }
}

/// Checks a multi-objective setting for `component`: each metric named, and once.
pub(crate) fn check_objectives(component: &'static str, objectives: &[Objective]) -> Result<()> {
    for (i, o) in objectives.iter().enumerate() {
        Objective::new(component, &o.metric, o.mode)?;
        if objectives[..i].iter().any(|earlier| earlier.metric == o.metric) {
            return Err(Error::config(component, "objectives", &o.metric, "each metric once"));
        }
    }
    Ok(())
}

/// How far a result is from feasible under `constraints`, metrics that must be <= 0 (Optuna's
/// `constraints_func`): the sum of their positive parts, 0 for a feasible result. A constraint
/// the result does not hold, or holds as NaN, makes it infinitely far.
pub fn violation(constraints: &[String], result: &Metrics) -> f64 {
    violation_of(constraints.iter().map(|c| result.get(c).copied().unwrap_or(f64::NAN)))
}

/// The best trial by a sweep's rule, the one every view of it names (the results, the
/// terminal UI, the progress lines, `rtune watch`, the metrics endpoint): the best finite
/// `metric` in `mode` over each trial's last result, among the trials whose last result meets
/// the `constraints` (each reported, at most 0); of equals the first (as Ray picks). `lasts`:
/// each trial's last result, None for one that never reported; the index is into them.
pub fn best_trial<'a>(
    lasts: impl IntoIterator<Item = Option<&'a Metrics>>,
    metric: &str,
    mode: Mode,
    constraints: &[String],
) -> Option<usize> {
    lasts
        .into_iter()
        .enumerate()
        .filter_map(|(i, last)| {
            let last = last.filter(|m| violation(constraints, m) == 0.0)?;
            Some((i, *last.get(metric)?)).filter(|(_, v)| v.is_finite())
        })
        .map(|(i, v)| (i, mode.sign() * v))
        .reduce(|best, t| if t.1 > best.1 { t } else { best })
        .map(|(i, _)| i)
}

/// [`violation`] of constraint values given as they are (NaN where one is missing).
pub(crate) fn violation_of(values: impl IntoIterator<Item = f64>) -> f64 {
    // Folded from +0 (an empty `sum` of floats is -0, which `total_cmp` orders before +0).
    values
        .into_iter()
        .fold(0.0, |total, v| if v.is_nan() { f64::INFINITY } else { total + v.max(0.0) })
}

/// For `skip_serializing_if`: a violation of 0 (a feasible result) is not written.
pub(crate) fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// Checks constraints for `component`: each metric named, and once.
pub(crate) fn check_constraints(component: &'static str, constraints: &[String]) -> Result<()> {
    for (i, c) in constraints.iter().enumerate() {
        if c.is_empty() {
            return Err(Error::config(component, "constraints", "\"\"", "non-empty metric names"));
        }
        if constraints[..i].contains(c) {
            return Err(Error::config(component, "constraints", c, "each metric once"));
        }
    }
    Ok(())
}

/// A metric's raw value, or [`Error::MissingMetric`] naming the keys present.
pub fn get_metric(result: &Metrics, name: &str) -> Result<f64> {
    result.get(name).copied().ok_or_else(|| Error::MissingMetric {
        metric: name.to_string(),
        present: result.keys().cloned().collect(),
    })
}

/// Whether two kept scores are the same: equal numbers, or both NaN (so that a saved state
/// holding a NaN compares equal to itself after a round trip).
pub(crate) fn same_score(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// [`same_score`] for optional scores.
pub(crate) fn same_opt_score(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => same_score(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// A score as saved states write it. JSON has no infinities or NaN: a finite score is a
/// number, the others the strings `"inf"`, `"-inf"` and `"nan"`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ScoreRepr {
    Number(f64),
    Text(String),
}

impl ScoreRepr {
    fn of(v: f64) -> Self {
        if v.is_finite() {
            ScoreRepr::Number(v)
        } else if v.is_nan() {
            ScoreRepr::Text("nan".into())
        } else if v > 0.0 {
            ScoreRepr::Text("inf".into())
        } else {
            ScoreRepr::Text("-inf".into())
        }
    }

    fn value<E: serde::de::Error>(self) -> Result<f64, E> {
        match self {
            ScoreRepr::Number(x) => Ok(x),
            ScoreRepr::Text(t) => match t.as_str() {
                "inf" | "+inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "nan" => Ok(f64::NAN),
                other => Err(E::custom(format!(
                    "a score must be a number, \"inf\", \"-inf\" or \"nan\", found \"{other}\""
                ))),
            },
        }
    }
}

/// A kept score (higher is better) that saved states write as [`score_serde`] does.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Score(#[serde(with = "score_serde")] pub f64);

/// Serde helper for scores (see [`ScoreRepr`]). `null`, which states written before
/// infinities were ordered hold for any non-finite score, reads as `−inf`, the worst score
/// they meant.
pub(crate) mod score_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ScoreRepr;

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        ScoreRepr::of(*v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Option::<ScoreRepr>::deserialize(d)? {
            Some(r) => r.value(),
            None => Ok(f64::NEG_INFINITY),
        }
    }
}

/// Serde helper for `Option<f64>` scores (see [`ScoreRepr`]): `None` is `null`.
pub(crate) mod opt_score_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ScoreRepr;

    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        v.map(ScoreRepr::of).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Option::<ScoreRepr>::deserialize(d)?.map(ScoreRepr::value).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The best trial: by the last result, feasible ones only, finite values, the first of
    /// equals; none when no trial has a feasible finite value.
    #[test]
    fn the_best_trial_is_the_best_feasible_last_result() {
        let m = |pairs: &[(&str, f64)]| -> Metrics {
            pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
        };
        let lasts = [
            Some(m(&[("acc", 0.99), ("mem_over", 1.0)])),
            None,
            Some(m(&[("acc", 0.8), ("mem_over", 0.0)])),
            Some(m(&[("acc", f64::NAN), ("mem_over", -1.0)])),
            Some(m(&[("acc", 0.8), ("mem_over", -2.0)])),
            Some(m(&[("acc", 0.95)])),
        ];
        let best = |constraints: &[String], mode| {
            best_trial(lasts.iter().map(Option::as_ref), "acc", mode, constraints)
        };
        let mem = ["mem_over".to_owned()];
        assert_eq!(best(&[], Mode::Max), Some(0));
        assert_eq!(best(&mem, Mode::Max), Some(2), "infeasible, unreported and NaN left out");
        assert_eq!(best(&mem, Mode::Min), Some(2), "the first of equals");
        let none = ["never_reported".to_owned()];
        assert_eq!(best(&none, Mode::Max), None);
    }

    /// One objective is written as `metric` and `mode`, several as `objectives`, none as nulls:
    /// the experiment files' format, read back the same.
    #[test]
    fn objectives_are_written_as_ray_writes_them() {
        let several = Objectives::from(vec![
            Objective { metric: "loss".into(), mode: Mode::Min },
            Objective { metric: "size".into(), mode: Mode::Min },
        ]);
        for (objectives, json) in [
            (Objectives::default(), r#"{"metric":null,"mode":null}"#),
            (Objectives::one("acc", Mode::Max), r#"{"metric":"acc","mode":"max"}"#),
            (
                several.clone(),
                r#"{"metric":null,"mode":null,"objectives":[{"metric":"loss","mode":"min"},{"metric":"size","mode":"min"}]}"#,
            ),
        ] {
            assert_eq!(serde_json::to_string(&objectives).unwrap(), json);
            assert_eq!(serde_json::from_str::<Objectives>(json).unwrap(), objectives);
        }
        let one = Objectives::one("acc", Mode::Max);
        assert_eq!(
            (one.metric(), one.mode(), one.several().len()),
            (Some("acc"), Some(Mode::Max), 0)
        );
        assert_eq!(
            (several.metric(), several.several().len(), several.mode_of("size")),
            (None, 2, Some(Mode::Min))
        );
    }

    #[test]
    fn scores_normalise_direction_and_non_finite() {
        assert_eq!(Mode::Min.score(2.0), -2.0);
        assert_eq!(Mode::Max.score(2.0), 2.0);
        assert_eq!(Mode::Max.score(f64::NAN), f64::NEG_INFINITY);
        assert_eq!(Mode::Min.score(f64::NAN), f64::NEG_INFINITY);
        // Infinities are ordered in the mode's direction.
        assert_eq!(Mode::Min.score(f64::NEG_INFINITY), f64::INFINITY);
        assert_eq!(Mode::Min.score(f64::INFINITY), f64::NEG_INFINITY);
        assert_eq!(Mode::Max.score(f64::INFINITY), f64::INFINITY);
        let o = Objective::new("test", "loss", Mode::Min).unwrap();
        let r = Metrics::from([("acc".to_string(), 1.0)]);
        assert_eq!(
            o.score(&r).unwrap_err(),
            Error::MissingMetric { metric: "loss".into(), present: vec!["acc".into()] }
        );
    }

    #[derive(Debug, Serialize, Deserialize)]
    struct Saved {
        #[serde(with = "score_serde")]
        a: f64,
        #[serde(with = "opt_score_serde")]
        b: Option<f64>,
    }

    #[test]
    fn non_finite_scores_survive_json() {
        for v in [1.5, -0.25, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN] {
            let json = serde_json::to_string(&Saved { a: v, b: Some(v) }).unwrap();
            let back: Saved = serde_json::from_str(&json).unwrap();
            assert!(same_score(back.a, v) && same_opt_score(back.b, Some(v)), "{v} via {json}");
        }
        let json = serde_json::to_string(&Saved { a: f64::INFINITY, b: None }).unwrap();
        assert_eq!(json, r#"{"a":"inf","b":null}"#);
        // States written before infinities were ordered: null and "-inf" are the worst score.
        let old: Saved = serde_json::from_str(r#"{"a":null,"b":"-inf"}"#).unwrap();
        assert_eq!((old.a, old.b), (f64::NEG_INFINITY, Some(f64::NEG_INFINITY)));
        let bad = serde_json::from_str::<Saved>(r#"{"a":"huge","b":null}"#).unwrap_err();
        assert!(bad.to_string().contains("\"huge\""), "{bad}");
        assert!(!same_score(f64::NAN, 1.0) && !same_opt_score(None, Some(f64::NAN)));
    }
}
