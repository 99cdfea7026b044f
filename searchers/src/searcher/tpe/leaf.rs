//! How TPE (and the searchers that share its model space) sees one sampled parameter: a
//! number it models directly, on a log scale, on a grid, through the normal's CDF, or a
//! category; and back.

use super::parzen::{NumericSpec, ParamKind};
use crate::math::{clamp_f64, norm_cdf, norm_ppf};
use crate::space::domain::{Domain, float_q_bounds, int_q_bounds, round_to_q};
use crate::value::Value;

/// How one sampled leaf maps to the model's numbers and back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Leaf {
    /// Modelled directly; the output is a float.
    Number { spec: NumericSpec, q: Option<f64> },
    /// An integer domain: modelled as a float, converted back on its exact grid.
    Int { spec: NumericSpec, grid: IntGrid },
    /// Modelled on `u = Φ((x − mean)/sd)`, uniform on (0, 1) under the prior.
    Normal { mean: f64, sd: f64, q: Option<f64> },
    /// Modelled by index.
    Choice(Vec<Value>),
}

const U_EPS: f64 = 1e-9;

impl Leaf {
    pub(crate) fn from_domain(d: &Domain) -> Leaf {
        let num = |low: f64, high: f64, step: Option<f64>, log: bool, q: Option<f64>| {
            Leaf::Number { spec: NumericSpec { low, high, step, log }, q }
        };
        match *d {
            Domain::Uniform { low, high } => num(low, high, None, false, None),
            Domain::QUniform { low, high, q } => {
                let (lo, hi) = float_q_bounds(low, high, q);
                num(lo, hi, Some(q), false, Some(q))
            }
            Domain::LogUniform { low, high, .. } => num(low, high, None, true, None),
            Domain::QLogUniform { low, high, q, .. } => {
                let (lo, hi) = float_q_bounds(low, high, q);
                num(lo, hi, Some(q), true, Some(q))
            }
            Domain::Randn { mean, sd } => Leaf::Normal { mean, sd, q: None },
            Domain::QRandn { mean, sd, q } => Leaf::Normal { mean, sd, q: Some(q) },
            Domain::RandInt { low, high } => IntGrid::new(low, high, 1, false).leaf(),
            Domain::LogRandInt { low, high, .. } => IntGrid::new(low, high, 1, true).leaf(),
            Domain::QRandInt { low, high, q } => IntGrid::new(low, high, q, false).leaf(),
            Domain::QLogRandInt { low, high, q, .. } => IntGrid::new(low, high, q, true).leaf(),
            Domain::Choice(ref values) => Leaf::Choice(values.clone()),
        }
    }

    pub(crate) fn kind(&self) -> ParamKind {
        match self {
            Leaf::Number { spec, .. } | Leaf::Int { spec, .. } => ParamKind::Numeric(*spec),
            Leaf::Normal { .. } => ParamKind::Numeric(NumericSpec {
                low: U_EPS,
                high: 1.0 - U_EPS,
                step: None,
                log: false,
            }),
            Leaf::Choice(values) => ParamKind::Categorical(values.len()),
        }
    }

    /// The model coordinate of a sampled value (`None` if the value does not fit the leaf).
    pub(crate) fn coord(&self, v: &Value) -> Option<f64> {
        match self {
            Leaf::Number { spec, .. } => v.as_f64().map(|x| clamp_f64(x, spec.low, spec.high)),
            Leaf::Int { spec, grid } => {
                let exact = v.as_i64().map(|i| grid.coord(i128::from(i)));
                let c = exact.or_else(|| v.as_f64().map(|x| x - grid.origin() as f64));
                c.map(|c| clamp_f64(c, spec.low, spec.high))
            }
            Leaf::Normal { mean, sd, .. } => {
                v.as_f64().map(|x| norm_cdf((x - mean) / sd).clamp(U_EPS, 1.0 - U_EPS))
            }
            Leaf::Choice(values) => values.iter().position(|c| c == v).map(|i| i as f64),
        }
    }

    /// The value for a model coordinate.
    pub(crate) fn value(&self, c: f64) -> Value {
        match self {
            Leaf::Int { spec, grid } => Value::Int(grid.value(spec.align(c))),
            Leaf::Number { spec, q, .. } => {
                let x = spec.align(c);
                Value::Float(q.map_or(x, |q| round_to_q(x, q)))
            }
            Leaf::Normal { mean, sd, q } => {
                let x = mean + sd * norm_ppf(c.clamp(U_EPS, 1.0 - U_EPS));
                Value::Float(q.map_or(x, |q| round_to_q(x, q)))
            }
            Leaf::Choice(values) => values.get(c as usize).cloned().unwrap_or(Value::Null),
        }
    }
}

/// The exact values of an integer domain: multiples of `q` in `[lo, hi]`.
///
/// The model works in f64, which holds integers exactly only up to 2^53. Linear domains are
/// modelled as offsets from `lo`, so any range narrower than that is modelled exactly wherever it
/// lies; log domains keep absolute values (their model is relative anyway). Either way a model
/// coordinate goes back to an integer in integer arithmetic, on the grid and inside the bounds,
/// so a suggestion is always a value the domain contains.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct IntGrid {
    lo: i128,
    hi: i128,
    q: i128,
    log: bool,
}

impl IntGrid {
    /// `[low, high)` with step `q`, as the domain defines it (validated by the space).
    fn new(low: i64, high: i64, q: i64, log: bool) -> IntGrid {
        let (lo, hi) = if q <= 1 {
            (i128::from(low), i128::from(high) - 1)
        } else {
            int_q_bounds(low, high, q)
        };
        IntGrid { lo, hi, q: i128::from(q.max(1)), log }
    }

    /// Subtracted before modelling.
    fn origin(&self) -> i128 {
        if self.log { 0 } else { self.lo }
    }

    fn leaf(self) -> Leaf {
        let spec = NumericSpec {
            low: self.coord(self.lo),
            high: self.coord(self.hi),
            step: Some(self.q as f64),
            log: self.log,
        };
        Leaf::Int { spec, grid: self }
    }

    fn coord(&self, v: i128) -> f64 {
        (v - self.origin()) as f64
    }

    /// The grid value nearest to a model coordinate.
    fn value(&self, c: f64) -> i64 {
        // A float this far out saturates on conversion and is clamped just below.
        let offset = if c.is_finite() { c.round() as i128 } else { 0 };
        let v = self.origin().saturating_add(offset).clamp(self.lo, self.hi);
        // lo and hi are multiples of q, so the nearest multiple counted from lo stays inside.
        let v = (self.lo + (v - self.lo + self.q / 2) / self.q * self.q).min(self.hi);
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
    }
}
