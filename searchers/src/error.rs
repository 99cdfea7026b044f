//! The one error type of the crate. Every policy decision that can be refused because of
//! something the user wrote (a bound, a sweep-file key, a metric name) comes back as one of
//! these variants, naming what was wrong, where, and what would be right. Nothing here panics.

use crate::id::TrialId;

/// Crate-wide result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `rtune-searchers`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A domain's arguments are outside what the domain accepts, e.g. `loguniform(0, 1)`.
    /// `path` is empty when the domain was built on its own, before it was given a key.
    #[error("{}{domain}: {problem}; valid: {expected}", path_prefix(path))]
    InvalidDomain {
        /// Dotted key path of the parameter (`model.lr`), or empty.
        path: String,
        /// The domain as written, e.g. `loguniform(0, 1)`.
        domain: String,
        /// What is wrong with it.
        problem: String,
        /// What would be valid.
        expected: String,
    },

    /// The search space itself is malformed: a duplicate or empty key, a sweep-file entry that
    /// is neither a value, a table nor a known domain, wrong argument shapes.
    #[error("{}{problem}", path_prefix(path))]
    InvalidSpace {
        /// Dotted key path of the offending entry.
        path: String,
        /// What is wrong and what would be right.
        problem: String,
    },

    /// A searcher cannot handle a kind of entry (e.g. `grid_search` in a TPE space).
    #[error("{}{searcher} does not support {what}; {hint}", path_prefix(path))]
    Unsupported {
        /// Dotted key path of the entry.
        path: String,
        /// Which searcher refused it.
        searcher: &'static str,
        /// The kind of entry.
        what: &'static str,
        /// What to use instead.
        hint: &'static str,
    },

    /// A dependent value's function returned an error.
    #[error("{}dependent value failed: {source}", path_prefix(path))]
    Dependent {
        /// Dotted key path of the dependent value.
        path: String,
        /// The error the function returned.
        source: Box<Error>,
    },

    /// A dependent value (a Rust closure) was asked to be written as data.
    #[error(
        "{}a dependent value (a Rust closure) cannot be serialised; build this space in code or replace the entry by a domain",
        path_prefix(path)
    )]
    NotSerializable {
        /// Dotted key path of the dependent value.
        path: String,
    },

    /// A typed getter asked for a key that is not in the params.
    #[error("no parameter `{key}` in params (present: {})", list(present))]
    MissingParam {
        /// The key or dotted path asked for.
        key: String,
        /// Keys present at the level where the lookup failed.
        present: Vec<String>,
    },

    /// A typed getter found a value of another type.
    #[error("parameter `{key}`: expected {expected}, found {found}")]
    ParamType {
        /// The key or dotted path asked for.
        key: String,
        /// The type asked for.
        expected: &'static str,
        /// The value found, with its type.
        found: String,
    },

    /// A result lacks the metric (or time attribute) a searcher or scheduler needs.
    #[error("metric `{metric}` missing from the reported result (keys present: {})", list(present))]
    MissingMetric {
        /// The metric asked for.
        metric: String,
        /// The keys the result has.
        present: Vec<String>,
    },

    /// A setting of a searcher or scheduler is out of range.
    #[error("{component}: invalid `{setting}` = {value}; expected {expected}")]
    InvalidConfig {
        /// The searcher or scheduler.
        component: &'static str,
        /// The setting's name.
        setting: &'static str,
        /// The value given.
        value: String,
        /// What would be valid.
        expected: String,
    },

    /// A searcher or scheduler was used before it was told the metric and mode.
    #[error(
        "{component}: metric and mode are not set; pass them with `.metric(..).mode(..)` or `set_metric`"
    )]
    NotConfigured {
        /// The searcher or scheduler.
        component: &'static str,
    },

    /// A searcher built without a space was used outside a `Tuner` (which hands it its param
    /// space) and was never given one.
    #[error(
        "{component}: no search space; build it with `with_space(space)`, or hand it to a \
         Tuner, which gives it the sweep's param space"
    )]
    NoSpace {
        /// The searcher.
        component: &'static str,
    },

    /// A searcher or scheduler that ranks trials by one metric was given several objectives.
    #[error(
        "{component} ranks trials by one metric, and the sweep has {objectives} objectives; {takes}"
    )]
    SingleObjective {
        /// The searcher or scheduler (`this searcher` where the trait's default refuses).
        component: &'static str,
        /// How many objectives it was given.
        objectives: usize,
        /// What takes several.
        takes: &'static str,
    },

    /// Constraints were given to a searcher that cannot steer by them.
    #[error(
        "{component} does not take constraints (metrics that must be <= 0): TPE, NSGA-II, the GP \
         and random search do"
    )]
    NoConstraints {
        /// The searcher (`this searcher` where the trait's default refuses).
        component: &'static str,
    },

    /// An event named a trial the searcher or scheduler has never seen (or already forgot).
    #[error("{component}: unknown trial {trial}")]
    UnknownTrial {
        /// The searcher or scheduler.
        component: &'static str,
        /// The trial.
        trial: TrialId,
    },

    /// A saved state was handed to a searcher or scheduler of another kind, or does not fit
    /// the configuration it is restored into.
    #[error("cannot restore {expected}: {problem}")]
    InvalidState {
        /// The searcher or scheduler restoring.
        expected: &'static str,
        /// What does not fit.
        problem: String,
    },
}

impl Error {
    /// Fill in the key path of a domain or space error built before its key was known.
    pub(crate) fn at(mut self, at: &str) -> Self {
        match &mut self {
            Error::InvalidDomain { path, .. }
            | Error::InvalidSpace { path, .. }
            | Error::Unsupported { path, .. }
            | Error::Dependent { path, .. }
            | Error::NotSerializable { path } => {
                if path.is_empty() {
                    *path = at.to_string();
                } else if !at.is_empty() {
                    *path = format!("{at}.{path}");
                }
            }
            _ => {}
        }
        self
    }

    pub(crate) fn space(path: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::InvalidSpace { path: path.into(), problem: problem.into() }
    }

    pub(crate) fn config(
        component: &'static str,
        setting: &'static str,
        value: impl std::fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        // A number of many digits (`-1e308` written out in full) is shown in exponent form.
        let value = value.to_string();
        let value = match value.parse::<f64>() {
            Ok(x) if value.len() > 20 => format!("{x:e}"),
            _ => value,
        };
        Error::InvalidConfig { component, setting, value, expected: expected.into() }
    }
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() { String::new() } else { format!("parameter `{path}`: ") }
}

fn list(items: &[String]) -> String {
    if items.is_empty() { "none".to_string() } else { items.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_path() {
        let e = Error::InvalidDomain {
            path: String::new(),
            domain: "loguniform(0, 1)".into(),
            problem: "lower bound 0 is not > 0".into(),
            expected: "0 < low < high < inf".into(),
        };
        assert_eq!(
            e.to_string(),
            "loguniform(0, 1): lower bound 0 is not > 0; valid: 0 < low < high < inf"
        );
        let e = e.at("lr").at("model");
        assert!(e.to_string().starts_with("parameter `model.lr`: loguniform(0, 1)"), "{e}");
        let m = Error::MissingMetric { metric: "loss".into(), present: vec!["acc".into()] };
        assert_eq!(
            m.to_string(),
            "metric `loss` missing from the reported result (keys present: acc)"
        );
    }
}
