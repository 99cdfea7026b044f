//! The search space: the first stage of the pipeline, written by the user (builder or sweep
//! file), validated once, then handed to a searcher which resolves it into [`Params`].
//!
//! A space is an ordered list of keyed entries: constants, sampling [`Domain`]s, grid searches,
//! nested spaces and dependent values. Keys are non-empty, unique, and contain no `.` (dotted
//! paths address nested entries).
//!
//! # Sweep-file form
//!
//! Reads naturally in TOML and JSON. A table with exactly one key that names a domain is that
//! domain; any other table is a nested space; everything else is a constant.
//!
//! ```toml
//! epochs = 20                                  # constant
//! layers = { grid_search = [1, 2, 3] }
//! [model]                                      # nested space
//! lr = { loguniform = [1e-4, 1e-1] }           # [low, high] or [low, high, base]
//! hidden = { choice = [64, 128, 256] }
//! dropout = { quniform = [0.0, 0.5, 0.1] }     # [low, high, q]
//! batch = { qlograndint = { low = 16, high = 256, q = 16 } }   # table form works too
//! act = { constant = { choice = "relu" } }     # escape a table that would read as a domain
//! ```
//!
//! Domains: `uniform [low, high]`, `quniform [low, high, q]`, `loguniform [low, high, base?]`,
//! `qloguniform [low, high, q, base?]`, `randn [mean?, sd?]`, `qrandn [mean, sd, q]`,
//! `randint [low, high]`, `qrandint [low, high, q?]`, `lograndint [low, high, base?]`,
//! `qlograndint [low, high, q, base?]`, `choice [values]`, `grid_search [values]`.
//!
//! Dependent values are Rust closures: they exist only in spaces built in code and cannot be
//! serialised (serialising such a space is an [`Error::NotSerializable`] naming the key).

pub mod domain;

use std::fmt;
use std::sync::Arc;

use rand::Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::params::Params;
use crate::value::{Map, Value};
pub use domain::Domain;

/// A function computing a parameter from the ones already sampled (`sample_from` in Ray).
///
/// It receives the params resolved so far (every non-dependent entry, plus the dependent
/// entries before it in depth-first order; later dependents read as null) and a random source.
/// Not serialisable: a space holding one must be built in code.
#[derive(Clone)]
pub struct Dependent(Arc<DependentFn>);

type DependentFn = dyn Fn(&Params, &mut dyn Rng) -> Result<Value> + Send + Sync;

impl Dependent {
    /// Evaluate the function.
    pub fn eval(&self, params: &Params, rng: &mut dyn Rng) -> Result<Value> {
        (self.0)(params, rng)
    }
}

impl fmt::Debug for Dependent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Dependent(<fn>)")
    }
}

impl PartialEq for Dependent {
    /// Two dependents are equal only if they are the same function object.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A value computed from the params sampled before it, deterministically:
/// `dependent(|p| Ok(p.get::<i64>("hidden")? / 4))`.
pub fn dependent<F, V>(f: F) -> Dependent
where
    F: Fn(&Params) -> Result<V> + Send + Sync + 'static,
    V: Into<Value>,
{
    Dependent(Arc::new(move |p: &Params, _: &mut dyn Rng| f(p).map(Into::into)))
}

/// A value drawn by a function of the params sampled before it and a random source (Ray's
/// `sample_from`): `sample_from(|p, rng| Ok(rng.random_range(0..p.get::<i64>("a")?)))`.
pub fn sample_from<F, V>(f: F) -> Dependent
where
    F: Fn(&Params, &mut dyn Rng) -> Result<V> + Send + Sync + 'static,
    V: Into<Value>,
{
    Dependent(Arc::new(move |p: &Params, rng: &mut dyn Rng| f(p, rng).map(Into::into)))
}

/// A grid search over `values`: every value appears in every grid combination
/// (the searcher repeats the whole grid `num_samples` times).
pub fn grid_search<I, T>(values: I) -> Param
where
    I: IntoIterator<Item = T>,
    T: Into<Value>,
{
    Param::Grid(values.into_iter().map(Into::into).collect())
}

/// One entry of a search space.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// A fixed value.
    Const(Value),
    /// A value sampled from a domain.
    Sample(Domain),
    /// A grid search.
    Grid(Vec<Value>),
    /// A nested space (becomes a nested map in the params).
    Nested(SearchSpace),
    /// A value computed from other params.
    Dependent(Dependent),
}

impl Param {
    /// Sampled leaves in this entry (domains and grids, as `SearchSpace::resolve` counts them).
    fn sampled_count(&self) -> usize {
        match self {
            Param::Sample(_) | Param::Grid(_) => 1,
            Param::Nested(inner) => inner.sampled_count(),
            Param::Const(_) | Param::Dependent(_) => 0,
        }
    }
}

impl From<Domain> for Param {
    fn from(d: Domain) -> Self {
        Param::Sample(d)
    }
}

impl From<SearchSpace> for Param {
    fn from(s: SearchSpace) -> Self {
        Param::Nested(s)
    }
}

impl From<Dependent> for Param {
    fn from(d: Dependent) -> Self {
        Param::Dependent(d)
    }
}

impl From<Value> for Param {
    fn from(v: Value) -> Self {
        Param::Const(v)
    }
}

macro_rules! const_param {
    ($($t:ty),*) => {$(
        impl From<$t> for Param {
            fn from(v: $t) -> Self { Param::Const(Value::from(v)) }
        }
    )*};
}
const_param!(i8, i16, i32, i64, u8, u16, u32, u64, usize, f32, f64, bool, &str, String, Map);

impl<T: Into<Value>> From<Vec<T>> for Param {
    fn from(v: Vec<T>) -> Self {
        Param::Const(Value::from(v))
    }
}

/// Names a sweep file may use for domains; a one-key table with one of these keys is a domain.
pub const FORM_NAMES: &[&str] = &[
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "randn",
    "qrandn",
    "randint",
    "qrandint",
    "lograndint",
    "qlograndint",
    "choice",
    "grid_search",
    "constant",
];

/// An ordered set of keyed entries; see the module docs.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SearchSpace {
    entries: Vec<(String, Param)>,
    /// The first domain that failed to build, with its key: reported by `validate`.
    invalid: Option<(String, Error)>,
}

/// What [`SearchSpace::add`] accepts: anything that converts into a [`Param`], and also the
/// `Result` of a domain constructor, so `add("lr", loguniform(0.0, 1.0))` (no `?`) reports the
/// bad bounds from `validate` with the key named.
pub trait IntoParam {
    /// The entry, or the error that building it gave.
    fn into_param(self) -> Result<Param>;
}

impl<T: Into<Param>> IntoParam for T {
    fn into_param(self) -> Result<Param> {
        Ok(self.into())
    }
}

impl IntoParam for Result<Domain> {
    fn into_param(self) -> Result<Param> {
        self.map(Param::Sample)
    }
}

/// A sampled (non-constant, non-nested) leaf of a space, in depth-first order.
#[derive(Clone, Debug)]
pub(crate) struct Leaf<'a> {
    /// Key path.
    pub path: Vec<&'a str>,
    /// The entry.
    pub param: &'a Param,
}

impl Leaf<'_> {
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }
}

impl SearchSpace {
    /// An empty space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add an entry (builder style). Problems such as a duplicate key, an empty `choice` or a
    /// domain constructor's error passed without `?` are reported by
    /// [`validate`](Self::validate) (which every searcher's constructor calls), naming the key.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, key: impl Into<String>, param: impl IntoParam) -> Self {
        let key = key.into();
        match param.into_param() {
            Ok(p) => self.entries.push((key, p)),
            Err(e) => {
                if self.invalid.is_none() {
                    self.invalid = Some((key, e));
                }
            }
        }
        self
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Param)> {
        self.entries.iter().map(|(k, p)| (k.as_str(), p))
    }

    /// The entry under a top-level key.
    pub fn get(&self, key: &str) -> Option<&Param> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, p)| p)
    }

    /// Number of top-level entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the space has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Check every key and entry. Errors name the dotted key path and say what would be valid.
    pub fn validate(&self) -> Result<()> {
        self.validate_at("")
    }

    fn validate_at(&self, prefix: &str) -> Result<()> {
        if let Some((key, e)) = &self.invalid {
            return Err(e.clone().at(&join(prefix, key)));
        }
        let mut seen: Vec<&str> = Vec::with_capacity(self.entries.len());
        for (key, param) in &self.entries {
            let path = join(prefix, key);
            if key.is_empty() {
                return Err(Error::space(path, "empty key; keys must be non-empty"));
            }
            if key.contains('.') {
                return Err(Error::space(
                    path,
                    format!("key `{key}` contains `.`; use a nested space instead of dotted keys"),
                ));
            }
            if seen.contains(&key.as_str()) {
                return Err(Error::space(path, "duplicate key; each key may appear once"));
            }
            seen.push(key);
            match param {
                Param::Const(_) | Param::Dependent(_) => {}
                Param::Sample(d) => d.validate().map_err(|e| e.at(&path))?,
                Param::Grid(values) => {
                    if values.is_empty() {
                        return Err(Error::space(
                            path,
                            "grid_search has no values; give at least one",
                        ));
                    }
                }
                Param::Nested(inner) => inner.validate_at(&path)?,
            }
        }
        Ok(())
    }

    /// The sampled entries (domains and grids, nested ones included) by dotted key
    /// (`model.lr`), depth-first: what a tracker lists as a trial's searched params.
    pub fn sampled(&self) -> Vec<(String, &Param)> {
        let leaves = self.leaves().into_iter();
        leaves
            .filter(|l| matches!(l.param, Param::Sample(_) | Param::Grid(_)))
            .map(|l| (l.dotted(), l.param))
            .collect()
    }

    /// Sampled leaves (domains, grids, dependents) in depth-first order.
    pub(crate) fn leaves(&self) -> Vec<Leaf<'_>> {
        fn walk<'a>(s: &'a SearchSpace, prefix: &mut Vec<&'a str>, out: &mut Vec<Leaf<'a>>) {
            for (k, p) in &s.entries {
                prefix.push(k);
                match p {
                    Param::Const(_) => {}
                    Param::Nested(inner) => walk(inner, prefix, out),
                    _ => out.push(Leaf { path: prefix.clone(), param: p }),
                }
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        walk(self, &mut Vec::new(), &mut out);
        out
    }

    /// Resolve the space into params. `leaf` gives the value of the i-th sampled leaf (domain
    /// or grid, depth-first, dependents not counted); dependents are then evaluated in order.
    pub(crate) fn resolve<R: Rng>(
        &self,
        rng: &mut R,
        leaf: &mut dyn FnMut(usize, &Param, &mut R) -> Result<Value>,
    ) -> Result<Params> {
        let mut counter = 0;
        let mut deps: Vec<(Vec<&str>, &Dependent)> = Vec::new();
        let map = self.resolve_map(rng, leaf, &mut counter, &mut Vec::new(), &mut deps)?;
        let mut params = Params::from(map);
        for (path, dep) in deps {
            let value = dep
                .eval(&params, rng)
                .map_err(|e| Error::Dependent { path: path.join("."), source: Box::new(e) })?;
            params.set_path(&path, value)?;
        }
        Ok(params)
    }

    fn resolve_map<'a, R: Rng>(
        &'a self,
        rng: &mut R,
        leaf: &mut dyn FnMut(usize, &Param, &mut R) -> Result<Value>,
        counter: &mut usize,
        prefix: &mut Vec<&'a str>,
        deps: &mut Vec<(Vec<&'a str>, &'a Dependent)>,
    ) -> Result<Map> {
        let mut map = Map::new();
        for (k, p) in &self.entries {
            prefix.push(k);
            let v = match p {
                Param::Const(v) => v.clone(),
                Param::Nested(inner) => {
                    Value::Map(inner.resolve_map(rng, leaf, counter, prefix, deps)?)
                }
                Param::Dependent(d) => {
                    deps.push((prefix.clone(), d));
                    Value::Null
                }
                Param::Sample(_) | Param::Grid(_) => {
                    let i = *counter;
                    *counter += 1;
                    leaf(i, p, rng)?
                }
            };
            map.insert(k.as_str(), v);
            prefix.pop();
        }
        Ok(map)
    }

    /// Number of sampled leaves (domains and grids, not dependents), as `resolve` numbers them.
    fn sampled_count(&self) -> usize {
        self.entries.iter().map(|(_, p)| p.sampled_count()).sum()
    }

    /// What a point (a parameter set given by the user, `points_to_evaluate`) fixes: one entry
    /// per sampled leaf, numbered as `resolve` numbers them, `None` where the point leaves the
    /// leaf to the searcher. Keys are nested tables (`{model = {lr = 0.1}}`, as trial params
    /// are) or dotted paths (`"model.lr"`). A value must be one the entry can take: inside a
    /// domain (an integer is taken for a float domain, an integral float for an integer one),
    /// among a grid's or choice's values, or equal to a constant; a dependent value cannot be
    /// given, nor a key the space does not have.
    pub(crate) fn point_values(
        &self,
        point: &Params,
    ) -> std::result::Result<Vec<Option<Value>>, PointMismatch> {
        let mut out = vec![None; self.sampled_count()];
        self.match_point(point.as_map(), "", 0, &mut out)?;
        Ok(out)
    }

    fn match_point(
        &self,
        map: &Map,
        prefix: &str,
        base: usize,
        out: &mut [Option<Value>],
    ) -> std::result::Result<(), PointMismatch> {
        for (key, value) in map.iter() {
            self.match_entry(key, value, prefix, base, out)?;
        }
        Ok(())
    }

    fn match_entry(
        &self,
        key: &str,
        value: &Value,
        prefix: &str,
        base: usize,
        out: &mut [Option<Value>],
    ) -> std::result::Result<(), PointMismatch> {
        let path = join(prefix, key);
        let mismatch = |expected: String| PointMismatch {
            path: path.clone(),
            found: value.describe(),
            expected,
        };
        // The entry and the number of its first sampled leaf.
        let mut at = base;
        let mut entry = None;
        for (k, p) in &self.entries {
            if k == key {
                entry = Some(p);
                break;
            }
            at += p.sampled_count();
        }
        let Some(param) = entry else {
            if let Some((head, rest)) = key.split_once('.')
                && matches!(self.get(head), Some(Param::Nested(_)))
            {
                let mut nested = Map::new();
                nested.insert(rest, value.clone());
                return self.match_entry(head, &Value::Map(nested), prefix, base, out);
            }
            let keys: Vec<&str> = self.entries.iter().map(|(k, _)| k.as_str()).collect();
            return Err(mismatch(format!(
                "a parameter of the space (here: {})",
                if keys.is_empty() { "none".to_string() } else { keys.join(", ") }
            )));
        };
        let slot = |out: &mut [Option<Value>], v: Value| {
            if let Some(s) = out.get_mut(at) {
                *s = Some(v);
            }
        };
        match param {
            Param::Sample(d) => match as_domain_value(d, value) {
                Some(v) if d.contains(&v) => slot(out, v),
                _ => return Err(mismatch(format!("a value of {}", d.describe()))),
            },
            Param::Grid(values) => match find_value(values, value) {
                Some(v) => slot(out, v),
                None => {
                    return Err(mismatch(format!(
                        "one of the grid_search values {}",
                        Value::List(values.clone())
                    )));
                }
            },
            Param::Const(c) => {
                if find_value(std::slice::from_ref(c), value).is_none() {
                    return Err(mismatch(format!("the constant {c} (or leave it out)")));
                }
            }
            Param::Dependent(_) => {
                return Err(mismatch(
                    "no value: it is computed from the other parameters".to_string(),
                ));
            }
            Param::Nested(inner) => match value {
                Value::Map(m) => inner.match_point(m, &path, at, out)?,
                _ => return Err(mismatch("a table of its parameters".to_string())),
            },
        }
        Ok(())
    }

    /// The sweep-file form as a [`Value`] (a map). Fails on dependent values.
    pub fn to_value(&self) -> Result<Value> {
        if let Some((key, e)) = &self.invalid {
            return Err(e.clone().at(key));
        }
        let mut m = Map::new();
        for (k, p) in &self.entries {
            let v = match p {
                Param::Const(Value::Map(inner)) => {
                    let mut wrapped = Map::new();
                    wrapped.insert("constant", Value::Map(inner.clone()));
                    Value::Map(wrapped)
                }
                Param::Const(v) => v.clone(),
                Param::Sample(d) => d.to_value(),
                Param::Grid(values) => {
                    let mut g = Map::new();
                    g.insert("grid_search", Value::List(values.clone()));
                    Value::Map(g)
                }
                Param::Nested(inner) => inner.to_value().map_err(|e| e.at(k))?,
                Param::Dependent(_) => return Err(Error::NotSerializable { path: k.clone() }),
            };
            m.insert(k.as_str(), v);
        }
        Ok(Value::Map(m))
    }

    /// Read the sweep-file form (as parsed from TOML or JSON into a [`Value`]) and validate it.
    /// Errors name the dotted key path, e.g. `model.lr`.
    pub fn from_value(v: &Value) -> Result<Self> {
        let Value::Map(m) = v else {
            return Err(Error::space(
                "",
                format!("a search space must be a table of parameters, found {}", v.describe()),
            ));
        };
        let space = Self::from_map(m, "")?;
        space.validate()?;
        Ok(space)
    }

    fn from_map(m: &Map, prefix: &str) -> Result<Self> {
        let mut space = SearchSpace::new();
        for (k, v) in m.iter() {
            let path = join(prefix, k);
            let param = match v {
                Value::Map(inner) if inner.len() == 1 => {
                    let Some((name, args)) = inner.iter().next() else {
                        continue;
                    };
                    if FORM_NAMES.contains(&name) {
                        parse_form(name, args).map_err(|e| e.at(&path))?
                    } else {
                        Param::Nested(Self::from_map(inner, &path)?)
                    }
                }
                Value::Map(inner) => Param::Nested(Self::from_map(inner, &path)?),
                other => Param::Const(other.clone()),
            };
            space = space.add(k, param);
        }
        Ok(space)
    }
}

fn parse_form(name: &str, args: &Value) -> Result<Param> {
    match name {
        "constant" => Ok(Param::Const(args.clone())),
        "grid_search" => match args {
            Value::List(values) => Ok(Param::Grid(values.clone())),
            other => Err(Error::space(
                "",
                format!("grid_search: expected a list of values, found {}", other.describe()),
            )),
        },
        _ => match Domain::from_form(name, args) {
            Some(r) => r.map(Param::Sample),
            None => Err(Error::space("", format!("unknown domain `{name}`"))),
        },
    }
}

/// Where a point (see `SearchSpace::point_values`) does not fit the space.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PointMismatch {
    /// Dotted key path.
    pub path: String,
    /// The value given, with its type.
    pub found: String,
    /// What would fit.
    pub expected: String,
}

/// The space's own value equal to `v` (an integer and a float of the same number match).
fn find_value(values: &[Value], v: &Value) -> Option<Value> {
    let same = |a: &Value| match (a, v) {
        (Value::Int(i), Value::Float(f)) | (Value::Float(f), Value::Int(i)) => *i as f64 == *f,
        _ => a == v,
    };
    values.iter().find(|a| same(a)).cloned()
}

/// `v` as the domain's kind of value: an integer for a float domain becomes a float, an
/// integral float for an integer domain an integer, a choice's equal value that value.
fn as_domain_value(d: &Domain, v: &Value) -> Option<Value> {
    match (d, v) {
        (Domain::Choice(values), v) => find_value(values, v),
        (
            Domain::RandInt { .. }
            | Domain::QRandInt { .. }
            | Domain::LogRandInt { .. }
            | Domain::QLogRandInt { .. },
            Value::Float(f),
        ) => {
            let in_range = f.fract() == 0.0 && (i64::MIN as f64..i64::MAX as f64).contains(f);
            in_range.then_some(Value::Int(*f as i64))
        }
        (
            Domain::Uniform { .. }
            | Domain::QUniform { .. }
            | Domain::LogUniform { .. }
            | Domain::QLogUniform { .. }
            | Domain::Randn { .. }
            | Domain::QRandn { .. },
            Value::Int(i),
        ) => Some(Value::Float(*i as f64)),
        (_, v) => Some(v.clone()),
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") }
}

impl Serialize for SearchSpace {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_value().map_err(serde::ser::Error::custom)?.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SearchSpace {
    /// Deserialising validates; the error message is the typed error's (with the key path).
    /// For the typed error itself, deserialise a [`Value`] and call [`SearchSpace::from_value`].
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        SearchSpace::from_value(&v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::domain::*;
    use super::*;
    use crate::rng::SearchRng;

    fn space() -> SearchSpace {
        SearchSpace::new()
            .add("lr", loguniform(1e-4, 1e-1).unwrap())
            .add("hidden", choice([64, 128, 256]))
            .add("epochs", 20)
            .add("model", SearchSpace::new().add("layers", grid_search([1, 2])).add("act", "relu"))
            .add("batch", dependent(|p| Ok(p.get::<i64>("hidden")? / 2)))
    }

    #[test]
    fn resolve_samples_in_order_and_evaluates_dependents() {
        let s = space();
        s.validate().unwrap();
        let mut rng = SearchRng::seed_from_u64(0);
        let p = s
            .resolve(&mut rng, &mut |_, param, rng| match param {
                Param::Sample(d) => Ok(d.sample(rng)),
                Param::Grid(v) => Ok(v[0].clone()),
                _ => unreachable!(),
            })
            .unwrap();
        assert_eq!(p.keys().collect::<Vec<_>>(), ["lr", "hidden", "epochs", "model", "batch"]);
        assert_eq!(p.get::<i64>("batch").unwrap(), p.get::<i64>("hidden").unwrap() / 2);
        assert_eq!(p.get::<i64>("model.layers").unwrap(), 1);
        assert_eq!(p.get::<String>("model.act").unwrap(), "relu");
        assert_eq!(s.leaves().len(), 4);
        // What a tracker lists: domains and grids by dotted key, no constants or dependents.
        let sampled: Vec<String> = s.sampled().into_iter().map(|(k, _)| k).collect();
        assert_eq!(sampled, ["lr", "hidden", "model.layers"]);
    }

    #[test]
    fn validation_names_paths() {
        let s = SearchSpace::new().add("m", SearchSpace::new().add("c", choice(Vec::<i64>::new())));
        let e = s.validate().unwrap_err();
        assert!(matches!(&e, Error::InvalidDomain { path, .. } if path == "m.c"), "{e:?}");
        let s = SearchSpace::new().add("a", 1).add("a", 2);
        assert!(matches!(s.validate(), Err(Error::InvalidSpace { path, .. }) if path == "a"));
        let s = SearchSpace::new().add("a.b", 1);
        assert!(s.validate().is_err());
        let s = SearchSpace::new().add("g", grid_search(Vec::<i64>::new()));
        assert!(s.validate().is_err());
    }

    #[test]
    fn builder_errors_without_question_mark_name_the_key() {
        let s = SearchSpace::new()
            .add("m", SearchSpace::new().add("lr", loguniform(0.0, 1.0)).add("ok", 1));
        let e = s.validate().unwrap_err();
        assert!(matches!(&e, Error::InvalidDomain { path, .. } if path == "m.lr"), "{e:?}");
        assert!(e.to_string().starts_with("parameter `m.lr`: loguniform(0, 1)"), "{e}");
    }

    #[test]
    fn dependents_do_not_serialise() {
        let e = space().to_value().unwrap_err();
        assert_eq!(e, Error::NotSerializable { path: "batch".into() });
    }

    #[test]
    fn value_form_round_trip() {
        let s = SearchSpace::new()
            .add("lr", loguniform(1e-4, 1e-1).unwrap())
            .add("c", Map::from_iter([("choice", 1)]))
            .add("n", SearchSpace::new().add("g", grid_search(["a", "b"])));
        let v = s.to_value().unwrap();
        assert_eq!(SearchSpace::from_value(&v).unwrap(), s);
    }
}
