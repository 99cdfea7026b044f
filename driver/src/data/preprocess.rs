//! Preprocessors (Ray's `ray.data.preprocessors`, scikit-learn's semantics): fitted once, on the
//! training dataset only, by the driver; then saved with every checkpoint (`preprocessor.json`)
//! and applied to every worker's batches and at prediction, so that training and serving
//! transform the same way.
//!
//! * [`StandardScaler`]: `(x - mean) / std` (population std; a constant column keeps scale 1).
//! * [`MinMaxScaler`]: `(x - min) / (max - min)` (a constant column keeps scale 1).
//! * [`SimpleImputer`]: fills missing values (null, or NaN in a float column) with the mean,
//!   median, most frequent value, or a constant.
//! * [`OneHotEncoder`]: a column of categories becomes one 0/1 column per category, named
//!   `column=category`.
//! * [`OrdinalEncoder`]: categories become their index in the sorted categories (labels: a string
//!   label must be encoded so; the predictor maps classes back through it).
//! * [`Chain`]: steps in order, each fitted on the output of the steps before it.
//!
//! Without `columns(..)`, a scaler takes every numeric feature column, an imputer every feature
//! column it can fill, a one-hot encoder every string feature column; the label is never taken
//! unless named. The columns are fixed when fitted. Categories are sorted (numbers by value,
//! strings by text). A category not seen in training is an error naming it, or, with
//! [`Unknown::Bucket`], goes to a bucket of its own (one-hot: a `column=<unknown>` column;
//! ordinal: the index after the known ones).

use std::collections::HashMap;

use polars::prelude::DataFrame;
use serde::{Deserialize, Serialize};

use crate::data::Columns;
use crate::data::table::{Col, Table};
use crate::error::{Error, Result};

/// What an encoder does with a category it did not see in training.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unknown {
    /// Fail, naming the column, the value and the known categories (the default).
    #[default]
    Error,
    /// Map it to a bucket of its own.
    Bucket,
}

/// The name of the unknown bucket's one-hot column is `column=<unknown>`.
pub const UNKNOWN_CATEGORY: &str = "<unknown>";

/// A preprocessor, fitted or not. Build one from a step (`StandardScaler::new().into()`) or a
/// [`Chain`]; give it to `TorchTrainer::preprocessor`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Preprocessor {
    StandardScaler(StandardScaler),
    MinMaxScaler(MinMaxScaler),
    SimpleImputer(SimpleImputer),
    OneHotEncoder(OneHotEncoder),
    OrdinalEncoder(OrdinalEncoder),
    Chain(Chain),
}

/// The feature columns while fitting (the label is not among them, so steps without
/// `columns(..)` leave it alone).
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    pub features: Vec<String>,
}

impl Preprocessor {
    /// Fits on `frame` (every step on the output of the steps before it). `columns` says which
    /// columns are features (by default every column but the label) and which is the label.
    pub fn fit(&mut self, frame: &DataFrame, columns: &Columns) -> Result<()> {
        let scope = columns.resolve(frame, "the frame to fit on")?;
        let mut table = Table::from_frame(frame, &scope.all_columns(), "the frame to fit on")?;
        let mut scope = Scope { features: scope.features };
        self.fit_table(&mut table, &mut scope, "the frame to fit on")
    }

    /// Applies the fitted preprocessor to `frame`: its columns with the fitted ones replaced (a
    /// one-hot column by its 0/1 columns, in its place). Numbers come back as Float32.
    pub fn transform(&self, frame: &DataFrame) -> Result<DataFrame> {
        let names: Vec<String> =
            frame.get_column_names().iter().map(|n| n.as_str().to_owned()).collect();
        let mut table = Table::from_frame(frame, &names, "the frame to transform")?;
        self.transform_table(&mut table, "the frame to transform")?;
        table.to_frame()
    }

    /// Whether every step has been fitted.
    pub fn is_fitted(&self) -> bool {
        match self {
            Preprocessor::StandardScaler(s) => s.fitted.is_some(),
            Preprocessor::MinMaxScaler(s) => s.fitted.is_some(),
            Preprocessor::SimpleImputer(s) => s.fitted.is_some(),
            Preprocessor::OneHotEncoder(s) => s.fitted.is_some(),
            Preprocessor::OrdinalEncoder(s) => s.fitted.is_some(),
            Preprocessor::Chain(c) => c.steps.iter().all(Preprocessor::is_fitted),
        }
    }

    /// Fits on `table` and transforms it (the next step of a chain fits on the result);
    /// `scope.features` follows the renames (one-hot columns).
    pub(crate) fn fit_table(
        &mut self,
        table: &mut Table,
        scope: &mut Scope,
        what: &str,
    ) -> Result<()> {
        match self {
            Preprocessor::Chain(chain) => {
                for step in &mut chain.steps {
                    step.fit_table(table, scope, what)?;
                }
                return Ok(());
            }
            Preprocessor::StandardScaler(s) => {
                let columns = pick(&s.columns, table, scope, Pick::Numeric, what)?;
                s.fitted = Some(Affine::fit(table, columns, what, "StandardScaler", mean_std)?);
            }
            Preprocessor::MinMaxScaler(s) => {
                let columns = pick(&s.columns, table, scope, Pick::Numeric, what)?;
                s.fitted = Some(Affine::fit(table, columns, what, "MinMaxScaler", min_range)?);
            }
            Preprocessor::SimpleImputer(s) => {
                let kind = match &s.strategy {
                    Strategy::Constant(Fill::Text(_)) => Pick::Text,
                    Strategy::Mean | Strategy::Median | Strategy::Constant(Fill::Number(_)) => {
                        Pick::Numeric
                    }
                    Strategy::MostFrequent => Pick::Any,
                };
                let columns = pick(&s.columns, table, scope, kind, what)?;
                s.fitted = Some(s.strategy.fit(table, columns, what)?);
            }
            Preprocessor::OneHotEncoder(s) => {
                let columns = pick(&s.columns, table, scope, Pick::Text, what)?;
                s.fitted = Some(Categories::fit_all(table, columns, what, "OneHotEncoder")?);
            }
            Preprocessor::OrdinalEncoder(s) => {
                let columns = pick(&Some(s.columns.clone()), table, scope, Pick::Any, what)?;
                s.fitted = Some(Categories::fit_all(table, columns, what, "OrdinalEncoder")?);
            }
        }
        scope.features = self.output_features(&scope.features);
        self.transform_table(table, what)
    }

    /// Applies the fitted preprocessor to `table` in place. `what` names the data in errors.
    pub(crate) fn transform_table(&self, table: &mut Table, what: &str) -> Result<()> {
        let unfitted = || Error::Data(format!("a preprocessor applied to {what} was never fitted"));
        match self {
            Preprocessor::Chain(chain) => {
                chain.steps.iter().try_for_each(|s| s.transform_table(table, what))
            }
            Preprocessor::StandardScaler(StandardScaler { fitted, .. })
            | Preprocessor::MinMaxScaler(MinMaxScaler { fitted, .. }) => {
                fitted.as_ref().ok_or_else(unfitted)?.apply(table, what)
            }
            Preprocessor::SimpleImputer(s) => {
                let fills = s.fitted.as_ref().ok_or_else(unfitted)?;
                fills.iter().try_for_each(|f| f.apply(table, what))
            }
            Preprocessor::OneHotEncoder(s) => {
                let fitted = s.fitted.as_ref().ok_or_else(unfitted)?;
                fitted.iter().try_for_each(|c| c.one_hot(table, s.unknown, what))
            }
            Preprocessor::OrdinalEncoder(s) => {
                let fitted = s.fitted.as_ref().ok_or_else(unfitted)?;
                fitted.iter().try_for_each(|c| c.ordinal(table, s.unknown, what))
            }
        }
    }

    /// The feature columns after this (fitted) preprocessor, from the ones before it.
    pub(crate) fn output_features(&self, features: &[String]) -> Vec<String> {
        match self {
            Preprocessor::Chain(chain) => {
                chain.steps.iter().fold(features.to_vec(), |f, s| s.output_features(&f))
            }
            Preprocessor::OneHotEncoder(s) => {
                let Some(fitted) = &s.fitted else { return features.to_vec() };
                features
                    .iter()
                    .flat_map(|f| match fitted.iter().find(|c| c.column == *f) {
                        Some(c) => c.one_hot_names(s.unknown),
                        None => vec![f.clone()],
                    })
                    .collect()
            }
            _ => features.to_vec(),
        }
    }

    /// The categories an ordinal encoder fitted for `column` (a label's classes, in index
    /// order), searching a chain from its last step.
    pub(crate) fn ordinal_categories(&self, column: &str) -> Option<&[String]> {
        match self {
            Preprocessor::Chain(chain) => {
                chain.steps.iter().rev().find_map(|s| s.ordinal_categories(column))
            }
            Preprocessor::OrdinalEncoder(s) => {
                s.fitted.as_ref()?.iter().find(|c| c.column == column).map(|c| c.values.as_slice())
            }
            _ => None,
        }
    }
}

/// Steps applied in order, each fitted on the output of the ones before it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    steps: Vec<Preprocessor>,
}

impl Chain {
    pub fn new() -> Self {
        Chain::default()
    }

    /// Adds a step after the others.
    pub fn then(mut self, step: impl Into<Preprocessor>) -> Self {
        self.steps.push(step.into());
        self
    }
}

/// Standardizes numeric columns: `(x - mean) / std`, with the population std (scikit-learn's);
/// a column with std 0 is only centred.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StandardScaler {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    columns: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fitted: Option<Affine>,
}

/// Scales numeric columns to [0, 1] over their training range: `(x - min) / (max - min)`; a
/// constant column is only shifted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MinMaxScaler {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    columns: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fitted: Option<Affine>,
}

macro_rules! columns_builder {
    ($($ty:ident),*) => {$(
        impl $ty {
            /// Every suitable feature column (see the module docs).
            pub fn new() -> Self {
                Self::default()
            }

            /// Only these columns.
            pub fn columns<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
                self.columns = Some(columns.into_iter().map(Into::into).collect());
                self
            }
        }

        impl From<$ty> for Preprocessor {
            fn from(step: $ty) -> Preprocessor {
                Preprocessor::$ty(step)
            }
        }
    )*};
}
columns_builder!(StandardScaler, MinMaxScaler, OneHotEncoder);

impl From<Chain> for Preprocessor {
    fn from(chain: Chain) -> Preprocessor {
        Preprocessor::Chain(chain)
    }
}

impl From<SimpleImputer> for Preprocessor {
    fn from(step: SimpleImputer) -> Preprocessor {
        Preprocessor::SimpleImputer(step)
    }
}

impl From<OrdinalEncoder> for Preprocessor {
    fn from(step: OrdinalEncoder) -> Preprocessor {
        Preprocessor::OrdinalEncoder(step)
    }
}

/// Fills missing values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimpleImputer {
    strategy: Strategy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    columns: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fitted: Option<Vec<Filled>>,
}

/// What a [`SimpleImputer`] fills with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The column's mean (numeric columns).
    Mean,
    /// The column's median (numeric columns).
    Median,
    /// The most frequent value (the smallest of equally frequent ones), any column.
    MostFrequent,
    /// A fixed value: a number for numeric columns, a string for string columns.
    Constant(Fill),
}

/// A fill value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Fill {
    Number(f64),
    Text(String),
}

impl From<f64> for Fill {
    fn from(x: f64) -> Fill {
        Fill::Number(x)
    }
}

impl From<&str> for Fill {
    fn from(s: &str) -> Fill {
        Fill::Text(s.to_owned())
    }
}

impl SimpleImputer {
    pub fn new(strategy: Strategy) -> Self {
        SimpleImputer { strategy, columns: None, fitted: None }
    }

    pub fn mean() -> Self {
        Self::new(Strategy::Mean)
    }

    pub fn median() -> Self {
        Self::new(Strategy::Median)
    }

    pub fn most_frequent() -> Self {
        Self::new(Strategy::MostFrequent)
    }

    pub fn constant(value: impl Into<Fill>) -> Self {
        Self::new(Strategy::Constant(value.into()))
    }

    /// Only these columns (by default every feature column the strategy can fill).
    pub fn columns<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.columns = Some(columns.into_iter().map(Into::into).collect());
        self
    }
}

/// One-hot encodes category columns (strings, or numbers used as categories).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OneHotEncoder {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    columns: Option<Vec<String>>,
    #[serde(default)]
    unknown: Unknown,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fitted: Option<Vec<Categories>>,
}

impl OneHotEncoder {
    /// What to do with a category not seen in training (default: an error).
    pub fn unknown(mut self, unknown: Unknown) -> Self {
        self.unknown = unknown;
        self
    }
}

/// Encodes the categories of `columns` as their index among the sorted categories; for string
/// labels (the predictor maps predicted classes back to the names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrdinalEncoder {
    columns: Vec<String>,
    #[serde(default)]
    unknown: Unknown,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fitted: Option<Vec<Categories>>,
}

impl OrdinalEncoder {
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = S>) -> Self {
        OrdinalEncoder {
            columns: columns.into_iter().map(Into::into).collect(),
            unknown: Unknown::Error,
            fitted: None,
        }
    }

    /// What to do with a category not seen in training (default: an error).
    pub fn unknown(mut self, unknown: Unknown) -> Self {
        self.unknown = unknown;
        self
    }
}

/// Which columns a step takes by default.
#[derive(Clone, Copy, PartialEq)]
enum Pick {
    Numeric,
    Text,
    Any,
}

/// The columns a step works on: the ones it was given (each must exist), or the feature
/// columns of the right kind.
fn pick(
    given: &Option<Vec<String>>,
    table: &Table,
    scope: &Scope,
    kind: Pick,
    what: &str,
) -> Result<Vec<String>> {
    match given {
        Some(columns) => {
            for c in columns {
                table.require(c, what)?;
            }
            Ok(columns.clone())
        }
        None => Ok(scope
            .features
            .iter()
            .filter(|f| {
                matches!(
                    (kind, table.get(f)),
                    (Pick::Any, Some(_))
                        | (Pick::Numeric, Some(Col::Num(_)))
                        | (Pick::Text, Some(Col::Text(_)))
                )
            })
            .cloned()
            .collect()),
    }
}

/// `x' = (x - offset) / scale` per column: both scalers once fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Affine {
    columns: Vec<String>,
    offset: Vec<f64>,
    scale: Vec<f64>,
}

/// The mean and population std of finite values (std 1 where 0).
fn mean_std(values: &[f32]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = values.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
    let std = var.sqrt();
    (mean, if std > 0.0 { std } else { 1.0 })
}

/// The min and the range (1 where 0).
fn min_range(values: &[f32]) -> (f64, f64) {
    let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
        (lo.min(x.into()), hi.max(x.into()))
    });
    (lo, if hi > lo { hi - lo } else { 1.0 })
}

impl Affine {
    fn fit(
        table: &Table,
        columns: Vec<String>,
        what: &str,
        step: &str,
        stats: fn(&[f32]) -> (f64, f64),
    ) -> Result<Affine> {
        let (mut offset, mut scale) = (Vec::new(), Vec::new());
        for c in &columns {
            let values = table.numbers(c, what)?;
            no_missing(values, c, what, step)?;
            if values.is_empty() {
                return Err(Error::Data(format!("{step} cannot fit on {what}: it has no rows")));
            }
            let (o, s) = stats(values);
            offset.push(o);
            scale.push(s);
        }
        Ok(Affine { columns, offset, scale })
    }

    fn apply(&self, table: &mut Table, what: &str) -> Result<()> {
        for (i, c) in self.columns.iter().enumerate() {
            table.numbers(c, what)?;
            let Some(Col::Num(values)) = table.get_mut(c) else { unreachable!("checked above") };
            let (offset, scale) = (self.offset[i], self.scale[i]);
            for x in values.iter_mut() {
                *x = ((f64::from(*x) - offset) / scale) as f32;
            }
        }
        Ok(())
    }
}

/// An error for missing values where `step` cannot take them.
fn no_missing(values: &[f32], column: &str, what: &str, step: &str) -> Result<()> {
    match values.iter().position(|x| x.is_nan()) {
        None => Ok(()),
        Some(row) => Err(Error::Data(format!(
            "{step}: column `{column}` of {what} has missing values (the first in row {row}); \
             put a SimpleImputer before it in a Chain"
        ))),
    }
}

/// A column's fill value once fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Filled {
    column: String,
    value: Fill,
}

impl Strategy {
    fn fit(&self, table: &Table, columns: Vec<String>, what: &str) -> Result<Vec<Filled>> {
        columns
            .into_iter()
            .map(|column| {
                let col = table.require(&column, what)?;
                let value = match (self, col) {
                    (Strategy::Constant(fill), _) => fill.clone(),
                    (Strategy::Mean | Strategy::Median, Col::Num(v)) => {
                        let mut present: Vec<f64> =
                            v.iter().filter(|x| !x.is_nan()).map(|&x| x.into()).collect();
                        if present.is_empty() {
                            return Err(Error::Data(format!(
                                "SimpleImputer: column `{column}` of {what} has no values to \
                                 take a {self:?} of; use SimpleImputer::constant"
                            )));
                        }
                        Fill::Number(if *self == Strategy::Mean {
                            present.iter().sum::<f64>() / present.len() as f64
                        } else {
                            present.sort_by(f64::total_cmp);
                            let mid = present.len() / 2;
                            if present.len() % 2 == 1 {
                                present[mid]
                            } else {
                                (present[mid - 1] + present[mid]) / 2.0
                            }
                        })
                    }
                    (Strategy::Mean | Strategy::Median, Col::Text(_)) => {
                        return Err(Error::Data(format!(
                            "SimpleImputer: column `{column}` of {what} holds strings, which \
                             have no {self:?}: use SimpleImputer::most_frequent or constant"
                        )));
                    }
                    (Strategy::MostFrequent, col) => most_frequent(col).ok_or_else(|| {
                        Error::Data(format!(
                            "SimpleImputer: column `{column}` of {what} has no values to take \
                             the most frequent of; use SimpleImputer::constant"
                        ))
                    })?,
                };
                Ok(Filled { column, value })
            })
            .collect()
    }
}

/// The most frequent present value, the smallest of ties.
fn most_frequent(col: &Col) -> Option<Fill> {
    match col {
        Col::Num(v) => {
            let mut counts: HashMap<u32, usize> = HashMap::new();
            for x in v.iter().filter(|x| !x.is_nan()) {
                *counts.entry(x.to_bits()).or_default() += 1;
            }
            let best = counts
                .into_iter()
                .map(|(bits, n)| (f32::from_bits(bits), n))
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.total_cmp(&a.0)))?;
            Some(Fill::Number(best.0.into()))
        }
        Col::Text(v) => {
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for s in v.iter().flatten() {
                *counts.entry(s).or_default() += 1;
            }
            let best = counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))?;
            Some(Fill::Text(best.0.to_owned()))
        }
    }
}

impl Filled {
    fn apply(&self, table: &mut Table, what: &str) -> Result<()> {
        let column = &self.column;
        let col = table.get_mut(column).ok_or_else(|| {
            Error::Data(format!("{what} has no column `{column}` (the SimpleImputer fills it)"))
        })?;
        match (col, &self.value) {
            (Col::Num(v), Fill::Number(fill)) => {
                v.iter_mut().filter(|x| x.is_nan()).for_each(|x| *x = *fill as f32);
            }
            (Col::Text(v), Fill::Text(fill)) => {
                v.iter_mut().filter(|x| x.is_none()).for_each(|x| *x = Some(fill.clone()));
            }
            (col, fill) => {
                return Err(Error::Data(format!(
                    "SimpleImputer: column `{column}` of {what} is {}, but its fill value is \
                     {fill:?}",
                    if matches!(col, Col::Num(_)) { "numeric" } else { "string" }
                )));
            }
        }
        Ok(())
    }
}

/// A column's categories, sorted, once fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Categories {
    column: String,
    values: Vec<String>,
}

impl Categories {
    fn fit_all(table: &Table, columns: Vec<String>, what: &str, step: &str) -> Result<Vec<Self>> {
        columns
            .into_iter()
            .map(|column| {
                let values = match table.require(&column, what)? {
                    Col::Num(v) => {
                        no_missing(v, &column, what, step)?;
                        let mut v: Vec<f32> = v.clone();
                        v.sort_by(f32::total_cmp);
                        v.dedup();
                        v.into_iter().map(|x| x.to_string()).collect()
                    }
                    Col::Text(v) => {
                        if let Some(row) = v.iter().position(Option::is_none) {
                            return Err(Error::Data(format!(
                                "{step}: column `{column}` of {what} has missing values (the \
                                 first in row {row}); put a SimpleImputer before it in a Chain"
                            )));
                        }
                        let mut v: Vec<String> = v.iter().flatten().cloned().collect();
                        v.sort();
                        v.dedup();
                        v
                    }
                };
                Ok(Categories { column, values })
            })
            .collect()
    }

    /// Each row's category index; `values.len()` for an unknown one with `Unknown::Bucket`.
    fn codes(&self, table: &Table, unknown: Unknown, what: &str) -> Result<Vec<usize>> {
        let col = table.require(&self.column, what)?;
        let index: HashMap<&str, usize> =
            self.values.iter().enumerate().map(|(i, v)| (v.as_str(), i)).collect();
        (0..col.len())
            .map(|row| {
                let value = col.category(row).ok_or_else(|| {
                    Error::Data(format!(
                        "column `{}` of {what} has a missing value in row {row}; put a \
                         SimpleImputer before the encoder in a Chain",
                        self.column
                    ))
                })?;
                match (index.get(value.as_str()), unknown) {
                    (Some(&i), _) => Ok(i),
                    (None, Unknown::Bucket) => Ok(self.values.len()),
                    (None, Unknown::Error) => Err(Error::Data(format!(
                        "column `{}` of {what}: category `{value}` (row {row}) was not seen in \
                         training (known: {}); `.unknown(Unknown::Bucket)` on the encoder gives \
                         unseen categories a bucket of their own",
                        self.column,
                        preview(&self.values)
                    ))),
                }
            })
            .collect()
    }

    fn one_hot_names(&self, unknown: Unknown) -> Vec<String> {
        let mut names: Vec<String> =
            self.values.iter().map(|v| format!("{}={v}", self.column)).collect();
        if unknown == Unknown::Bucket {
            names.push(format!("{}={UNKNOWN_CATEGORY}", self.column));
        }
        names
    }

    fn one_hot(&self, table: &mut Table, unknown: Unknown, what: &str) -> Result<()> {
        let codes = self.codes(table, unknown, what)?;
        let columns = self
            .one_hot_names(unknown)
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                (name, Col::Num(codes.iter().map(|&c| if c == i { 1.0 } else { 0.0 }).collect()))
            })
            .collect();
        table.splice(&self.column, columns);
        Ok(())
    }

    fn ordinal(&self, table: &mut Table, unknown: Unknown, what: &str) -> Result<()> {
        let codes = self.codes(table, unknown, what)?;
        let col = table.get_mut(&self.column).expect("codes read it");
        *col = Col::Num(codes.into_iter().map(|c| c as f32).collect());
        Ok(())
    }
}

/// The first categories, for an error.
fn preview(values: &[String]) -> String {
    let shown: Vec<&str> = values.iter().take(10).map(String::as_str).collect();
    let more = values.len().saturating_sub(shown.len());
    if more > 0 { format!("{}, and {more} more", shown.join(", ")) } else { shown.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(values: &[f32]) -> Col {
        Col::Num(values.to_vec())
    }

    fn text(values: &[Option<&str>]) -> Col {
        Col::Text(values.iter().map(|v| v.map(str::to_owned)).collect())
    }

    fn table(cols: Vec<(&str, Col)>) -> Table {
        Table {
            rows: cols[0].1.len(),
            cols: cols.into_iter().map(|(n, c)| (n.into(), c)).collect(),
        }
    }

    fn scope(features: &[&str], _label: Option<&str>) -> Scope {
        Scope { features: features.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn scalers_take_numeric_features_and_leave_the_label() {
        let mut t = table(vec![
            ("x", num(&[1.0, 2.0, 3.0])),
            ("k", num(&[5.0, 5.0, 5.0])),
            ("city", text(&[Some("a"), Some("b"), Some("a")])),
            ("y", num(&[0.0, 1.0, 0.0])),
        ]);
        let mut p = Preprocessor::from(StandardScaler::new());
        p.fit_table(&mut t, &mut scope(&["x", "k", "city"], Some("y")), "train").unwrap();
        let s = (2.0f64 / 3.0).sqrt();
        assert_eq!(t.get("x"), Some(&num(&[(-1.0 / s) as f32, 0.0, (1.0 / s) as f32])));
        assert_eq!(t.get("k"), Some(&num(&[0.0, 0.0, 0.0])), "a constant column is only centred");
        assert_eq!(t.get("y"), Some(&num(&[0.0, 1.0, 0.0])), "the label is not scaled");

        let mut t = table(vec![("x", num(&[2.0, 4.0, 6.0])), ("y", num(&[1.0, 2.0, 3.0]))]);
        let mut p = Preprocessor::from(MinMaxScaler::new().columns(["x", "y"]));
        p.fit_table(&mut t, &mut scope(&["x"], Some("y")), "train").unwrap();
        assert_eq!(t.get("x"), Some(&num(&[0.0, 0.5, 1.0])));
        assert_eq!(t.get("y"), Some(&num(&[0.0, 0.5, 1.0])), "named columns include the label");
    }

    #[test]
    fn a_chain_imputes_then_encodes_and_renames_features() {
        let mut t = table(vec![
            ("x", num(&[1.0, f32::NAN, 3.0, 4.0])),
            ("city", text(&[Some("b"), None, Some("a"), Some("b")])),
        ]);
        let mut p: Preprocessor = Chain::new()
            .then(SimpleImputer::mean())
            .then(SimpleImputer::most_frequent().columns(["city"]))
            .then(OneHotEncoder::new())
            .into();
        let mut s = scope(&["x", "city"], None);
        p.fit_table(&mut t, &mut s, "train").unwrap();
        assert_eq!(s.features, ["x", "city=a", "city=b"]);
        assert_eq!(p.output_features(&["x".into(), "city".into()]), s.features);
        assert_eq!(t.get("x"), Some(&num(&[1.0, 8.0 / 3.0, 3.0, 4.0])));
        assert_eq!(t.get("city=b"), Some(&num(&[1.0, 1.0, 0.0, 1.0])), "the null became `b`");

        // Saved and loaded, it transforms new data the same way.
        let json = serde_json::to_string(&p).unwrap();
        let loaded: Preprocessor = serde_json::from_str(&json).unwrap();
        assert!(loaded.is_fitted());
        let mut new = table(vec![("x", num(&[f32::NAN])), ("city", text(&[Some("a")]))]);
        loaded.transform_table(&mut new, "input").unwrap();
        assert_eq!(new.row_major(&s.features, "input").unwrap(), [8.0 / 3.0, 1.0, 0.0]);

        let mut unseen = table(vec![("x", num(&[1.0])), ("city", text(&[Some("c")]))]);
        let err = loaded.transform_table(&mut unseen, "dataset `valid`").unwrap_err().to_string();
        assert!(
            err.contains("column `city` of dataset `valid`: category `c` (row 0) was not seen in training (known: a, b)"),
            "{err}"
        );
    }

    #[test]
    fn unknown_categories_go_to_their_bucket_when_asked() {
        let mut t = table(vec![("c", text(&[Some("x"), Some("y")]))]);
        let mut p = Preprocessor::from(OneHotEncoder::new().unknown(Unknown::Bucket));
        let mut s = scope(&["c"], None);
        p.fit_table(&mut t, &mut s, "train").unwrap();
        assert_eq!(s.features, ["c=x", "c=y", "c=<unknown>"]);
        let mut new = table(vec![("c", text(&[Some("z"), Some("y")]))]);
        p.transform_table(&mut new, "input").unwrap();
        assert_eq!(new.row_major(&s.features, "input").unwrap(), [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]);

        let mut t = table(vec![("label", text(&[Some("cat"), Some("ant"), Some("cat")]))]);
        let mut p = Preprocessor::from(OrdinalEncoder::new(["label"]));
        p.fit_table(&mut t, &mut scope(&[], Some("label")), "train").unwrap();
        assert_eq!(t.get("label"), Some(&num(&[1.0, 0.0, 1.0])));
        assert_eq!(p.ordinal_categories("label").unwrap(), ["ant", "cat"]);
    }

    #[test]
    fn missing_values_and_wrong_types_are_named() {
        let mut t = table(vec![("x", num(&[1.0, f32::NAN]))]);
        let err = Preprocessor::from(StandardScaler::new())
            .fit_table(&mut t, &mut scope(&["x"], None), "dataset `train`")
            .unwrap_err()
            .to_string();
        assert!(err.contains("StandardScaler: column `x` of dataset `train` has missing values (the first in row 1); put a SimpleImputer"), "{err}");
        let mut t = table(vec![("c", text(&[Some("a")]))]);
        let err = Preprocessor::from(SimpleImputer::mean().columns(["c"]))
            .fit_table(&mut t, &mut scope(&["c"], None), "dataset `train`")
            .unwrap_err()
            .to_string();
        assert!(err.contains("column `c` of dataset `train` holds strings"), "{err}");
        let err = Preprocessor::from(StandardScaler::new().columns(["nope"]))
            .fit_table(&mut t, &mut scope(&["c"], None), "dataset `train`")
            .unwrap_err()
            .to_string();
        assert!(err.contains("dataset `train` has no column `nope` (it has: c)"), "{err}");
        let unfitted = Preprocessor::from(StandardScaler::new());
        assert!(unfitted.transform_table(&mut t, "input").is_err());
    }

    #[test]
    fn medians_and_most_frequent_break_ties_low() {
        let t = table(vec![
            ("x", num(&[4.0, 1.0, 3.0, 2.0, f32::NAN])),
            ("c", text(&[Some("b"), Some("a"), Some("b"), Some("a"), None])),
        ]);
        let fills = Strategy::Median.fit(&t, vec!["x".into()], "t").unwrap();
        assert_eq!(fills[0].value, Fill::Number(2.5));
        let fills = Strategy::MostFrequent.fit(&t, vec!["c".into()], "t").unwrap();
        assert_eq!(fills[0].value, Fill::Text("a".into()));
    }
}
