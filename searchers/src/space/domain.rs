//! Sampling domains with Ray Tune's semantics: the leaves of a search space that searchers draw
//! from. Each constructor validates its arguments and returns a typed error saying what would
//! be valid; sampling never panics, even on a domain built by hand with bad fields.
//!
//! Quantisation follows Ray's `Quantized` sampler: the bounds are first moved inwards to
//! multiples of `q` (`ceil(low/q)·q`, `floor(high/q)·q`), the inner sampler draws in those
//! bounds, and the draw is rounded to the nearest multiple of `q` with ties to even
//! (`np.round`). That is why `qrandint`/`qlograndint` can return their upper bound while
//! `randint`/`lograndint` exclude it, and why `qrandint(lo, hi, 1)` (Ray short-cuts `q == 1`)
//! excludes it again. One deliberate difference: Ray skips rounding entirely for float domains
//! with `q == 1`; here a float q-domain always lands on its grid.
//!
//! `base` on the log domains is accepted for Ray compatibility and checked, but (as in Ray,
//! which deprecated it) a log-uniform distribution is the same in every base.

use rand::{Rng, RngExt};
use rand_distr::StandardNormal;

use crate::error::{Error, Result};
use crate::math::clamp_f64;
use crate::value::{Map, Value};

/// A distribution to sample one parameter from.
#[derive(Clone, Debug, PartialEq)]
pub enum Domain {
    /// Float uniform in `[low, high)`.
    Uniform {
        /// Lower bound (inclusive).
        low: f64,
        /// Upper bound.
        high: f64,
    },
    /// Float uniform, rounded to a multiple of `q`; `low` and `high` are multiples of `q`.
    QUniform {
        /// Lower bound (a multiple of `q`).
        low: f64,
        /// Upper bound (a multiple of `q`, reachable).
        high: f64,
        /// Step.
        q: f64,
    },
    /// Float log-uniform in `[low, high)`.
    LogUniform {
        /// Lower bound, > 0.
        low: f64,
        /// Upper bound.
        high: f64,
        /// Logarithm base (does not change the distribution).
        base: f64,
    },
    /// Float log-uniform rounded to a multiple of `q`.
    QLogUniform {
        /// Lower bound, > 0, a multiple of `q`.
        low: f64,
        /// Upper bound, a multiple of `q`.
        high: f64,
        /// Step.
        q: f64,
        /// Logarithm base (does not change the distribution).
        base: f64,
    },
    /// Normal with `mean` and standard deviation `sd`.
    Randn {
        /// Mean.
        mean: f64,
        /// Standard deviation, > 0.
        sd: f64,
    },
    /// Normal rounded to a multiple of `q`.
    QRandn {
        /// Mean.
        mean: f64,
        /// Standard deviation, > 0.
        sd: f64,
        /// Step.
        q: f64,
    },
    /// Integer uniform in `[low, high)` (upper bound excluded).
    RandInt {
        /// Lower bound (inclusive).
        low: i64,
        /// Upper bound (excluded).
        high: i64,
    },
    /// Integer uniform rounded to a multiple of `q` (upper bound reachable when `q > 1`).
    QRandInt {
        /// Lower bound.
        low: i64,
        /// Upper bound.
        high: i64,
        /// Step, ≥ 1.
        q: i64,
    },
    /// Integer log-uniform in `[low, high)` (upper bound excluded).
    LogRandInt {
        /// Lower bound, > 0.
        low: i64,
        /// Upper bound (excluded).
        high: i64,
        /// Logarithm base (does not change the distribution).
        base: f64,
    },
    /// Integer log-uniform rounded to a multiple of `q` (upper bound reachable when `q > 1`).
    QLogRandInt {
        /// Lower bound, > 0.
        low: i64,
        /// Upper bound.
        high: i64,
        /// Step, ≥ 1.
        q: i64,
        /// Logarithm base (does not change the distribution).
        base: f64,
    },
    /// One of a list of values, uniformly.
    Choice(Vec<Value>),
}

/// Float uniform in `[low, high)`: `uniform(0.0, 1.0)?`.
pub fn uniform(low: f64, high: f64) -> Result<Domain> {
    checked(Domain::Uniform { low, high })
}

/// Float uniform rounded to multiples of `q`; bounds must be multiples of `q` (as in Ray).
pub fn quniform(low: f64, high: f64, q: f64) -> Result<Domain> {
    checked(Domain::QUniform { low, high, q })
}

/// Float log-uniform in `[low, high)`, `0 < low < high`. Use [`Domain::with_base`] for a base.
pub fn loguniform(low: f64, high: f64) -> Result<Domain> {
    checked(Domain::LogUniform { low, high, base: 10.0 })
}

/// Float log-uniform rounded to multiples of `q`.
pub fn qloguniform(low: f64, high: f64, q: f64) -> Result<Domain> {
    checked(Domain::QLogUniform { low, high, q, base: 10.0 })
}

/// Normal with `mean` and standard deviation `sd > 0` (Ray's defaults are 0 and 1).
pub fn randn(mean: f64, sd: f64) -> Result<Domain> {
    checked(Domain::Randn { mean, sd })
}

/// Normal rounded to multiples of `q`.
pub fn qrandn(mean: f64, sd: f64, q: f64) -> Result<Domain> {
    checked(Domain::QRandn { mean, sd, q })
}

/// Integer uniform in `[low, high)`: the upper bound is excluded.
pub fn randint(low: i64, high: i64) -> Result<Domain> {
    checked(Domain::RandInt { low, high })
}

/// Integer uniform rounded to multiples of `q ≥ 1`; the upper bound is reachable when `q > 1`.
pub fn qrandint(low: i64, high: i64, q: i64) -> Result<Domain> {
    checked(Domain::QRandInt { low, high, q })
}

/// Integer log-uniform in `[low, high)`, `0 < low < high`: the upper bound is excluded.
pub fn lograndint(low: i64, high: i64) -> Result<Domain> {
    checked(Domain::LogRandInt { low, high, base: 10.0 })
}

/// Integer log-uniform rounded to multiples of `q ≥ 1`.
pub fn qlograndint(low: i64, high: i64, q: i64) -> Result<Domain> {
    checked(Domain::QLogRandInt { low, high, q, base: 10.0 })
}

/// One of `values`, uniformly: `choice([64, 128, 256])`. An empty list is reported when the
/// space is validated (by every searcher's constructor), naming the key.
pub fn choice<I, T>(values: I) -> Domain
where
    I: IntoIterator<Item = T>,
    T: Into<Value>,
{
    Domain::Choice(values.into_iter().map(Into::into).collect())
}

fn checked(d: Domain) -> Result<Domain> {
    d.validate()?;
    Ok(d)
}

/// Python's `isclose(x, round(x))` with its default relative tolerance: Ray's divisibility test.
fn near_integer(x: f64) -> bool {
    let r = x.round();
    (x - r).abs() <= 1e-9 * x.abs().max(r.abs())
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let d = a.div_euclid(b);
    if a.rem_euclid(b) == 0 { d } else { d + 1 }
}

/// Round an integer to the nearest multiple of `q > 0`, ties to even (numpy's `round`).
fn round_to_multiple(v: i128, q: i128) -> i128 {
    let n = v.div_euclid(q);
    let r = v.rem_euclid(q);
    let up = match (2 * r).cmp(&q) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => n % 2 != 0,
        std::cmp::Ordering::Less => false,
    };
    (if up { n + 1 } else { n }) * q
}

/// Round a float to the nearest multiple of `q`, ties to even.
pub(crate) fn round_to_q(x: f64, q: f64) -> f64 {
    (x / q).round_ties_even() * q
}

/// Integer bounds `[low, high)` moved inwards to multiples of `q` as Ray's quantiser does.
pub(crate) fn int_q_bounds(low: i64, high: i64, q: i64) -> (i128, i128) {
    let q = i128::from(q.max(1));
    (ceil_div(i128::from(low), q) * q, i128::from(high).div_euclid(q) * q)
}

/// Float bounds as multiples of `q` (the bounds are validated to be multiples already; rounding
/// rather than ceil/floor keeps `0.3/0.1 = 2.9999999999999996` on its grid point).
pub(crate) fn float_q_bounds(low: f64, high: f64, q: f64) -> (f64, f64) {
    ((low / q).round() * q, (high / q).round() * q)
}

fn clamp_i128(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

impl Domain {
    /// The domain's name as written in a sweep file (`loguniform`).
    pub fn name(&self) -> &'static str {
        match self {
            Domain::Uniform { .. } => "uniform",
            Domain::QUniform { .. } => "quniform",
            Domain::LogUniform { .. } => "loguniform",
            Domain::QLogUniform { .. } => "qloguniform",
            Domain::Randn { .. } => "randn",
            Domain::QRandn { .. } => "qrandn",
            Domain::RandInt { .. } => "randint",
            Domain::QRandInt { .. } => "qrandint",
            Domain::LogRandInt { .. } => "lograndint",
            Domain::QLogRandInt { .. } => "qlograndint",
            Domain::Choice(_) => "choice",
        }
    }

    /// The domain as a call, for messages: `loguniform(0.0001, 0.1)`.
    pub fn describe(&self) -> String {
        let args = match self {
            Domain::Uniform { low, high } => format!("{low}, {high}"),
            Domain::QUniform { low, high, q } => format!("{low}, {high}, q={q}"),
            Domain::LogUniform { low, high, base } => format!("{low}, {high}{}", base_arg(*base)),
            Domain::QLogUniform { low, high, q, base } => {
                format!("{low}, {high}, q={q}{}", base_arg(*base))
            }
            Domain::Randn { mean, sd } => format!("mean={mean}, sd={sd}"),
            Domain::QRandn { mean, sd, q } => format!("mean={mean}, sd={sd}, q={q}"),
            Domain::RandInt { low, high } => format!("{low}, {high}"),
            Domain::QRandInt { low, high, q } => format!("{low}, {high}, q={q}"),
            Domain::LogRandInt { low, high, base } => format!("{low}, {high}{}", base_arg(*base)),
            Domain::QLogRandInt { low, high, q, base } => {
                format!("{low}, {high}, q={q}{}", base_arg(*base))
            }
            Domain::Choice(values) => {
                let shown: Vec<String> = values.iter().take(8).map(|v| v.to_string()).collect();
                let more = if values.len() > 8 { ", ..." } else { "" };
                format!("[{}{more}]", shown.join(", "))
            }
        };
        format!("{}({args})", self.name())
    }

    /// Set the logarithm base of a log domain (kept for Ray compatibility; the distribution does
    /// not depend on it). Fails on other domains and on a base that is not > 0 and ≠ 1.
    pub fn with_base(self, new_base: f64) -> Result<Domain> {
        let d = match self {
            Domain::LogUniform { low, high, .. } => {
                Domain::LogUniform { low, high, base: new_base }
            }
            Domain::QLogUniform { low, high, q, .. } => {
                Domain::QLogUniform { low, high, q, base: new_base }
            }
            Domain::LogRandInt { low, high, .. } => {
                Domain::LogRandInt { low, high, base: new_base }
            }
            Domain::QLogRandInt { low, high, q, .. } => {
                Domain::QLogRandInt { low, high, q, base: new_base }
            }
            other => {
                return Err(other.invalid(
                    "only log domains have a base",
                    "loguniform, qloguniform, lograndint or qlograndint",
                ));
            }
        };
        checked(d)
    }

    fn invalid(&self, problem: impl Into<String>, expected: impl Into<String>) -> Error {
        Error::InvalidDomain {
            path: String::new(),
            domain: self.describe(),
            problem: problem.into(),
            expected: expected.into(),
        }
    }

    /// Check the arguments; the error names the domain and what would be valid (the key path is
    /// filled in by the space).
    pub fn validate(&self) -> Result<()> {
        match *self {
            Domain::Uniform { low, high } => self.check_float_range(low, high, false),
            Domain::QUniform { low, high, q } => {
                self.check_float_range(low, high, false)?;
                self.check_float_q(low, high, q)
            }
            Domain::LogUniform { low, high, base } => {
                self.check_float_range(low, high, true)?;
                self.check_base(base)
            }
            Domain::QLogUniform { low, high, q, base } => {
                self.check_float_range(low, high, true)?;
                self.check_base(base)?;
                self.check_float_q(low, high, q)
            }
            Domain::Randn { mean, sd } => self.check_normal(mean, sd),
            Domain::QRandn { mean, sd, q } => {
                self.check_normal(mean, sd)?;
                if !(q.is_finite() && q > 0.0) {
                    return Err(self.invalid(format!("q = {q}"), "a finite q > 0"));
                }
                // Rounding divides by q: a q this small makes the grid index of a sample infinite.
                if !(normal_reach(mean, sd) / q).is_finite() {
                    return Err(self.invalid(
                        format!(
                            "q = {q} is too small for samples of this size (they / q overflow)"
                        ),
                        "q ≥ (|mean| + 64·sd) / f64::MAX",
                    ));
                }
                Ok(())
            }
            Domain::RandInt { low, high } => self.check_int_range(low, high, 1, false),
            Domain::QRandInt { low, high, q } => self.check_int_range(low, high, q, false),
            Domain::LogRandInt { low, high, base } => {
                self.check_int_range(low, high, 1, true)?;
                self.check_base(base)
            }
            Domain::QLogRandInt { low, high, q, base } => {
                self.check_int_range(low, high, q, true)?;
                self.check_base(base)
            }
            Domain::Choice(ref values) => {
                if values.is_empty() {
                    return Err(self.invalid("no values to choose from", "a non-empty list"));
                }
                Ok(())
            }
        }
    }

    fn check_float_range(&self, low: f64, high: f64, log: bool) -> Result<()> {
        let expected = if log { "0 < low < high < inf" } else { "finite low < high" };
        if !low.is_finite() || !high.is_finite() {
            return Err(self.invalid("bounds must be finite numbers", expected));
        }
        if log && low <= 0.0 {
            return Err(self.invalid(format!("lower bound {low} is not > 0"), expected));
        }
        if low >= high {
            return Err(
                self.invalid(format!("lower bound {low} is not < upper bound {high}"), expected)
            );
        }
        Ok(())
    }

    fn check_float_q(&self, low: f64, high: f64, q: f64) -> Result<()> {
        if !(q.is_finite() && q > 0.0) {
            return Err(self.invalid(format!("q = {q}"), "a finite q > 0"));
        }
        for (what, b) in [("lower", low), ("upper", high)] {
            if !near_integer(b / q) {
                return Err(self.invalid(
                    format!("{what} bound {b} is not a multiple of q = {q}"),
                    "bounds that are multiples of q",
                ));
            }
        }
        let (lo, hi) = float_q_bounds(low, high, q);
        if lo >= hi {
            return Err(self
                .invalid("the bounds are the same multiple of q", "low < high, q apart at least"));
        }
        if matches!(self, Domain::QLogUniform { .. }) && lo <= 0.0 {
            return Err(self.invalid("lower bound rounds to 0", "low ≥ q"));
        }
        Ok(())
    }

    fn check_base(&self, base: f64) -> Result<()> {
        if !(base.is_finite() && base > 0.0 && base != 1.0) {
            return Err(self.invalid(format!("base = {base}"), "a finite base > 0 other than 1"));
        }
        Ok(())
    }

    fn check_normal(&self, mean: f64, sd: f64) -> Result<()> {
        if !mean.is_finite() {
            return Err(self.invalid(format!("mean = {mean}"), "a finite mean"));
        }
        if !(sd.is_finite() && sd > 0.0) {
            return Err(self.invalid(format!("sd = {sd}"), "a finite sd > 0"));
        }
        if !normal_reach(mean, sd).is_finite() {
            return Err(self.invalid(
                format!("mean = {mean}, sd = {sd}: samples would overflow to infinity"),
                "|mean| + 64·sd < f64::MAX",
            ));
        }
        Ok(())
    }

    fn check_int_range(&self, low: i64, high: i64, q: i64, log: bool) -> Result<()> {
        if q < 1 {
            return Err(self.invalid(format!("q = {q}"), "an integer q ≥ 1"));
        }
        if log && low <= 0 {
            return Err(self.invalid(format!("lower bound {low} is not > 0"), "0 < low < high"));
        }
        if q == 1 {
            if low >= high {
                let expected = if log { "0 < low < high" } else { "low < high (high is excluded)" };
                return Err(self.invalid(
                    format!("[{low}, {high}) is empty: the upper bound is excluded"),
                    expected,
                ));
            }
            return Ok(());
        }
        let (lo, hi) = int_q_bounds(low, high, q);
        if lo >= hi {
            return Err(self.invalid(
                format!("[{low}, {high}] holds fewer than two multiples of q = {q}"),
                "bounds that span at least two multiples of q",
            ));
        }
        Ok(())
    }

    /// Draw one value. Integer domains give [`Value::Int`], float domains [`Value::Float`],
    /// `choice` one of its values. A domain that fails [`validate`](Self::validate) still
    /// returns some value (its lower bound, or null for an empty choice) instead of panicking.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Value {
        match *self {
            Domain::Uniform { low, high } => Value::Float(uniform_f64(rng, low, high)),
            Domain::QUniform { low, high, q } => {
                let (lo, hi) = float_q_bounds(low, high, q);
                Value::Float(round_to_q(uniform_f64(rng, lo, hi), q))
            }
            Domain::LogUniform { low, high, .. } => {
                Value::Float(clamp_f64(log_uniform_f64(rng, low, high), low, high))
            }
            Domain::QLogUniform { low, high, q, .. } => {
                let (lo, hi) = float_q_bounds(low, high, q);
                let x = clamp_f64(log_uniform_f64(rng, lo, hi), lo, hi);
                Value::Float(round_to_q(x, q))
            }
            Domain::Randn { mean, sd } => Value::Float(normal(rng, mean, sd)),
            Domain::QRandn { mean, sd, q } => Value::Float(round_to_q(normal(rng, mean, sd), q)),
            Domain::RandInt { low, high } => Value::Int(int_in(rng, low.into(), high.into())),
            Domain::QRandInt { low, high, q } => {
                if q <= 1 {
                    return Value::Int(int_in(rng, low.into(), high.into()));
                }
                let (lo, hi) = int_q_bounds(low, high, q);
                let v = int_in(rng, lo, hi);
                Value::Int(clamp_i128(round_to_multiple(v.into(), q.into())))
            }
            Domain::LogRandInt { low, high, .. } => {
                Value::Int(clamp_i128(log_int_in(rng, low.into(), high.into())))
            }
            Domain::QLogRandInt { low, high, q, .. } => {
                if q <= 1 {
                    return Value::Int(clamp_i128(log_int_in(rng, low.into(), high.into())));
                }
                let (lo, hi) = int_q_bounds(low, high, q);
                let v = log_int_in(rng, lo, hi);
                Value::Int(clamp_i128(round_to_multiple(v, q.into())))
            }
            Domain::Choice(ref values) => {
                if values.is_empty() {
                    return Value::Null;
                }
                values[rng.random_range(0..values.len())].clone()
            }
        }
    }

    /// The values that bound what this domain samples: the lowest and highest it can give (every
    /// value of a choice; a normal domain's mean, as it has no bounds). For checking a domain
    /// against the range a train function accepts before anything is sampled.
    pub fn extremes(&self) -> Vec<Value> {
        let (f, i) = (Value::Float, Value::Int);
        match *self {
            Domain::Uniform { low, high }
            | Domain::LogUniform { low, high, .. }
            | Domain::QUniform { low, high, .. }
            | Domain::QLogUniform { low, high, .. } => vec![f(low), f(high)],
            Domain::Randn { mean, .. } | Domain::QRandn { mean, .. } => vec![f(mean)],
            Domain::RandInt { low, high } | Domain::LogRandInt { low, high, .. } => {
                vec![i(low), i(high.saturating_sub(1).max(low))]
            }
            Domain::QRandInt { low, high, q } | Domain::QLogRandInt { low, high, q, .. } => {
                if q <= 1 {
                    vec![i(low), i(high.saturating_sub(1).max(low))]
                } else {
                    let (lo, hi) = int_q_bounds(low, high, q);
                    vec![i(clamp_i128(lo)), i(clamp_i128(hi))]
                }
            }
            Domain::Choice(ref values) => values.clone(),
        }
    }

    /// Whether `v` is a value this domain can produce (bounds, type, and the q grid up to float
    /// rounding). Normal domains accept any finite number of the right kind.
    pub fn contains(&self, v: &Value) -> bool {
        let on_grid = |x: f64, q: f64| {
            let k = x / q;
            (k - k.round()).abs() <= 1e-6 * k.abs().max(1.0)
        };
        let tol = |a: f64, b: f64| 1e-9 * a.abs().max(b.abs()).max(1e-300);
        match (self, v) {
            (Domain::Uniform { low, high }, Value::Float(x)) => *low <= *x && *x <= *high,
            (Domain::LogUniform { low, high, .. }, Value::Float(x)) => *low <= *x && *x <= *high,
            (Domain::QUniform { low, high, q }, Value::Float(x))
            | (Domain::QLogUniform { low, high, q, .. }, Value::Float(x)) => {
                let t = tol(*low, *high);
                *low - t <= *x && *x <= *high + t && on_grid(*x, *q)
            }
            (Domain::Randn { .. }, Value::Float(x)) => x.is_finite(),
            (Domain::QRandn { q, .. }, Value::Float(x)) => x.is_finite() && on_grid(*x, *q),
            (Domain::RandInt { low, high }, Value::Int(i))
            | (Domain::LogRandInt { low, high, .. }, Value::Int(i)) => *low <= *i && *i < *high,
            (Domain::QRandInt { low, high, q }, Value::Int(i))
            | (Domain::QLogRandInt { low, high, q, .. }, Value::Int(i)) => {
                if *q <= 1 {
                    *low <= *i && *i < *high
                } else {
                    let (lo, hi) = int_q_bounds(*low, *high, *q);
                    let i = i128::from(*i);
                    lo <= i && i <= hi && i % i128::from(*q) == 0
                }
            }
            (Domain::Choice(values), v) => values.contains(v),
            _ => false,
        }
    }

    /// The sweep-file form: `{ loguniform = [0.0001, 0.1] }`.
    pub fn to_value(&self) -> Value {
        let f = Value::Float;
        let i = Value::Int;
        let with_base = |mut args: Vec<Value>, base: f64| {
            if base != 10.0 {
                args.push(f(base));
            }
            Value::List(args)
        };
        let args = match *self {
            Domain::Uniform { low, high } => Value::List(vec![f(low), f(high)]),
            Domain::QUniform { low, high, q } => Value::List(vec![f(low), f(high), f(q)]),
            Domain::LogUniform { low, high, base } => with_base(vec![f(low), f(high)], base),
            Domain::QLogUniform { low, high, q, base } => {
                with_base(vec![f(low), f(high), f(q)], base)
            }
            Domain::Randn { mean, sd } => Value::List(vec![f(mean), f(sd)]),
            Domain::QRandn { mean, sd, q } => Value::List(vec![f(mean), f(sd), f(q)]),
            Domain::RandInt { low, high } => Value::List(vec![i(low), i(high)]),
            Domain::QRandInt { low, high, q } => Value::List(vec![i(low), i(high), i(q)]),
            Domain::LogRandInt { low, high, base } => with_base(vec![i(low), i(high)], base),
            Domain::QLogRandInt { low, high, q, base } => {
                with_base(vec![i(low), i(high), i(q)], base)
            }
            Domain::Choice(ref values) => Value::List(values.clone()),
        };
        let mut m = Map::new();
        m.insert(self.name(), args);
        Value::Map(m)
    }

    /// Parse the sweep-file form of a domain named `name` with arguments `args` (a list in the
    /// documented order, or a table with `low`/`high`/`q`/`base`/`mean`/`sd`). Returns `None` if
    /// `name` is not a domain name. The result is validated.
    pub(crate) fn from_form(name: &str, args: &Value) -> Option<Result<Domain>> {
        let spec: &[(&str, Option<ArgDefault>)] = match name {
            "uniform" => &[("low", None), ("high", None)],
            "quniform" => &[("low", None), ("high", None), ("q", None)],
            "loguniform" | "lograndint" => {
                &[("low", None), ("high", None), ("base", Some(ArgDefault::F(10.0)))]
            }
            "qloguniform" | "qlograndint" => {
                &[("low", None), ("high", None), ("q", None), ("base", Some(ArgDefault::F(10.0)))]
            }
            "randn" => &[("mean", Some(ArgDefault::F(0.0))), ("sd", Some(ArgDefault::F(1.0)))],
            "qrandn" => &[("mean", None), ("sd", None), ("q", None)],
            "randint" => &[("low", None), ("high", None)],
            "qrandint" => &[("low", None), ("high", None), ("q", Some(ArgDefault::I(1)))],
            "choice" => {
                return Some(match args {
                    Value::List(values) => checked(Domain::Choice(values.clone())),
                    other => Err(Error::space(
                        "",
                        format!("choice: expected a list of values, found {}", other.describe()),
                    )),
                });
            }
            _ => return None,
        };
        Some(parse_args(name, spec, args).and_then(|a| build(name, &a)))
    }
}

#[derive(Clone, Copy)]
enum ArgDefault {
    F(f64),
    I(i64),
}

fn base_arg(base: f64) -> String {
    if base == 10.0 { String::new() } else { format!(", base={base}") }
}

fn parse_args(name: &str, spec: &[(&str, Option<ArgDefault>)], args: &Value) -> Result<Vec<Value>> {
    let names: Vec<&str> = spec.iter().map(|(n, _)| *n).collect();
    let required = spec.iter().filter(|(_, d)| d.is_none()).count();
    let usage = format!("{name} = [{}]", names.join(", "));
    let mut out: Vec<Option<Value>> = vec![None; spec.len()];
    match args {
        Value::List(items) => {
            if items.len() < required || items.len() > spec.len() {
                return Err(Error::space(
                    "",
                    format!(
                        "{name}: expected {} arguments, found {}; write `{usage}`",
                        if required == spec.len() {
                            required.to_string()
                        } else {
                            format!("{required} to {}", spec.len())
                        },
                        items.len()
                    ),
                ));
            }
            for (slot, v) in out.iter_mut().zip(items) {
                *slot = Some(v.clone());
            }
        }
        Value::Map(m) => {
            for (k, v) in m.iter() {
                match names.iter().position(|n| *n == k) {
                    Some(i) => out[i] = Some(v.clone()),
                    None => {
                        return Err(Error::space(
                            "",
                            format!(
                                "{name}: unknown argument `{k}`; arguments are {}",
                                names.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
        other => {
            return Err(Error::space(
                "",
                format!(
                    "{name}: expected a list of arguments, found {}; write `{usage}`",
                    other.describe()
                ),
            ));
        }
    }
    out.into_iter()
        .zip(spec)
        .map(|(v, (arg, default))| match (v, default) {
            (Some(v), _) => Ok(v),
            (None, Some(ArgDefault::F(x))) => Ok(Value::Float(*x)),
            (None, Some(ArgDefault::I(x))) => Ok(Value::Int(*x)),
            (None, None) => {
                Err(Error::space("", format!("{name}: missing argument `{arg}`; write `{usage}`")))
            }
        })
        .collect()
}

fn num(name: &str, arg: &str, v: &Value) -> Result<f64> {
    v.as_f64().ok_or_else(|| {
        Error::space("", format!("{name}: `{arg}` must be a number, found {}", v.describe()))
    })
}

fn int(name: &str, arg: &str, v: &Value) -> Result<i64> {
    v.as_i64().ok_or_else(|| {
        Error::space("", format!("{name}: `{arg}` must be an integer, found {}", v.describe()))
    })
}

fn build(name: &str, a: &[Value]) -> Result<Domain> {
    let f = |i: usize, arg: &str| num(name, arg, &a[i]);
    let n = |i: usize, arg: &str| int(name, arg, &a[i]);
    let d = match name {
        "uniform" => Domain::Uniform { low: f(0, "low")?, high: f(1, "high")? },
        "quniform" => Domain::QUniform { low: f(0, "low")?, high: f(1, "high")?, q: f(2, "q")? },
        "loguniform" => {
            Domain::LogUniform { low: f(0, "low")?, high: f(1, "high")?, base: f(2, "base")? }
        }
        "qloguniform" => Domain::QLogUniform {
            low: f(0, "low")?,
            high: f(1, "high")?,
            q: f(2, "q")?,
            base: f(3, "base")?,
        },
        "randn" => Domain::Randn { mean: f(0, "mean")?, sd: f(1, "sd")? },
        "qrandn" => Domain::QRandn { mean: f(0, "mean")?, sd: f(1, "sd")?, q: f(2, "q")? },
        "randint" => Domain::RandInt { low: n(0, "low")?, high: n(1, "high")? },
        "qrandint" => Domain::QRandInt { low: n(0, "low")?, high: n(1, "high")?, q: n(2, "q")? },
        "lograndint" => {
            Domain::LogRandInt { low: n(0, "low")?, high: n(1, "high")?, base: f(2, "base")? }
        }
        "qlograndint" => Domain::QLogRandInt {
            low: n(0, "low")?,
            high: n(1, "high")?,
            q: n(2, "q")?,
            base: f(3, "base")?,
        },
        _ => return Err(Error::space("", format!("unknown domain `{name}`"))),
    };
    checked(d)
}

/// numpy's `uniform(low, high)`: `low + (high - low)·u`, `u ∈ [0, 1)`.
fn uniform_f64<R: Rng + ?Sized>(rng: &mut R, low: f64, high: f64) -> f64 {
    let u: f64 = rng.random();
    low + (high - low) * u
}

fn log_uniform_f64<R: Rng + ?Sized>(rng: &mut R, low: f64, high: f64) -> f64 {
    if !(low > 0.0 && high > 0.0) {
        return low;
    }
    uniform_f64(rng, low.ln(), high.ln()).exp()
}

/// How far from zero a normal sample can land: standard normal draws stay far inside 64.
fn normal_reach(mean: f64, sd: f64) -> f64 {
    mean.abs() + 64.0 * sd
}

fn normal<R: Rng + ?Sized>(rng: &mut R, mean: f64, sd: f64) -> f64 {
    let z: f64 = rng.sample(StandardNormal);
    mean + sd * z
}

/// Uniform integer in `[low, high)`; `low` if the range is empty.
fn int_in<R: Rng + ?Sized>(rng: &mut R, low: i128, high: i128) -> i64 {
    let lo = clamp_i128(low);
    let hi = clamp_i128(high);
    if lo >= hi { lo } else { rng.random_range(lo..hi) }
}

/// Ray's integer log-uniform: `floor(exp(uniform(ln low, ln high)))`, kept in `[low, high)`.
fn log_int_in<R: Rng + ?Sized>(rng: &mut R, low: i128, high: i128) -> i128 {
    if low <= 0 || low >= high {
        return low;
    }
    let x = log_uniform_f64(rng, low as f64, high as f64).floor();
    let v = if x.is_finite() { x as i128 } else { low };
    v.clamp(low, high - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SearchRng;

    /// Every sample lies between a domain's extremes, and the extremes can be sampled.
    #[test]
    fn samples_lie_within_the_extremes() {
        let domains = [
            uniform(-1.0, 2.0).unwrap(),
            loguniform(1e-4, 1e-1).unwrap(),
            quniform(0.0, 1.0, 0.25).unwrap(),
            randint(3, 9).unwrap(),
            qrandint(0, 10, 3).unwrap(),
            lograndint(1, 100).unwrap(),
            choice([4, 1, 9]),
        ];
        let mut rng = SearchRng::seed_from_u64(1);
        for d in domains {
            let ends = d.extremes();
            let (lo, hi) = ends
                .iter()
                .filter_map(Value::as_f64)
                .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
            for end in &ends {
                assert!(d.contains(end), "{}: extreme {end} cannot be sampled", d.describe());
            }
            for _ in 0..500 {
                let x = d.sample(&mut rng).as_f64().unwrap();
                assert!(lo <= x && x <= hi, "{}: {x} outside {lo}..={hi}", d.describe());
            }
        }
        assert_eq!(randint(3, 9).unwrap().extremes(), [Value::Int(3), Value::Int(8)]);
        assert_eq!(qrandint(0, 10, 3).unwrap().extremes(), [Value::Int(0), Value::Int(9)]);
    }

    #[test]
    fn constructors_reject_bad_arguments() {
        assert!(loguniform(0.0, 1.0).is_err());
        assert!(randint(5, 5).is_err());
        assert!(uniform(f64::NAN, 1.0).is_err());
        assert!(uniform(1.0, 0.0).is_err());
        assert!(quniform(0.0, 1.0, 0.0).is_err());
        assert!(quniform(0.0, 1.0, -0.1).is_err());
        assert!(quniform(0.05, 1.0, 0.1).is_err(), "Ray: lower bound must be divisible by q");
        assert!(quniform(0.0, 1.0, 0.1).is_ok());
        assert!(randn(0.0, 0.0).is_err());
        // Samples (or their grid index) would overflow to infinity: proptest found both.
        assert!(randn(0.0, 1e307).is_err());
        assert!(qrandn(0.0, 2.84, 1.75e-308).is_err());
        assert!(qrandn(0.0, 2.84, 1e-300).is_ok());
        assert!(qrandint(1, 4, 5).is_err());
        assert!(qrandint(0, 10, 0).is_err());
        assert!(lograndint(0, 10).is_err());
        assert!(loguniform(1e-4, 1e-1).unwrap().with_base(1.0).is_err());
        assert!(loguniform(1e-4, 1e-1).unwrap().with_base(2.0).is_ok());
        assert!(uniform(0.0, 1.0).unwrap().with_base(2.0).is_err());
        assert!(choice(Vec::<i64>::new()).validate().is_err());
        let e = loguniform(0.0, 1.0).unwrap_err();
        assert!(e.to_string().contains("0 < low < high"), "{e}");
    }

    #[test]
    fn qrandint_follows_rays_rounding() {
        // integers(0, 10) rounded to multiples of 5 with ties to even: 0,1,2 -> 0; 3..7 -> 5;
        // 8,9 -> 10. So 10 is reachable (Ray: "upper bound inclusive").
        let d = qrandint(0, 10, 5).unwrap();
        let mut rng = SearchRng::seed_from_u64(1);
        let mut counts = [0usize; 3];
        for _ in 0..10_000 {
            match d.sample(&mut rng) {
                Value::Int(0) => counts[0] += 1,
                Value::Int(5) => counts[1] += 1,
                Value::Int(10) => counts[2] += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        let p: Vec<f64> = counts.iter().map(|c| *c as f64 / 10_000.0).collect();
        assert!((p[0] - 0.3).abs() < 0.03 && (p[1] - 0.5).abs() < 0.03, "{p:?}");
        // q == 1 is Ray's short cut: the upper bound stays excluded.
        let d = qrandint(0, 3, 1).unwrap();
        for _ in 0..1000 {
            assert!(d.contains(&d.sample(&mut rng)));
            assert_ne!(d.sample(&mut rng), Value::Int(3));
        }
        assert_eq!(round_to_multiple(25, 10), 20);
        assert_eq!(round_to_multiple(35, 10), 40);
        assert_eq!(round_to_multiple(-5, 10), 0);
    }

    #[test]
    fn randint_excludes_upper_and_log_domains_stay_in_bounds() {
        let mut rng = SearchRng::seed_from_u64(2);
        let d = randint(0, 2).unwrap();
        let mut seen = [false; 2];
        for _ in 0..200 {
            match d.sample(&mut rng) {
                Value::Int(i) => seen[usize::try_from(i).unwrap()] = true,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, [true, true]);
        let d = lograndint(1, 1000).unwrap();
        for _ in 0..1000 {
            assert!(d.contains(&d.sample(&mut rng)));
        }
        let d = qloguniform(0.1, 10.0, 0.1).unwrap();
        for _ in 0..1000 {
            let v = d.sample(&mut rng);
            assert!(d.contains(&v), "{v:?}");
        }
    }

    #[test]
    fn sweep_form_round_trips() {
        let ds = [
            uniform(-1.0, 1.0).unwrap(),
            quniform(0.0, 1.0, 0.25).unwrap(),
            loguniform(1e-4, 1e-1).unwrap(),
            loguniform(1e-4, 1e-1).unwrap().with_base(2.0).unwrap(),
            qloguniform(1.0, 100.0, 1.0).unwrap(),
            randn(0.0, 1.0).unwrap(),
            qrandn(1.0, 2.0, 0.5).unwrap(),
            randint(1, 10).unwrap(),
            qrandint(0, 100, 10).unwrap(),
            lograndint(1, 1024).unwrap(),
            qlograndint(8, 1024, 8).unwrap(),
            choice(["a", "b"]),
        ];
        for d in ds {
            let v = d.to_value();
            let (name, args) = v.as_map().unwrap().iter().next().unwrap();
            assert_eq!(Domain::from_form(name, args).unwrap().unwrap(), d);
        }
        assert!(Domain::from_form("nope", &Value::Null).is_none());
        let e = Domain::from_form("uniform", &Value::from(vec![1.0])).unwrap().unwrap_err();
        assert!(e.to_string().contains("uniform = [low, high]"), "{e}");
    }
}
