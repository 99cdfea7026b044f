//! An export's model as prediction uses it: its TorchScript module on a device, or its tree
//! model (XGBoost's), and its input schema (the columns and the fitted preprocessor), applied
//! a batch of rows at a time.

use std::path::Path;

use polars::prelude::{Column, DataFrame};
use tch::Kind;

use crate::model::TORCHSCRIPT_FILE;
use crate::model::tree::{TreeModel, TreeOutput};
use crate::torch::TorchResult;
use rtune_driver::data::{DATA_SCHEMA_FILE, DataSchema, LabelKind};
use rtune_driver::error::{Error, Result};

/// The fewest rows a TorchScript model is run on, on libtorch's present threads (see
/// `ExportedModel::outputs`): on one thread (a serving replica of 1 CPU) its matrix products
/// take their other path only below 4 rows; on more, below 12 (16 for margin).
fn least_rows() -> usize {
    if tch::get_num_threads() == 1 { 4 } else { 16 }
}

pub(crate) struct ExportedModel {
    pub schema: DataSchema,
    engine: Engine,
}

/// What computes the outputs.
enum Engine {
    Torch { module: tch::CModule, device: tch::Device },
    Tree(TreeModel),
}

/// A batch's outputs, before they become columns: a classifier's class scores (logits, or
/// probabilities already) a row each, or values.
enum Outputs {
    Logits(tch::Tensor),
    Probabilities { classes: usize, values: Vec<f32> },
    Values(Vec<Vec<f32>>),
}

impl ExportedModel {
    /// The export in folder `dir` on `device` (a TorchScript model's; a tree model predicts on
    /// the CPU); errors say what is missing or wrong.
    pub(crate) fn load(dir: &Path, device: tch::Device) -> Result<ExportedModel> {
        if !dir.is_dir() {
            return Err(Error::Data(format!(
                "{} is not a folder; give the folder `rtune export` wrote",
                dir.display()
            )));
        }
        let script = dir.join(TORCHSCRIPT_FILE);
        let tree = TreeModel::is_in(dir);
        if !script.is_file() && !tree {
            return Err(Error::Data(format!(
                "{} has no {TORCHSCRIPT_FILE} and no tree model ({}): predict from a folder \
                 `rtune export` wrote for a trainable whose model it knows (`Registry::model`) \
                 or a tree trainer's",
                dir.display(),
                TreeModel::FILES.join(", ")
            )));
        }
        let schema = DataSchema::read(dir)?.ok_or_else(|| {
            Error::Data(format!(
                "{} has no {DATA_SCHEMA_FILE}: its model was not trained on datasets, so its \
                 input columns are unknown",
                dir.display()
            ))
        })?;
        if tree {
            let model = TreeModel::load(dir)?;
            if model.num_features() != schema.model_inputs.len() {
                return Err(Error::Data(format!(
                    "{}: the tree model takes {} inputs where {DATA_SCHEMA_FILE} makes {}",
                    dir.display(),
                    model.num_features(),
                    schema.model_inputs.len()
                )));
            }
            return Ok(ExportedModel { schema, engine: Engine::Tree(model) });
        }
        let mut module = tch::CModule::load_on_device(&script, device).map_err(|e| {
            Error::Data(format!(
                "{}: not a TorchScript module rtune can load: {e}",
                script.display()
            ))
        })?;
        module.set_eval();
        Ok(ExportedModel { schema, engine: Engine::Torch { module, device } })
    }

    /// The input must hold every feature; other columns (the label aside) only when allowed.
    pub(super) fn check_columns(
        &self,
        frame: &DataFrame,
        allow_extra: bool,
        input: &Path,
    ) -> Result<()> {
        let schema = &self.schema;
        let names: Vec<String> =
            frame.get_column_names().iter().map(|n| n.as_str().to_owned()).collect();
        let missing: Vec<&String> = schema.features.iter().filter(|f| !names.contains(f)).collect();
        // A CSV file's first row of numbers read as its header (polars renames repeated
        // values): none of the model's columns, and numbers for names.
        let numbers = names.first().is_some_and(|n| n.trim().parse::<f64>().is_ok());
        if missing.len() == schema.features.len() && numbers {
            return Err(Error::Data(format!(
                "{} has no header row (its first row is numbers): pass --no-header to read the \
                 model's {} input columns in order",
                input.display(),
                schema.features.len()
            )));
        }
        if !missing.is_empty() {
            let shown = missing.len().min(8);
            let more = missing.len() - shown;
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            return Err(Error::Data(format!(
                "{} lacks the model's input column(s) {}{more}",
                input.display(),
                quoted(missing[..shown].to_vec())
            )));
        }
        let extra: Vec<&String> = names
            .iter()
            .filter(|n| !schema.features.contains(n) && schema.label.as_ref() != Some(*n))
            .collect();
        if !extra.is_empty() && !allow_extra {
            return Err(Error::Data(format!(
                "{} has column(s) the model does not take: {}; pass --allow-extra to copy them \
                 to the output unchanged",
                input.display(),
                quoted(extra)
            )));
        }
        Ok(())
    }

    /// The Open Inference Protocol's name for what computes the outputs.
    pub(crate) fn platform(&self) -> &'static str {
        match &self.engine {
            Engine::Torch { .. } => "pytorch_torchscript",
            Engine::Tree(model) if model.library() == "XGBoost" => "xgboost",
            Engine::Tree(_) => "lightgbm",
        }
    }

    /// The model's outputs for a table's rows.
    fn outputs(&self, inputs: Vec<f32>, rows: usize) -> Result<Outputs> {
        let classifier = self.schema.label_kind == Some(LabelKind::Class);
        match &self.engine {
            Engine::Torch { module, device } => {
                // A row's answer must not depend on the rows batched with it (a server batches
                // whatever requests arrive together): libtorch's CPU matrix products take
                // another path for small batches, whose sums round otherwise (measured with
                // linear layers of 7 to 4096 units against the same rows in a batch of
                // thousands on 2 threads: on 2 threads batches of 1-3, 5-7 and 9-11 rows
                // differ in the last bits, 12 and more never; on 1 thread only 1-3 rows do).
                // Small batches are padded with rows of zeros.
                let width = self.schema.model_inputs.len();
                let padded = rows.max(least_rows());
                let mut inputs = inputs;
                inputs.resize(padded * width, 0.0);
                let x = tch::Tensor::from_slice(&inputs)
                    .f_view([padded as i64, width as i64])
                    .torch()?
                    .f_to_device(*device)
                    .torch()?;
                let outputs = tch::no_grad(|| module.forward_ts(&[x]))
                    .torch()?
                    .f_narrow(0, 0, rows as i64)
                    .torch()?
                    .f_to_device(tch::Device::Cpu)
                    .torch()?
                    .f_to_kind(Kind::Float)
                    .torch()?;
                if classifier {
                    return Ok(Outputs::Logits(outputs));
                }
                let values: Vec<Vec<f32>> = Vec::try_from(
                    outputs.f_reshape([rows as i64, -1]).torch()?.f_transpose(0, 1).torch()?,
                )
                .torch()?;
                Ok(Outputs::Values(values))
            }
            Engine::Tree(model) => Ok(match model.predict(&inputs, rows)? {
                TreeOutput::Probabilities { classes, values, .. } => {
                    Outputs::Probabilities { classes, values }
                }
                TreeOutput::Values(values) => Outputs::Values(vec![values]),
            }),
        }
    }

    /// `frame` with the model's predictions appended: a `prediction` column (a class, or a
    /// value; `prediction_<j>` for several) and, for a classifier, `prob_<class>` columns.
    pub(crate) fn predict(&self, mut frame: DataFrame, what: &str) -> Result<DataFrame> {
        let schema = &self.schema;
        let table = schema.table(&frame, false, what)?;
        let inputs = schema.inputs(&table, what)?;
        let names = schema.label_classes();
        let class_name = |c: usize| names.and_then(|n| n.get(c).cloned());
        let mut columns = Vec::new();
        let classes_column = |classes: Vec<i64>| match names {
            Some(names) => Column::new(
                "prediction".into(),
                classes.iter().map(|&c| names.get(c as usize).cloned()).collect::<Vec<_>>(),
            ),
            None => Column::new("prediction".into(), classes),
        };
        // Each class's probabilities, a column each.
        let probs: Vec<Vec<f32>> = match self.outputs(inputs, table.rows)? {
            Outputs::Logits(logits) => {
                let classes: Vec<i64> =
                    Vec::try_from(logits.f_argmax(-1, false).torch()?).torch()?;
                columns.push(classes_column(classes));
                Vec::try_from(logits.f_softmax(-1, Kind::Float).torch()?.f_transpose(0, 1).torch()?)
                    .torch()?
            }
            Outputs::Probabilities { classes, values } => {
                let rows: Vec<&[f32]> = values.chunks(classes).collect();
                let best = |row: &[f32]| {
                    // The first of the largest, as argmax takes it.
                    (0..row.len()).fold(0, |b, c| if row[c] > row[b] { c } else { b }) as i64
                };
                columns.push(classes_column(rows.iter().map(|r| best(r)).collect()));
                (0..classes).map(|c| rows.iter().map(|r| r[c]).collect()).collect()
            }
            Outputs::Values(values) if schema.label_kind == Some(LabelKind::Class) => {
                columns.push(classes_column(values[0].iter().map(|&v| v as i64).collect()));
                Vec::new()
            }
            Outputs::Values(values) => {
                if values.len() == 1 {
                    columns.push(Column::new("prediction".into(), values[0].clone()));
                } else {
                    for (j, v) in values.into_iter().enumerate() {
                        columns.push(Column::new(format!("prediction_{j}").into(), v));
                    }
                }
                Vec::new()
            }
        };
        for (c, p) in probs.into_iter().enumerate() {
            let name = class_name(c).unwrap_or_else(|| c.to_string());
            columns.push(Column::new(format!("prob_{name}").into(), p));
        }
        frame.hstack_mut(&columns)?;
        // The parquet writer takes a batch whose columns are chunked alike.
        frame.align_chunks();
        Ok(frame)
    }
}

fn quoted(names: Vec<&String>) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}
