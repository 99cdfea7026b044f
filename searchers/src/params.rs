//! `Params`: one sampled set of hyperparameters, the output of a searcher and the input of a
//! trial. Ordered as the search space was written, JSON-like, with typed getters whose errors
//! name the key and the type found. Nested maps are reached with dotted paths (`"model.lr"`).
//!
//! A copy can record which top-level keys were read (`track_reads`, then `unread`): a trial's
//! params that its train function never looked at are a search that changes nothing.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::value::{FromValue, Map, Value};

/// A sampled set of hyperparameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Params(Map, #[serde(skip)] Option<Reads>);

/// The top-level keys read so far, shared by a tracked `Params` and its clones.
type Reads = Arc<Mutex<BTreeSet<String>>>;

/// Equal when the entries are (what was read does not count).
impl PartialEq for Params {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

/// As a person reads them, in the sweep file's spelling: `lr=0.0373, opt.kind="adam",
/// hidden=64` (nested params by their dotted keys, floats short). Reads nothing (a train
/// function that prints its params is not told it read them all).
impl std::fmt::Display for Params {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (key, value)) in self.leaves().iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{key}={}", crate::value::param_text(value))?;
        }
        Ok(())
    }
}

impl Params {
    /// Empty params.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builder-style insert.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.0.insert(key, value);
        self
    }

    /// Insert or replace a top-level key (a replaced key keeps its position).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        self.0.insert(key, value)
    }

    /// Typed value at a key or dotted path: `params.get::<f64>("model.lr")`.
    ///
    /// A top-level key that itself contains dots is found too (it is tried first).
    pub fn get<T: FromValue>(&self, path: &str) -> Result<T> {
        let v = self.value(path).ok_or_else(|| self.missing(path))?;
        T::from_value(v).ok_or_else(|| Error::ParamType {
            key: path.to_string(),
            expected: T::EXPECTED,
            found: v.describe(),
        })
    }

    /// Typed value at a path given as segments: `params.get_path::<f64>(&["model", "lr"])`.
    pub fn get_path<T: FromValue>(&self, path: &[&str]) -> Result<T> {
        let joined = path.join(".");
        let v = self.value_at(path).ok_or_else(|| self.missing(&joined))?;
        T::from_value(v).ok_or_else(|| Error::ParamType {
            key: joined,
            expected: T::EXPECTED,
            found: v.describe(),
        })
    }

    /// The raw value at a key or dotted path.
    pub fn value(&self, path: &str) -> Option<&Value> {
        if let Some(v) = self.0.get(path) {
            self.read(path);
            return Some(v);
        }
        let segments: Vec<&str> = path.split('.').collect();
        self.value_at(&segments)
    }

    /// The raw value at a path given as segments.
    pub fn value_at(&self, path: &[&str]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        self.read(first);
        let mut v = self.0.get(first)?;
        for seg in rest {
            v = v.as_map()?.get(seg)?;
        }
        Some(v)
    }

    /// Whether a key or dotted path is present.
    pub fn contains(&self, path: &str) -> bool {
        self.value(path).is_some()
    }

    /// Set the value at a path, creating intermediate maps. Fails if a non-map is in the way.
    pub fn set_path(&mut self, path: &[&str], value: Value) -> Result<()> {
        let Some((last, parents)) = path.split_last() else {
            return Err(Error::space("", "empty parameter path"));
        };
        let mut map = &mut self.0;
        for (i, seg) in parents.iter().enumerate() {
            if !map.contains_key(seg) {
                map.insert(*seg, Map::new());
            }
            map = match map.get_mut(seg) {
                Some(Value::Map(m)) => m,
                Some(other) => {
                    return Err(Error::ParamType {
                        key: path[..=i].join("."),
                        expected: "a map",
                        found: other.describe(),
                    });
                }
                None => return Err(Error::space(path[..=i].join("."), "could not create map")),
            };
        }
        map.insert(*last, value);
        Ok(())
    }

    /// Top-level entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.read_all();
        self.0.iter()
    }

    /// Top-level keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.read_all();
        self.0.keys()
    }

    /// Number of top-level entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Leaves with dotted keys, in order: `{"model": {"lr": 0.1}}` gives `[("model.lr", 0.1)]`.
    /// Lists are leaves. This is the view results tables use for their columns.
    pub fn flatten(&self) -> Vec<(String, Value)> {
        self.read_all();
        self.leaves()
    }

    /// `flatten`'s leaves, read by no one.
    fn leaves(&self) -> Vec<(String, Value)> {
        fn walk(prefix: &str, m: &Map, out: &mut Vec<(String, Value)>) {
            for (k, v) in m.iter() {
                let key = if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
                match v {
                    Value::Map(inner) if !inner.is_empty() => walk(&key, inner, out),
                    other => out.push((key, other.clone())),
                }
            }
        }
        let mut out = Vec::new();
        walk("", &self.0, &mut out);
        out
    }

    /// The underlying map.
    pub fn as_map(&self) -> &Map {
        self.read_all();
        &self.0
    }

    /// Into a [`Value::Map`].
    pub fn into_value(self) -> Value {
        self.read_all();
        Value::Map(self.0)
    }

    /// From now on, records the top-level keys read, in this copy and its clones (a worker
    /// tracks the params its train function is given).
    pub fn track_reads(&mut self) {
        self.1 = Some(Reads::default());
    }

    /// The top-level keys never read since `track_reads` (none when not tracking). Iterating,
    /// flattening or taking the whole map counts as reading every key.
    pub fn unread(&self) -> Vec<String> {
        let Some(reads) = &self.1 else { return Vec::new() };
        let reads = reads.lock().unwrap_or_else(|e| e.into_inner());
        self.0.keys().filter(|k| !reads.contains(*k)).map(String::from).collect()
    }

    fn read(&self, key: &str) {
        if let Some(reads) = &self.1 {
            reads.lock().unwrap_or_else(|e| e.into_inner()).insert(key.to_owned());
        }
    }

    /// Counts every key as read (for a train function that hands the params on whole).
    pub fn read_all(&self) {
        if let Some(reads) = &self.1 {
            reads.lock().unwrap_or_else(|e| e.into_inner()).extend(self.0.keys().map(String::from));
        }
    }

    fn missing(&self, path: &str) -> Error {
        // Name the keys present at the deepest level that exists, so a typo is easy to spot.
        let segments: Vec<&str> = path.split('.').collect();
        let mut map = &self.0;
        for seg in &segments[..segments.len().saturating_sub(1)] {
            match map.get(seg) {
                Some(Value::Map(m)) => map = m,
                _ => break,
            }
        }
        Error::MissingParam {
            key: path.to_string(),
            present: map.keys().map(String::from).collect(),
        }
    }
}

impl From<Map> for Params {
    fn from(m: Map) -> Self {
        Params(m, None)
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Params {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Params(iter.into_iter().collect(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Params {
        let mut model = Map::new();
        model.insert("lr", 0.01);
        model.insert("hidden", 128);
        Params::new().with("model", model).with("name", "mlp").with("flag", true)
    }

    #[test]
    fn a_tracked_copy_names_the_keys_never_read() {
        let mut p = sample().with("unused", 1);
        assert!(p.unread().is_empty(), "not tracking");
        p.track_reads();
        let copy = p.clone();
        assert_eq!(copy.get::<f64>("model.lr").unwrap(), 0.01);
        assert!(p.contains("flag"));
        assert!(p.get::<i64>("missing").is_err());
        assert_eq!(p.unread(), ["name", "unused"]);
        assert_eq!(p, sample().with("unused", 1), "reads do not change equality");
        let _ = p.flatten();
        assert!(p.unread().is_empty(), "flattening reads every key");
    }

    #[test]
    fn params_print_as_a_sweep_file_spells_them_and_read_nothing() {
        let mut p = sample().with("lr", 0.037302865731).with("wd", 3e-5);
        p.track_reads();
        let text = p.to_string();
        assert_eq!(
            text,
            r#"model.lr=0.0100, model.hidden=128, name="mlp", flag=true, lr=0.0373, wd=3.000e-5"#
        );
        assert_eq!(p.unread().len(), 5, "printing reads nothing");
        assert_eq!(Params::new().to_string(), "");
    }

    #[test]
    fn typed_getters_and_paths() {
        let p = sample();
        assert_eq!(p.get::<f64>("model.lr").unwrap(), 0.01);
        assert_eq!(p.get::<i64>("model.hidden").unwrap(), 128);
        assert_eq!(p.get::<usize>("model.hidden").unwrap(), 128);
        assert_eq!(p.get::<f64>("model.hidden").unwrap(), 128.0);
        assert_eq!(p.get_path::<f64>(&["model", "lr"]).unwrap(), 0.01);
        assert_eq!(p.get::<String>("name").unwrap(), "mlp");
        assert!(p.get::<bool>("flag").unwrap());
    }

    #[test]
    fn errors_name_key_and_type() {
        let p = sample();
        let e = p.get::<i64>("model.lr").unwrap_err();
        assert_eq!(
            e,
            Error::ParamType {
                key: "model.lr".into(),
                expected: "an integer (i64)",
                found: "float 0.01".into()
            }
        );
        let e = p.get::<f64>("model.lrr").unwrap_err();
        assert_eq!(
            e,
            Error::MissingParam {
                key: "model.lrr".into(),
                present: vec!["lr".into(), "hidden".into()]
            }
        );
    }

    #[test]
    fn flatten_and_set_path() {
        let mut p = sample();
        p.set_path(&["model", "opt", "beta"], Value::Float(0.9)).unwrap();
        let flat: Vec<String> = p.flatten().into_iter().map(|(k, _)| k).collect();
        assert_eq!(flat, ["model.lr", "model.hidden", "model.opt.beta", "name", "flag"]);
        assert!(p.set_path(&["name", "x"], Value::Null).is_err());
    }
}
