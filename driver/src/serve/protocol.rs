//! The Open Inference Protocol's tensors as `rtune serve` reads and writes them, whichever
//! front they came through: a request's inputs become rows of the export's columns ([`Rows`]),
//! checked against the model ([`Model`]) with a refusal that names the input; a batch's
//! predictions become the protocol's outputs ([`Outputs`]), each request's rows cut out.
//!
//! A request gives its rows in one of two forms: `input`, one FP32 tensor `[rows, columns]` of
//! the export's input columns in order (what the model's metadata lists), or one input per
//! column, named as the column, of numbers or strings (`BYTES`), each `[rows]`. Either way the
//! values are the raw ones: the export's preprocessor scales and encodes them.

use std::sync::Arc;

use polars::prelude::{Column, DataFrame, DataType};

use crate::data::{DataSchema, LabelKind};

/// The one input that holds every column.
pub const TENSOR_INPUT: &str = "input";
/// The outputs: the predicted class (or value) of each row, and a classifier's class
/// probabilities.
pub const PREDICTION: &str = "prediction";
pub const PROBABILITIES: &str = "probabilities";

/// Why a request gets no predictions, as each front says it.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub code: Code,
    pub message: String,
}

/// The kinds of refusal: HTTP's status and gRPC's code follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The request is wrong (400, INVALID_ARGUMENT).
    BadRequest,
    /// No such model or route (404, NOT_FOUND).
    NotFound,
    /// Its body is over the limit (413, RESOURCE_EXHAUSTED).
    TooLarge,
    /// Every replica's queue is full (503 with Retry-After, RESOURCE_EXHAUSTED).
    Busy,
    /// The server is stopping (503, UNAVAILABLE).
    Draining,
    /// No answer within the request's deadline (504, DEADLINE_EXCEEDED).
    Timeout,
    /// The model failed on rows the request could not have got wrong (500, INTERNAL).
    Internal,
    /// A non-loopback server's token is missing or wrong (401, UNAUTHENTICATED).
    Unauthorized,
}

impl Code {
    pub fn http_status(self) -> u16 {
        match self {
            Code::BadRequest => 400,
            Code::Unauthorized => 401,
            Code::NotFound => 404,
            Code::TooLarge => 413,
            Code::Internal => 500,
            Code::Busy | Code::Draining => 503,
            Code::Timeout => 504,
        }
    }
}

impl Refusal {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Refusal { code, message: message.into() }
    }

    pub fn bad(message: impl Into<String>) -> Self {
        Refusal::new(Code::BadRequest, message)
    }
}

/// What a front needs to know of the model it serves.
#[derive(Debug, Clone)]
pub struct Model {
    pub name: String,
    pub version: String,
    /// The protocol's platform name: `pytorch_torchscript`, `xgboost`, `lightgbm`.
    pub platform: String,
    pub schema: DataSchema,
    /// The outputs' metadata (from a prediction of one row at start, where one could be made).
    pub outputs: Vec<TensorSpec>,
}

/// A tensor's name, datatype and shape (-1: any size) as metadata lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: &'static str,
    pub shape: Vec<i64>,
}

impl Model {
    /// The inputs the metadata lists: the one tensor of every column.
    pub fn inputs(&self) -> Vec<TensorSpec> {
        let columns = self.schema.features.len() as i64;
        vec![TensorSpec { name: TENSOR_INPUT.into(), datatype: "FP32", shape: vec![-1, columns] }]
    }

    /// The outputs a model of this schema has, when no prediction says their sizes.
    pub fn default_outputs(schema: &DataSchema) -> Vec<TensorSpec> {
        let class = schema.label_kind == Some(LabelKind::Class);
        let prediction = TensorSpec {
            name: PREDICTION.into(),
            datatype: match (class, schema.label_classes().is_some()) {
                (true, true) => "BYTES",
                (true, false) => "INT64",
                (false, _) => "FP32",
            },
            shape: vec![-1],
        };
        let mut outputs = vec![prediction];
        if class {
            let probabilities = TensorSpec {
                name: PROBABILITIES.into(),
                datatype: "FP32",
                shape: vec![-1, schema.label_classes().map_or(-1, |c| c.len() as i64)],
            };
            outputs.push(probabilities);
        }
        outputs
    }

    /// Whether the request names this model (and, if it names one, this version).
    pub fn check_name(&self, name: &str, version: &str) -> Result<(), Refusal> {
        if name != self.name {
            return Err(Refusal::new(
                Code::NotFound,
                format!("no model `{name}`: this server serves `{}`", self.name),
            ));
        }
        if !version.is_empty() && version != self.version {
            return Err(Refusal::new(
                Code::NotFound,
                format!(
                    "model `{name}` has no version `{version}`: it serves version `{}`",
                    self.version
                ),
            ));
        }
        Ok(())
    }
}

/// An input's elements as they came, before they become a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Numbers(Vec<f64>),
    Floats(Vec<f32>),
    Texts(Vec<Option<String>>),
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::Numbers(v) => v.len(),
            Data::Floats(v) => v.len(),
            Data::Texts(v) => v.len(),
        }
    }
}

/// One input tensor of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub data: Data,
}

/// A column of a request's rows: numbers as f32 (as `rtune predict` reads a file's), or
/// strings.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    Numbers(Vec<f32>),
    Texts(Vec<Option<String>>),
}

/// A request's rows: the export's feature columns, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Rows {
    pub count: usize,
    pub columns: Vec<Values>,
}

/// The numeric datatypes of the protocol, with their element size in bytes.
pub const NUMERIC: [(&str, usize); 11] = [
    ("BOOL", 1),
    ("UINT8", 1),
    ("UINT16", 2),
    ("UINT32", 4),
    ("UINT64", 8),
    ("INT8", 1),
    ("INT16", 2),
    ("INT32", 4),
    ("INT64", 8),
    ("FP32", 4),
    ("FP64", 8),
];

/// An input's elements from their little-endian bytes (the protocol's binary form: HTTP's
/// binary tensor extension, gRPC's raw contents); BYTES as 4-byte lengths each followed by
/// the bytes.
pub fn decode_raw(name: &str, datatype: &str, raw: &[u8]) -> Result<Data, Refusal> {
    let size = |d: &str| NUMERIC.iter().find(|(n, _)| *n == d).map(|(_, s)| *s);
    if datatype == "BYTES" {
        let mut texts = Vec::new();
        let mut rest = raw;
        while !rest.is_empty() {
            let (len, tail) = rest.split_at_checked(4).ok_or_else(|| truncated(name))?;
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let (text, tail) = tail.split_at_checked(len).ok_or_else(|| truncated(name))?;
            texts.push(Some(String::from_utf8_lossy(text).into_owned()));
            rest = tail;
        }
        return Ok(Data::Texts(texts));
    }
    let Some(width) = size(datatype) else {
        return Err(unknown_datatype(name, datatype));
    };
    if !raw.len().is_multiple_of(width) {
        return Err(Refusal::bad(format!(
            "input `{name}`: {} bytes are no whole number of {datatype} elements ({width} bytes \
             each)",
            raw.len()
        )));
    }
    let chunks = raw.chunks_exact(width);
    let numbers: Vec<f64> = match datatype {
        "FP32" => {
            return Ok(Data::Floats(
                chunks.map(|c| f32::from_le_bytes(c.try_into().expect("4"))).collect(),
            ));
        }
        "FP64" => chunks.map(|c| f64::from_le_bytes(c.try_into().expect("8"))).collect(),
        "BOOL" | "UINT8" => chunks.map(|c| f64::from(c[0])).collect(),
        "INT8" => chunks.map(|c| f64::from(c[0] as i8)).collect(),
        "UINT16" => {
            chunks.map(|c| f64::from(u16::from_le_bytes(c.try_into().expect("2")))).collect()
        }
        "INT16" => {
            chunks.map(|c| f64::from(i16::from_le_bytes(c.try_into().expect("2")))).collect()
        }
        "UINT32" => {
            chunks.map(|c| f64::from(u32::from_le_bytes(c.try_into().expect("4")))).collect()
        }
        "INT32" => {
            chunks.map(|c| f64::from(i32::from_le_bytes(c.try_into().expect("4")))).collect()
        }
        "UINT64" => chunks.map(|c| u64::from_le_bytes(c.try_into().expect("8")) as f64).collect(),
        _ => chunks.map(|c| i64::from_le_bytes(c.try_into().expect("8")) as f64).collect(),
    };
    Ok(Data::Numbers(numbers))
}

fn truncated(name: &str) -> Refusal {
    Refusal::bad(format!(
        "input `{name}`: its BYTES data ends inside an element (each is a 4-byte little-endian \
         length, then that many bytes)"
    ))
}

pub fn unknown_datatype(name: &str, datatype: &str) -> Refusal {
    let known: Vec<&str> = NUMERIC.iter().map(|(n, _)| *n).chain(["BYTES"]).collect();
    Refusal::bad(format!(
        "input `{name}` has datatype `{datatype}`, which is none of the protocol's ({})",
        known.join(", ")
    ))
}

impl Rows {
    /// A request's inputs as rows of `schema`'s columns; a refusal names the input and what
    /// would be right.
    pub fn from_inputs(schema: &DataSchema, inputs: Vec<Input>) -> Result<Rows, Refusal> {
        let features = &schema.features;
        if inputs.is_empty() {
            return Err(Refusal::bad(format!(
                "the request has no inputs: give `{TENSOR_INPUT}` (FP32 [rows, {}], the columns \
                 {} in order) or one input per column",
                features.len(),
                list(features)
            )));
        }
        for input in &inputs {
            let known = input.name == TENSOR_INPUT || features.contains(&input.name);
            if !known {
                return Err(Refusal::bad(format!(
                    "input `{}` is neither `{TENSOR_INPUT}` (every column in one FP32 tensor) \
                     nor a column the model takes; its columns: {}",
                    input.name,
                    list(features)
                )));
            }
            check_count(input)?;
        }
        if inputs.iter().any(|i| i.name == TENSOR_INPUT) {
            if inputs.len() > 1 {
                return Err(Refusal::bad(format!(
                    "the request gives `{TENSOR_INPUT}` and {} other input(s): give every column \
                     in `{TENSOR_INPUT}` or one input per column, not both",
                    inputs.len() - 1
                )));
            }
            let input = inputs.into_iter().next().expect("one input");
            return Self::from_tensor(features.len(), input);
        }
        let mut given: Vec<Option<Input>> = vec![None; features.len()];
        for input in inputs {
            let at = features.iter().position(|f| *f == input.name).expect("checked above");
            if given[at].is_some() {
                return Err(Refusal::bad(format!("input `{}` is given twice", input.name)));
            }
            given[at] = Some(input);
        }
        let missing: Vec<String> = features
            .iter()
            .zip(&given)
            .filter(|(_, g)| g.is_none())
            .map(|(f, _)| f.clone())
            .collect();
        if !missing.is_empty() {
            return Err(Refusal::bad(format!(
                "the request lacks the model's input column(s) {}: give one input per column, \
                 or all of them as `{TENSOR_INPUT}`",
                list(&missing)
            )));
        }
        let mut count = None;
        let mut columns = Vec::with_capacity(features.len());
        for input in given.into_iter().map(|g| g.expect("none missing")) {
            let rows = match input.shape.as_slice() {
                [rows] | [rows, 1] => *rows as usize,
                _ => {
                    return Err(Refusal::bad(format!(
                        "input `{}` has shape {:?}: a column's input is [rows] (or [rows, 1])",
                        input.name, input.shape
                    )));
                }
            };
            if let Some((first, name)) = &count
                && *first != rows
            {
                return Err(Refusal::bad(format!(
                    "input `{}` has {rows} rows where `{name}` has {first}: every column needs \
                     the same rows",
                    input.name
                )));
            }
            count.get_or_insert((rows, input.name.clone()));
            columns.push(match input.data {
                Data::Numbers(v) => Values::Numbers(v.into_iter().map(|x| x as f32).collect()),
                Data::Floats(v) => Values::Numbers(v),
                Data::Texts(v) => Values::Texts(v),
            });
        }
        Ok(Rows { count: count.map_or(0, |(n, _)| n), columns })
    }

    fn from_tensor(columns: usize, input: Input) -> Result<Rows, Refusal> {
        if input.datatype != "FP32" {
            return Err(Refusal::bad(format!(
                "input `{TENSOR_INPUT}` has datatype {}: it is FP32 (give strings, or other \
                 types, as one input per column)",
                input.datatype
            )));
        }
        let rows = match input.shape.as_slice() {
            [rows, c] if *c as usize == columns => *rows as usize,
            [c] if *c as usize == columns => 1,
            _ => {
                return Err(Refusal::bad(format!(
                    "input `{TENSOR_INPUT}` has shape {:?}: the model takes [rows, {columns}] \
                     (its {columns} input columns in order)",
                    input.shape
                )));
            }
        };
        let values: Vec<f32> = match input.data {
            Data::Floats(v) => v,
            Data::Numbers(v) => v.into_iter().map(|x| x as f32).collect(),
            Data::Texts(_) => unreachable!("FP32 data is numbers"),
        };
        let columns = (0..columns)
            .map(|c| Values::Numbers(values.iter().skip(c).step_by(columns).copied().collect()))
            .collect();
        Ok(Rows { count: rows, columns })
    }

    /// Whether each column holds numbers: batches stack rows whose columns agree.
    pub fn kinds(&self) -> Vec<bool> {
        self.columns.iter().map(|c| matches!(c, Values::Numbers(_))).collect()
    }

    /// The rows of several requests, one after the other, as the frame `rtune predict` reads.
    pub fn frame(schema: &DataSchema, batch: &[&Rows]) -> polars::prelude::PolarsResult<DataFrame> {
        let count: usize = batch.iter().map(|r| r.count).sum();
        let mut columns = Vec::with_capacity(schema.features.len());
        for (c, name) in schema.features.iter().enumerate() {
            let column = match &batch[0].columns[c] {
                Values::Numbers(_) => {
                    let mut all = Vec::with_capacity(count);
                    for rows in batch {
                        if let Values::Numbers(v) = &rows.columns[c] {
                            all.extend_from_slice(v);
                        }
                    }
                    Column::new(name.into(), all)
                }
                Values::Texts(_) => {
                    let mut all = Vec::with_capacity(count);
                    for rows in batch {
                        if let Values::Texts(v) = &rows.columns[c] {
                            all.extend(v.iter().cloned());
                        }
                    }
                    Column::new(name.into(), all)
                }
            };
            columns.push(column);
        }
        DataFrame::new(count, columns)
    }
}

/// The element count must be what the shape says.
fn check_count(input: &Input) -> Result<(), Refusal> {
    if let Some(bad) = input.shape.iter().find(|&&d| d < 0) {
        return Err(Refusal::bad(format!(
            "input `{}` has shape {:?}: a request's sizes are known ({bad} is not one)",
            input.name, input.shape
        )));
    }
    let want: i64 = input.shape.iter().product();
    if want as usize != input.data.len() {
        return Err(Refusal::bad(format!(
            "input `{}` has shape {:?}, which holds {want} elements, but {} are given",
            input.name,
            input.shape,
            input.data.len()
        )));
    }
    Ok(())
}

fn list(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(12).map(|n| format!("`{n}`")).collect();
    let more = names.len().saturating_sub(shown.len());
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

/// An output's elements.
#[derive(Debug, Clone, PartialEq)]
pub enum OutData {
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Texts(Vec<String>),
}

/// One output tensor of a batch (or of a request, cut out of it).
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub name: &'static str,
    /// Elements per row (1 for `[rows]`).
    pub width: usize,
    /// Whether the shape is `[rows, width]` (or `[rows]`).
    pub matrix: bool,
    pub data: OutData,
}

impl Output {
    pub fn datatype(&self) -> &'static str {
        match self.data {
            OutData::Floats(_) => "FP32",
            OutData::Ints(_) => "INT64",
            OutData::Texts(_) => "BYTES",
        }
    }

    pub fn shape(&self, rows: usize) -> Vec<i64> {
        if self.matrix { vec![rows as i64, self.width as i64] } else { vec![rows as i64] }
    }

    /// Rows `from..to` of it.
    fn cut(&self, from: usize, to: usize) -> Output {
        let (a, b) = (from * self.width, to * self.width);
        let data = match &self.data {
            OutData::Floats(v) => OutData::Floats(v[a..b].to_vec()),
            OutData::Ints(v) => OutData::Ints(v[a..b].to_vec()),
            OutData::Texts(v) => OutData::Texts(v[a..b].to_vec()),
        };
        Output { name: self.name, width: self.width, matrix: self.matrix, data }
    }

    /// Its elements as little-endian bytes (BYTES: each a 4-byte length, then its bytes).
    pub fn raw(&self) -> Vec<u8> {
        match &self.data {
            OutData::Floats(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            OutData::Ints(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            OutData::Texts(v) => v
                .iter()
                .flat_map(|t| (t.len() as u32).to_le_bytes().into_iter().chain(t.bytes()))
                .collect(),
        }
    }

    pub fn spec(&self) -> TensorSpec {
        let shape = if self.matrix { vec![-1, self.width as i64] } else { vec![-1] };
        TensorSpec { name: self.name.into(), datatype: self.datatype(), shape }
    }
}

/// A batch's predictions, shared by the requests in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs(pub Vec<Output>);

/// One request's answer: its rows of the batch's outputs.
#[derive(Debug, Clone)]
pub struct Answer {
    pub rows: usize,
    pub outputs: Vec<Output>,
}

impl Outputs {
    /// The outputs of a frame of predictions (what `rtune predict` writes after the input
    /// columns): `prediction` (or `prediction_<j>`, as one [rows, j] tensor) and a
    /// classifier's `prob_<class>` columns as `probabilities` [rows, classes].
    pub fn from_frame(frame: &DataFrame) -> Result<Outputs, String> {
        let columns = frame.columns();
        let floats = |c: &Column| -> Result<Vec<f32>, String> {
            let c = c.cast(&DataType::Float32).map_err(|e| e.to_string())?;
            Ok(c.f32().map_err(|e| e.to_string())?.into_no_null_iter().collect())
        };
        let mut outputs = Vec::new();
        let mut values = Vec::new();
        let mut probs = Vec::new();
        for column in columns {
            let name = column.name().as_str();
            if name == PREDICTION {
                let data = match column.dtype() {
                    DataType::String => OutData::Texts(
                        column
                            .str()
                            .map_err(|e| e.to_string())?
                            .iter()
                            .map(|s| s.unwrap_or_default().to_owned())
                            .collect(),
                    ),
                    DataType::Int64 | DataType::Int32 => OutData::Ints(
                        column
                            .cast(&DataType::Int64)
                            .map_err(|e| e.to_string())?
                            .i64()
                            .map_err(|e| e.to_string())?
                            .into_no_null_iter()
                            .collect(),
                    ),
                    _ => OutData::Floats(floats(column)?),
                };
                outputs.push(Output { name: PREDICTION, width: 1, matrix: false, data });
            } else if name.starts_with("prediction_") {
                values.push(floats(column)?);
            } else if name.starts_with("prob_") {
                probs.push(floats(column)?);
            }
        }
        let interleave = |cols: Vec<Vec<f32>>| {
            let rows = cols.first().map_or(0, Vec::len);
            let mut all = Vec::with_capacity(rows * cols.len());
            for r in 0..rows {
                all.extend(cols.iter().map(|c| c[r]));
            }
            all
        };
        if !values.is_empty() {
            let width = values.len();
            let data = OutData::Floats(interleave(values));
            outputs.push(Output { name: PREDICTION, width, matrix: true, data });
        }
        if !probs.is_empty() {
            let width = probs.len();
            let data = OutData::Floats(interleave(probs));
            outputs.push(Output { name: PROBABILITIES, width, matrix: true, data });
        }
        if outputs.is_empty() {
            return Err("the model's predictions have no `prediction` column".into());
        }
        Ok(Outputs(outputs))
    }

    /// Rows `from..to` of every output.
    pub fn cut(self: &Arc<Self>, from: usize, to: usize) -> Answer {
        Answer { rows: to - from, outputs: self.0.iter().map(|o| o.cut(from, to)).collect() }
    }
}

/// The outputs a request asked for (all of them when it named none); a refusal names the
/// outputs there are.
pub fn requested<'a>(outputs: &'a [Output], names: &[String]) -> Result<Vec<&'a Output>, Refusal> {
    if names.is_empty() {
        return Ok(outputs.iter().collect());
    }
    names
        .iter()
        .map(|name| {
            outputs.iter().find(|o| o.name == name).ok_or_else(|| {
                let there: Vec<String> = outputs.iter().map(|o| o.name.to_owned()).collect();
                Refusal::bad(format!(
                    "the request asks for output `{name}`; the model's outputs: {}",
                    list(&there)
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> DataSchema {
        DataSchema {
            features: vec!["a".into(), "b".into()],
            label: Some("y".into()),
            label_kind: Some(LabelKind::Class),
            preprocessor: None,
            model_inputs: vec!["a".into(), "b".into()],
        }
    }

    fn input(name: &str, datatype: &str, shape: &[i64], data: Data) -> Input {
        Input { name: name.into(), datatype: datatype.into(), shape: shape.to_vec(), data }
    }

    #[test]
    fn the_tensor_and_the_columns_give_the_same_rows() {
        let tensor = input("input", "FP32", &[2, 2], Data::Floats(vec![1.0, 2.0, 3.0, 4.0]));
        let from_tensor = Rows::from_inputs(&schema(), vec![tensor]).unwrap();
        let columns = vec![
            input("b", "INT64", &[2], Data::Numbers(vec![2.0, 4.0])),
            input("a", "FP64", &[2, 1], Data::Numbers(vec![1.0, 3.0])),
        ];
        let from_columns = Rows::from_inputs(&schema(), columns).unwrap();
        assert_eq!(from_tensor, from_columns);
        assert_eq!(from_tensor.count, 2);
        assert_eq!(from_tensor.columns[1], Values::Numbers(vec![2.0, 4.0]));
    }

    #[test]
    fn wrong_inputs_are_named() {
        let refused = |inputs: Vec<Input>| Rows::from_inputs(&schema(), inputs).unwrap_err();
        let e = refused(vec![input("c", "FP32", &[1], Data::Floats(vec![1.0]))]);
        assert!(e.message.contains("input `c`") && e.message.contains("`a`, `b`"), "{e:?}");
        let e = refused(vec![input("a", "FP32", &[1], Data::Floats(vec![1.0]))]);
        assert!(e.message.contains("lacks") && e.message.contains("`b`"), "{e:?}");
        let e = refused(vec![input("input", "FP32", &[1, 3], Data::Floats(vec![1.0; 3]))]);
        assert!(e.message.contains("[rows, 2]"), "{e:?}");
        let e = refused(vec![input("input", "INT64", &[1, 2], Data::Numbers(vec![1.0; 2]))]);
        assert!(e.message.contains("FP32"), "{e:?}");
        let e = refused(vec![input("input", "FP32", &[2, 2], Data::Floats(vec![1.0; 3]))]);
        assert!(e.message.contains("4 elements, but 3"), "{e:?}");
        assert_eq!(e.code.http_status(), 400);
    }

    #[test]
    fn raw_bytes_decode_as_the_protocol_lays_them_out() {
        let raw: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(decode_raw("x", "FP32", &raw).unwrap(), Data::Floats(vec![1.5, -2.0]));
        let raw: Vec<u8> = [7i64, -3].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(decode_raw("x", "INT64", &raw).unwrap(), Data::Numbers(vec![7.0, -3.0]));
        let text = Output {
            name: PREDICTION,
            width: 1,
            matrix: false,
            data: OutData::Texts(vec!["cat".into(), "".into()]),
        };
        let back = decode_raw("x", "BYTES", &text.raw()).unwrap();
        assert_eq!(back, Data::Texts(vec![Some("cat".into()), Some(String::new())]));
        assert!(decode_raw("x", "FP32", &[0; 5]).unwrap_err().message.contains("5 bytes"));
        assert!(decode_raw("x", "BYTES", &[9, 0, 0, 0, 1]).is_err());
        assert!(decode_raw("x", "FP16", &[0; 2]).unwrap_err().message.contains("FP16"));
    }

    #[test]
    fn a_predicted_frame_becomes_outputs_cut_by_request() {
        let frame = DataFrame::new(
            3,
            vec![
                Column::new("a".into(), vec![0.0f32, 1.0, 2.0]),
                Column::new("prediction".into(), vec![1i64, 0, 1]),
                Column::new("prob_0".into(), vec![0.2f32, 0.9, 0.4]),
                Column::new("prob_1".into(), vec![0.8f32, 0.1, 0.6]),
            ],
        )
        .unwrap();
        let outputs = Arc::new(Outputs::from_frame(&frame).unwrap());
        let answer = outputs.cut(1, 3);
        assert_eq!(answer.outputs[0].data, OutData::Ints(vec![0, 1]));
        assert_eq!(answer.outputs[1].data, OutData::Floats(vec![0.9, 0.1, 0.4, 0.6]));
        assert_eq!(answer.outputs[1].shape(answer.rows), [2, 2]);
        let e = requested(&answer.outputs, &["logits".into()]).unwrap_err();
        assert!(e.message.contains("`prediction`, `probabilities`"), "{e:?}");
    }
}
