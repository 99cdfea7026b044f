//! A sweep file as a tree of items that remember where they were written (line and column in
//! the file, or the `--set` that gave them), and a reader that walks it table by table, so that
//! every mistake names the key path, the place, what is allowed, and the nearest valid key.
//! Reading goes on after a mistake: the user sees every problem of the file at once.

use std::fmt;
use std::ops::Range;

use rtune_searchers::{Map, Value};
use toml::de::{DeTable, DeValue};

/// Where an item was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Origin {
    /// Byte range in the file.
    File(Range<usize>),
    /// `--set` argument.
    Set(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    pub(crate) origin: Origin,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// Kept as written; nothing in a sweep file takes one.
    Datetime(String),
    Array(Vec<Item>),
    Table(Vec<(String, Origin, Item)>),
}

impl Kind {
    /// The value with its type, as messages name what was found: `the string "two"`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Kind::Str(s) => format!("the string {s:?}"),
            Kind::Int(i) => format!("the integer {i}"),
            Kind::Float(x) => format!("the float {x}"),
            Kind::Bool(b) => format!("the boolean {b}"),
            Kind::Datetime(d) => format!("the datetime {d}"),
            Kind::Array(_) => "an array".into(),
            Kind::Table(_) => "a table".into(),
        }
    }
}

/// One mistake: the key path, where, and what is wrong (with what would be right).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// Dotted key path, e.g. `tune.scheduler.grace_period`.
    pub key: String,
    /// `sweep.toml:12:5`, or `--set tune.num_samples=0`.
    pub at: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.at, self.message)
        } else {
            write!(f, "{}: `{}` {}", self.at, self.key, self.message)
        }
    }
}

/// Every mistake found in a sweep file (at least one).
#[derive(Debug, Clone, PartialEq)]
pub struct Problems(pub Vec<Problem>);

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One mistake is one line.
        if let [one] = self.0.as_slice() {
            return write!(f, "{one}");
        }
        write!(f, "the sweep file has {} mistakes:", self.0.len())?;
        for p in &self.0 {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

/// The text of a sweep file (`name` as errors show it), to turn byte offsets into lines and
/// columns.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
}

impl Source {
    /// `name:line:column` (both from 1) of a byte offset.
    fn position(&self, offset: usize) -> String {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!("{}:{line}:{column}", self.name)
    }

    pub(crate) fn at(&self, origin: &Origin) -> String {
        match origin {
            Origin::File(span) => self.position(span.start),
            Origin::Set(arg) => format!("--set {arg}"),
        }
    }

    /// Parses the file; a syntax error is one problem at its place.
    pub(crate) fn parse(&self) -> Result<Item, Problems> {
        match DeTable::parse(&self.text) {
            Ok(table) => {
                let span = table.span();
                let kind = table_kind(table.into_inner(), &Origin::File);
                Ok(Item { origin: Origin::File(span), kind })
            }
            Err(e) => {
                let at = e.span().map_or_else(|| self.name.clone(), |s| self.position(s.start));
                let message = format!("is not valid TOML: {}", e.message().trim());
                Err(Problems(vec![Problem { key: String::new(), at, message }]))
            }
        }
    }
}

fn table_kind(table: DeTable<'_>, origin: &dyn Fn(Range<usize>) -> Origin) -> Kind {
    Kind::Table(
        table
            .into_iter()
            .map(|(k, v)| {
                let key_origin = origin(k.span());
                (k.into_inner().into_owned(), key_origin, item(v, origin))
            })
            .collect(),
    )
}

fn item(v: toml::Spanned<DeValue<'_>>, origin: &dyn Fn(Range<usize>) -> Origin) -> Item {
    let at = origin(v.span());
    let kind = match v.into_inner() {
        DeValue::String(s) => Kind::Str(s.into_owned()),
        DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Kind::Int(n),
            // Beyond i64: TOML itself allows no more; keep it readable for the error.
            Err(_) => Kind::Float(i.as_str().parse().unwrap_or(f64::NAN)),
        },
        DeValue::Float(x) => Kind::Float(x.as_str().parse().unwrap_or(f64::NAN)),
        DeValue::Boolean(b) => Kind::Bool(b),
        DeValue::Datetime(d) => Kind::Datetime(d.to_string()),
        DeValue::Array(a) => Kind::Array(a.into_iter().map(|v| item(v, origin)).collect()),
        DeValue::Table(t) => table_kind(t, origin),
    };
    Item { origin: at, kind }
}

/// Applies `key.path=value` (the value read as TOML, or as a string where it is not TOML) on top
/// of the file's tree, creating tables on the way.
pub(crate) fn apply_set(root: &mut Item, arg: &str) -> Result<(), Problem> {
    let origin = Origin::Set(arg.to_owned());
    let bad = |message: String| Problem { key: String::new(), at: format!("--set {arg}"), message };
    let Some((path, text)) = arg.split_once('=') else {
        return Err(bad("is not KEY.PATH=VALUE (e.g. --set tune.num_samples=8)".into()));
    };
    let keys: Vec<&str> = path.trim().split('.').map(str::trim).collect();
    if keys.iter().any(|k| k.is_empty()) {
        return Err(bad(format!("`{path}` is not a dotted key path (e.g. tune.num_samples)")));
    }
    // A bare word is a string (`--set name=demo`); what starts as a TOML table, array or
    // quoted string must parse as one, else it would become a string of its broken text.
    let text = text.trim();
    let value = match DeValue::parse(text) {
        Ok(v) => item(v, &|_| origin.clone()),
        Err(e) if text.starts_with(['{', '[', '"', '\'']) => {
            let at = e.span().map_or(String::new(), |s| format!(" at character {}", s.start + 1));
            return Err(bad(format!(
                "`{text}` is not a TOML value: {}{at}",
                e.message().trim_end_matches('\n')
            )));
        }
        Err(_) => Item { origin: origin.clone(), kind: Kind::Str(text.to_owned()) },
    };
    let mut node = root;
    for (depth, key) in keys.iter().enumerate() {
        if !matches!(node.kind, Kind::Table(_)) {
            let parent = keys[..depth].join(".");
            return Err(bad(format!("`{parent}` is {}, not a table", node.kind.describe())));
        }
        let Kind::Table(entries) = &mut node.kind else { unreachable!("checked above") };
        let last = depth + 1 == keys.len();
        let index = match entries.iter().position(|(k, _, _)| k == key) {
            Some(i) => i,
            None => {
                let empty = Item { origin: origin.clone(), kind: Kind::Table(Vec::new()) };
                entries.push(((*key).to_owned(), origin.clone(), empty));
                entries.len() - 1
            }
        };
        if last {
            // The key's place is the argument now: a mistake in its value is the argument's.
            entries[index].1 = origin.clone();
            entries[index].2 = value;
            return Ok(());
        }
        node = &mut entries[index].2;
    }
    unreachable!("the loop returns at the last key")
}

/// Gathers problems while a tree is read; they come out in the order of the file (the
/// `--set`s after it).
pub(crate) struct Report<'s> {
    source: &'s Source,
    problems: Vec<(usize, Problem)>,
}

impl<'s> Report<'s> {
    pub fn new(source: &'s Source) -> Self {
        Report { source, problems: Vec::new() }
    }

    pub fn add(&mut self, key: &str, origin: &Origin, message: impl Into<String>) {
        let at = self.source.at(origin);
        let offset = match origin {
            Origin::File(span) => span.start,
            Origin::Set(_) => usize::MAX,
        };
        let problem = Problem { key: key.to_owned(), at, message: message.into() };
        self.problems.push((offset, problem));
    }

    /// Whether a problem is reported at `key` or a key under it.
    pub fn names_under(&self, key: &str) -> bool {
        self.problems.iter().any(|(_, p)| {
            p.key.strip_prefix(key).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
    }

    pub fn push(&mut self, problem: Problem) {
        self.problems.push((usize::MAX, problem));
    }

    pub fn finish(mut self) -> Result<(), Problems> {
        if self.problems.is_empty() {
            return Ok(());
        }
        self.problems.sort_by_key(|(offset, _)| *offset);
        Err(Problems(self.problems.into_iter().map(|(_, p)| p).collect()))
    }
}

/// A Rust type a sweep-file value reads as.
pub(crate) trait Typed: Sized {
    /// What it takes, as messages and the key reference say it: `an integer >= 0`.
    const WHAT: &'static str;
    fn read(kind: &Kind) -> Option<Self>;
    /// The value, or a problem saying what was found.
    fn check(kind: &Kind) -> Result<Self, String> {
        Self::read(kind).ok_or_else(|| not_a(Self::WHAT, kind))
    }
}

/// `must be an integer, not the string "two"`.
pub(crate) fn not_a(what: &str, kind: &Kind) -> String {
    format!("must be {what}, not {}", kind.describe())
}

impl Typed for String {
    const WHAT: &'static str = "a string";
    fn read(kind: &Kind) -> Option<Self> {
        if let Kind::Str(s) = kind { Some(s.clone()) } else { None }
    }
}

impl Typed for bool {
    const WHAT: &'static str = "true or false";
    fn read(kind: &Kind) -> Option<Self> {
        if let Kind::Bool(b) = kind { Some(*b) } else { None }
    }
}

impl Typed for i64 {
    const WHAT: &'static str = "an integer";
    fn read(kind: &Kind) -> Option<Self> {
        if let Kind::Int(i) = kind { Some(*i) } else { None }
    }
}

/// Integers in a range: a value of another kind `must be an integer`, one out of the range `is
/// N; use WHAT`.
macro_rules! typed_int {
    ($($t:ty => $what:literal),*) => {$(
        impl Typed for $t {
            const WHAT: &'static str = $what;
            fn read(kind: &Kind) -> Option<Self> {
                if let Kind::Int(i) = kind { <$t>::try_from(*i).ok() } else { None }
            }
            fn check(kind: &Kind) -> Result<Self, String> {
                match kind {
                    Kind::Int(i) => <$t>::try_from(*i).map_err(|_| format!("is {i}; use {}", $what)),
                    other => Err(not_a("an integer", other)),
                }
            }
        }
    )*};
}

typed_int!(u64 => "an integer >= 0", usize => "an integer >= 0", i32 => "an integer >= -1");

/// A number of seconds.
impl Typed for std::time::Duration {
    const WHAT: &'static str = "a number of seconds";
    fn read(kind: &Kind) -> Option<Self> {
        Self::check(kind).ok()
    }
    fn check(kind: &Kind) -> Result<Self, String> {
        let seconds = f64::read(kind).ok_or_else(|| not_a(Self::WHAT, kind))?;
        rtune_driver::config::duration(seconds)
    }
}

impl Typed for f64 {
    const WHAT: &'static str = "a number";
    fn read(kind: &Kind) -> Option<Self> {
        match kind {
            Kind::Int(i) => Some(*i as f64),
            Kind::Float(x) => Some(*x),
            _ => None,
        }
    }
}

impl Typed for Vec<String> {
    const WHAT: &'static str = "an array of strings";
    fn read(kind: &Kind) -> Option<Self> {
        let Kind::Array(items) = kind else { return None };
        items.iter().map(|i| String::read(&i.kind)).collect()
    }
}

/// The searchers crate's value of an item (for the param space).
pub(crate) fn to_value(item: &Item) -> Value {
    match &item.kind {
        Kind::Str(s) | Kind::Datetime(s) => Value::Str(s.clone()),
        Kind::Int(i) => Value::Int(*i),
        Kind::Float(x) => Value::Float(*x),
        Kind::Bool(b) => Value::Bool(*b),
        Kind::Array(items) => Value::List(items.iter().map(to_value).collect()),
        Kind::Table(entries) => {
            let mut map = Map::new();
            for (k, _, v) in entries {
                map.insert(k.clone(), to_value(v));
            }
            Value::Map(map)
        }
    }
}

/// A value as a sweep file writes it: `0.01`, `"adam"`, `[16, 32]`, `{ a = 1 }`.
pub(crate) fn value_text(v: &Value) -> String {
    match v {
        Value::Float(x) => format!("{x:?}"),
        Value::List(items) => {
            format!("[{}]", items.iter().map(value_text).collect::<Vec<_>>().join(", "))
        }
        Value::Map(m) => {
            let inner: Vec<String> =
                m.iter().map(|(k, v)| format!("{k} = {}", value_text(v))).collect();
            format!("{{ {} }}", inner.join(", "))
        }
        other => other.to_string(),
    }
}

/// The item at a dotted path below `item` (for placing errors that name a path).
pub(crate) fn find<'i>(item: &'i Item, path: &str) -> Option<(&'i Origin, &'i Item)> {
    let mut node = item;
    let mut origin = &item.origin;
    for key in path.split('.').filter(|k| !k.is_empty()) {
        let Kind::Table(entries) = &node.kind else { return None };
        let (_, key_origin, value) = entries.iter().find(|(k, _, _)| k == key)?;
        origin = key_origin;
        node = value;
    }
    Some((origin, node))
}

pub(crate) fn list(names: &[&str]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// `; did you mean `x`?` for the nearest name within a few edits, or nothing.
pub(crate) fn did_you_mean(word: &str, names: &[&str]) -> String {
    rtune_driver::config::nearest(word, names)
        .map_or_else(String::new, |n| format!("; did you mean `{n}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Source {
        Source { name: "sweep.toml".into(), text: text.into() }
    }

    #[test]
    fn positions_are_lines_and_columns_from_one() {
        let s = source("a = 1\n[tune]\n  metric = 2\n");
        let root = s.parse().unwrap();
        let (origin, value) = find(&root, "tune.metric").unwrap();
        assert_eq!(s.at(origin), "sweep.toml:3:3");
        assert_eq!(value.kind, Kind::Int(2));
    }

    #[test]
    fn syntax_errors_name_the_place() {
        let err = source("a = 1\nb = [1, 2\n").parse().unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert!(err.0[0].at.starts_with("sweep.toml:"), "{err}");
        assert!(err.to_string().contains("is not valid TOML"), "{err}");
    }

    #[test]
    fn set_overrides_and_creates_keys() {
        let s = source("[tune]\nnum_samples = 4\n");
        let mut root = s.parse().unwrap();
        apply_set(&mut root, "tune.num_samples=8").unwrap();
        apply_set(&mut root, "tune.scheduler.type=asha").unwrap();
        let (origin, value) = find(&root, "tune.num_samples").unwrap();
        assert_eq!(value.kind, Kind::Int(8));
        assert_eq!(s.at(&value.origin), "--set tune.num_samples=8");
        // The key is the argument's now: a mistake in its value is said of the argument.
        assert_eq!(s.at(origin), "--set tune.num_samples=8");
        assert_eq!(find(&root, "tune.scheduler.type").unwrap().1.kind, Kind::Str("asha".into()));
        let err = apply_set(&mut root, "tune.num_samples.x=1").unwrap_err();
        assert!(err.message.contains("`tune.num_samples` is the integer 8"), "{err}");
        assert!(apply_set(&mut root, "nothing").is_err());
        // A broken table, array or string is refused where it broke, never kept as a string.
        let err = apply_set(&mut root, "param_space.rate={ loguniform = [0.1").unwrap_err();
        assert!(
            err.message.contains("is not a TOML value") && err.message.contains("`]`"),
            "{err}"
        );
        assert!(apply_set(&mut root, "name=\"demo").is_err());
        assert!(find(&root, "param_space").is_none(), "nothing was set");
    }

    #[test]
    fn nearest_names() {
        assert_eq!(did_you_mean("asah", &["asha", "pbt"]), "; did you mean `asha`?");
        assert_eq!(did_you_mean("zzzzzz", &["asha", "pbt"]), "");
        assert_eq!(did_you_mean("maximum", &["max", "min"]), "; did you mean `max`?");
    }
}
