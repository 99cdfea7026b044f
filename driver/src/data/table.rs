//! The columns rtune's data path works on between polars and tch: numbers as f32 (a missing
//! value is NaN, as in scikit-learn's preprocessors) and strings (a missing value is None).
//! Preprocessors fit on and transform a `Table`; a shard turns its feature columns into one
//! row-major tensor.

use polars::prelude::{Column, DataFrame, DataType};

use crate::error::{Error, Result};

/// One column's values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Col {
    /// Numbers (ints, floats, booleans as 0/1); NaN where a value is missing.
    Num(Vec<f32>),
    /// Strings; None where a value is missing.
    Text(Vec<Option<String>>),
}

impl Col {
    pub(crate) fn len(&self) -> usize {
        match self {
            Col::Num(v) => v.len(),
            Col::Text(v) => v.len(),
        }
    }

    /// The value at `row` as a category name (numbers as written by Rust: `3`, `2.5`).
    pub(crate) fn category(&self, row: usize) -> Option<String> {
        match self {
            Col::Num(v) => Some(v[row]).filter(|x| !x.is_nan()).map(|x| x.to_string()),
            Col::Text(v) => v[row].clone(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Col::Num(_) => "numeric",
            Col::Text(_) => "string",
        }
    }
}

/// Named columns of equal length, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub rows: usize,
    pub(crate) cols: Vec<(String, Col)>,
}

/// Whether rtune reads a column of this type as numbers.
pub(crate) fn is_numeric(dtype: &DataType) -> bool {
    dtype.is_primitive_numeric() || matches!(dtype, DataType::Boolean)
}

impl Table {
    /// `names` of `frame`, read as numbers or strings. `what` names the data in errors (e.g.
    /// "dataset `train`").
    pub(crate) fn from_frame(frame: &DataFrame, names: &[String], what: &str) -> Result<Table> {
        let mut cols = Vec::with_capacity(names.len());
        for name in names {
            let column = frame.column(name).map_err(|_| {
                Error::Data(format!(
                    "{what} has no column `{name}` (its columns: {})",
                    column_list(frame)
                ))
            })?;
            cols.push((name.clone(), read_column(column, what)?));
        }
        Ok(Table { rows: frame.height(), cols })
    }

    /// Back to a polars frame: numbers as Float32 (missing as null), strings as String.
    pub(crate) fn to_frame(&self) -> Result<DataFrame> {
        let columns = self
            .cols
            .iter()
            .map(|(name, col)| match col {
                Col::Num(v) => Column::new(
                    name.into(),
                    v.iter().map(|x| Some(*x).filter(|x| !x.is_nan())).collect::<Vec<_>>(),
                ),
                Col::Text(v) => Column::new(name.into(), v.clone()),
            })
            .collect();
        Ok(DataFrame::new(self.rows, columns)?)
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Col> {
        self.cols.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Col> {
        self.cols.iter_mut().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// The column `name`, or an error naming it and `what` the table is.
    pub(crate) fn require(&self, name: &str, what: &str) -> Result<&Col> {
        self.get(name).ok_or_else(|| {
            let names: Vec<&str> = self.cols.iter().map(|(n, _)| n.as_str()).collect();
            Error::Data(format!("{what} has no column `{name}` (it has: {})", names.join(", ")))
        })
    }

    /// The numbers of column `name`: an error when it holds strings.
    pub(crate) fn numbers(&self, name: &str, what: &str) -> Result<&[f32]> {
        match self.require(name, what)? {
            Col::Num(v) => Ok(v),
            col => Err(Error::Data(format!(
                "column `{name}` of {what} is {}, not numeric: encode it first (OneHotEncoder \
                 or OrdinalEncoder)",
                col.kind()
            ))),
        }
    }

    /// Replaces column `name` by `with` (several columns, in its place).
    pub(crate) fn splice(&mut self, name: &str, with: Vec<(String, Col)>) {
        if let Some(at) = self.cols.iter().position(|(n, _)| n == name) {
            self.cols.splice(at..=at, with);
        }
    }

    /// The numeric columns `names` as one row-major `[rows * names.len()]` buffer. An error
    /// names a column that is missing, not numeric, or (with `no_missing`) has missing values.
    pub(crate) fn row_major(&self, names: &[String], what: &str) -> Result<Vec<f32>> {
        let columns = names
            .iter()
            .map(|name| {
                let values = self.numbers(name, what)?;
                if let Some(row) = values.iter().position(|x| x.is_nan()) {
                    return Err(Error::Data(format!(
                        "column `{name}` of {what} has missing values (the first in row {row}): \
                         fill them with a SimpleImputer, or drop those rows"
                    )));
                }
                Ok(values)
            })
            .collect::<Result<Vec<_>>>()?;
        let width = columns.len();
        let mut out = vec![0f32; self.rows * width];
        // A block of rows at a time, so the rows written stay in cache while every column
        // fills its place in them (one pass per column over the whole buffer is 10x slower).
        const BLOCK: usize = 256;
        for (b, block) in out.chunks_mut(BLOCK * width).enumerate() {
            let first = b * BLOCK;
            for (j, values) in columns.iter().enumerate() {
                let rows = &values[first..first + block.len() / width];
                for (row, &x) in rows.iter().enumerate() {
                    block[row * width + j] = x;
                }
            }
        }
        Ok(out)
    }
}

/// A frame's column names, for errors.
pub(crate) fn column_list(frame: &DataFrame) -> String {
    frame.get_column_names().iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
}

/// A polars column as numbers or strings.
fn read_column(column: &Column, what: &str) -> Result<Col> {
    let dtype = column.dtype();
    let bad = |e: polars::error::PolarsError| {
        Error::Data(format!("column `{}` of {what}: {e}", column.name()))
    };
    if is_numeric(dtype) {
        let floats = column.cast(&DataType::Float32).map_err(bad)?;
        let ca = floats.f32().map_err(bad)?;
        let mut out = Vec::with_capacity(ca.len());
        if ca.null_count() == 0 {
            ca.downcast_iter().for_each(|chunk| out.extend_from_slice(chunk.values().as_slice()));
        } else {
            out.extend(ca.iter().map(|x| x.unwrap_or(f32::NAN)));
        }
        Ok(Col::Num(out))
    } else if matches!(dtype, DataType::String) {
        let ca = column.str().map_err(bad)?;
        Ok(Col::Text(ca.iter().map(|s| s.map(str::to_owned)).collect()))
    } else {
        Err(Error::Data(format!(
            "column `{}` of {what} has type {dtype}: rtune reads numbers (integers, floats, \
             booleans) and strings; cast it to one of those",
            column.name()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_with_missing_values() {
        let frame = DataFrame::new(
            3,
            vec![
                Column::new("x".into(), [Some(1i64), None, Some(3)]),
                Column::new("flag".into(), [true, false, true]),
                Column::new("city".into(), [Some("a"), Some("b"), None]),
            ],
        )
        .unwrap();
        let names = ["x", "flag", "city"].map(String::from);
        let table = Table::from_frame(&frame, &names, "dataset `t`").unwrap();
        assert_eq!(table.get("flag"), Some(&Col::Num(vec![1.0, 0.0, 1.0])));
        assert!(matches!(table.get("x"), Some(Col::Num(v)) if v[1].is_nan()));
        assert_eq!(table.get("city").unwrap().category(1).as_deref(), Some("b"));
        let back = Table::from_frame(&table.to_frame().unwrap(), &names, "again").unwrap();
        assert_eq!(back.cols[2], table.cols[2]);
        let err = table.row_major(&names[..1], "dataset `t`").unwrap_err().to_string();
        assert!(
            err.contains("`x` of dataset `t` has missing values (the first in row 1)"),
            "{err}"
        );
        let err = table.row_major(&names[2..], "dataset `t`").unwrap_err().to_string();
        assert!(err.contains("`city` of dataset `t` is string, not numeric"), "{err}");
        let err = Table::from_frame(&frame, &["y".into()], "dataset `t`").unwrap_err();
        assert!(err.to_string().contains("no column `y` (its columns: x, flag, city)"), "{err}");
    }

    #[test]
    fn row_major_interleaves_columns() {
        let table = Table {
            rows: 2,
            cols: vec![
                ("a".into(), Col::Num(vec![1.0, 2.0])),
                ("b".into(), Col::Num(vec![3.0, 4.0])),
            ],
        };
        assert_eq!(table.row_major(&["a".into(), "b".into()], "t").unwrap(), [1.0, 3.0, 2.0, 4.0]);
        // Across blocks of rows, with a last partial block.
        let rows = 700;
        let cols: Vec<(String, Col)> = (0..3)
            .map(|j| (format!("c{j}"), Col::Num((0..rows).map(|r| (r * 10 + j) as f32).collect())))
            .collect();
        let names: Vec<String> = cols.iter().map(|(n, _)| n.clone()).collect();
        let out = Table { rows, cols }.row_major(&names, "t").unwrap();
        assert!(out.iter().enumerate().all(|(i, &x)| x == ((i / 3) * 10 + i % 3) as f32));
    }
}
