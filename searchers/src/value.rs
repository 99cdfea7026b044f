//! JSON-like values: what a sampled hyperparameter, a constant in a search space or an entry of
//! a sweep file holds. The data model of the whole pipeline sits on this type, so it is kept
//! small and format-neutral (serde in, serde out; no serde_json in the library).
//!
//! Maps keep insertion order: a user's parameters come back in the order they were written.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A JSON-like value.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Value {
    /// No value (JSON `null`; TOML has none).
    #[default]
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A list.
    List(Vec<Value>),
    /// A map with insertion order.
    Map(Map),
}

impl Value {
    /// The type's name as error messages show it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "integer",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) => "map",
        }
    }

    /// The value as `f64` if it is a number (integers convert).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }

    /// The value as `i64` if it is an integer.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int(i) => Some(i),
            _ => None,
        }
    }

    /// The map, if this is one.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// A short description with type and value, for error messages.
    pub fn describe(&self) -> String {
        let mut s = self.to_string();
        if s.len() > 60 {
            let mut cut = 57;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push_str("...");
        }
        format!("{} {s}", self.type_name())
    }
}

/// A number as tables and cards show it: integers whole, others to 4 decimals or in e-notation
/// (`0.0373`, `3.000e-5`, `64`).
pub fn number_text(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v}")
    } else if v != 0.0 && !(1e-3..1e5).contains(&v.abs()) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// A param's value as tables show it: floats as [`number_text`] does, anything else as a sweep
/// file writes it (`"adam"`, `[64, 64]`, `true`).
pub fn param_text(v: &Value) -> String {
    match (v.as_i64(), v.as_f64()) {
        (None, Some(x)) => number_text(x),
        _ => v.to_string(),
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => {
                if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 {
                    write!(f, "{x:.1}")
                } else {
                    write!(f, "{x}")
                }
            }
            Value::Str(s) => write!(f, "{s:?}"),
            Value::List(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Map(m) => {
                f.write_str("{")?;
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// An insertion-ordered string-keyed map. Lookups are linear: parameter sets are small.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Map {
    entries: Vec<(String, Value)>,
}

impl Map {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value under `key`, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Insert or replace; a replaced key keeps its position. Returns the old value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        let key = key.into();
        let value = value.into();
        match self.get_mut(&key) {
            Some(slot) => Some(std::mem::replace(slot, value)),
            None => {
                self.entries.push((key, value));
                None
            }
        }
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Keys in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl IntoIterator for Map {
    type Item = (String, Value);
    type IntoIter = std::vec::IntoIter<(String, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Map {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Map::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self { Value::Int(i64::from(v)) }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<usize> for Value {
    /// Values above `i64::MAX` saturate (no parameter is that large in practice).
    fn from(v: usize) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<u64> for Value {
    /// Values above `i64::MAX` saturate.
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Value::Float(f64::from(v))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}

impl From<Map> for Value {
    fn from(v: Map) -> Self {
        Value::Map(v)
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::List(v.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<Value>, const N: usize> From<[T; N]> for Value {
    fn from(v: [T; N]) -> Self {
        Value::List(v.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// Conversion out of a [`Value`] for typed getters such as `params.get::<f64>("lr")`.
pub trait FromValue: Sized {
    /// The type's name in error messages.
    const EXPECTED: &'static str;
    /// The converted value, or `None` if the value has another type or is out of range.
    fn from_value(v: &Value) -> Option<Self>;
}

impl FromValue for f64 {
    const EXPECTED: &'static str = "a number (f64)";
    fn from_value(v: &Value) -> Option<Self> {
        v.as_f64()
    }
}

impl FromValue for f32 {
    const EXPECTED: &'static str = "a number (f32)";
    fn from_value(v: &Value) -> Option<Self> {
        v.as_f64().map(|x| x as f32)
    }
}

macro_rules! from_value_int {
    ($($t:ty => $name:literal),*) => {$(
        impl FromValue for $t {
            const EXPECTED: &'static str = $name;
            fn from_value(v: &Value) -> Option<Self> {
                v.as_i64().and_then(|i| <$t>::try_from(i).ok())
            }
        }
    )*};
}
from_value_int!(
    i64 => "an integer (i64)",
    i32 => "an integer (i32)",
    u32 => "a non-negative integer (u32)",
    u64 => "a non-negative integer (u64)",
    usize => "a non-negative integer (usize)"
);

impl FromValue for bool {
    const EXPECTED: &'static str = "a bool";
    fn from_value(v: &Value) -> Option<Self> {
        match *v {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
}

impl FromValue for String {
    const EXPECTED: &'static str = "a string";
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Str(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromValue for Value {
    const EXPECTED: &'static str = "any value";
    fn from_value(v: &Value) -> Option<Self> {
        Some(v.clone())
    }
}

impl FromValue for Map {
    const EXPECTED: &'static str = "a map";
    fn from_value(v: &Value) -> Option<Self> {
        v.as_map().cloned()
    }
}

impl<T: FromValue> FromValue for Vec<T> {
    const EXPECTED: &'static str = "a list";
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::List(items) => items.iter().map(T::from_value).collect(),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    const EXPECTED: &'static str = "a value or null";
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) => s.serialize_i64(*i),
            Value::Float(f) => s.serialize_f64(*f),
            Value::Str(v) => s.serialize_str(v),
            Value::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Value::Map(m) => m.serialize(s),
        }
    }
}

impl Serialize for Map {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-like value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        i64::try_from(v)
            .map(Value::Int)
            .map_err(|_| E::custom(format!("integer {v} is larger than i64::MAX")))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        MapVisitor.visit_map(map).map(Value::Map)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct MapVisitor;

impl<'de> Visitor<'de> for MapVisitor {
    type Value = Map;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Map, A::Error> {
        let mut m = Map::new();
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            if m.contains_key(&k) {
                return Err(de::Error::custom(format!("duplicate key `{k}`")));
            }
            m.entries.push((k, v));
        }
        Ok(m)
    }
}

impl<'de> Deserialize<'de> for Map {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MapVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_keeps_order_and_types() {
        let text = r#"{"z":1,"a":2.5,"m":{"y":[1,"x",null,true]}}"#;
        let v: Value = serde_json::from_str(text).unwrap();
        let m = v.as_map().unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), ["z", "a", "m"]);
        assert_eq!(m.get("z"), Some(&Value::Int(1)));
        assert_eq!(m.get("a"), Some(&Value::Float(2.5)));
        assert_eq!(serde_json::to_string(&v).unwrap(), text);
        assert!(serde_json::from_str::<Value>(r#"{"a":1,"a":2}"#).is_err());
    }

    #[test]
    fn typed_conversions() {
        assert_eq!(f64::from_value(&Value::Int(3)), Some(3.0));
        assert_eq!(i64::from_value(&Value::Float(3.0)), None);
        assert_eq!(usize::from_value(&Value::Int(-1)), None);
        assert_eq!(Vec::<i64>::from_value(&Value::from(vec![1, 2])), Some(vec![1, 2]));
        assert_eq!(Value::from("x").describe(), "string \"x\"");
    }
}
