//! An export's model as prediction uses it: its TorchScript module on a device and its input
//! schema (the columns and the fitted preprocessor), applied a batch of rows at a time.

use std::path::Path;

use polars::prelude::{Column, DataFrame};
use tch::Kind;

use crate::model::TORCHSCRIPT_FILE;
use crate::torch::TorchResult;
use rtune_driver::data::{DATA_SCHEMA_FILE, DataSchema, LabelKind};
use rtune_driver::error::{Error, Result};

pub(super) struct ExportedModel {
    pub schema: DataSchema,
    module: tch::CModule,
    device: tch::Device,
}

impl ExportedModel {
    /// The export in folder `dir` on `device`; errors say what is missing or wrong.
    pub(super) fn load(dir: &Path, device: tch::Device) -> Result<ExportedModel> {
        if !dir.is_dir() {
            return Err(Error::Data(format!(
                "{} is not a folder; give the folder `rtune export` wrote",
                dir.display()
            )));
        }
        let script = dir.join(TORCHSCRIPT_FILE);
        if !script.is_file() {
            return Err(Error::Data(format!(
                "{} has no {TORCHSCRIPT_FILE}: predict from a folder `rtune export` wrote for a \
                 trainable whose model it knows (`Registry::model`)",
                dir.display()
            )));
        }
        let schema = DataSchema::read(dir)?.ok_or_else(|| {
            Error::Data(format!(
                "{} has no {DATA_SCHEMA_FILE}: its model was not trained on datasets, so its \
                 input columns are unknown",
                dir.display()
            ))
        })?;
        let mut module = tch::CModule::load_on_device(&script, device).map_err(|e| {
            Error::Data(format!(
                "{}: not a TorchScript module rtune can load: {e}",
                script.display()
            ))
        })?;
        module.set_eval();
        Ok(ExportedModel { schema, module, device })
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

    /// `frame` with the model's predictions appended: a `prediction` column (a class, or a
    /// value; `prediction_<j>` for several) and, for a classifier, `prob_<class>` columns.
    pub(super) fn predict(&self, mut frame: DataFrame, what: &str) -> Result<DataFrame> {
        let schema = &self.schema;
        let table = schema.table(&frame, false, what)?;
        let x = crate::torch::inputs(schema, &table, what)?.f_to_device(self.device).torch()?;
        let outputs = tch::no_grad(|| self.module.forward_ts(&[x]))
            .torch()?
            .f_to_device(tch::Device::Cpu)
            .torch()?
            .f_to_kind(Kind::Float)
            .torch()?;
        let mut columns = Vec::new();
        match schema.label_kind {
            Some(LabelKind::Class) => {
                let classes: Vec<i64> =
                    Vec::try_from(outputs.f_argmax(-1, false).torch()?).torch()?;
                let names = schema.label_classes();
                columns.push(match names {
                    Some(names) => Column::new(
                        "prediction".into(),
                        classes.iter().map(|&c| names.get(c as usize).cloned()).collect::<Vec<_>>(),
                    ),
                    None => Column::new("prediction".into(), classes),
                });
                let probs: Vec<Vec<f32>> = Vec::try_from(
                    outputs.f_softmax(-1, Kind::Float).torch()?.f_transpose(0, 1).torch()?,
                )
                .torch()?;
                for (c, p) in probs.into_iter().enumerate() {
                    let name =
                        names.and_then(|n| n.get(c).cloned()).unwrap_or_else(|| c.to_string());
                    columns.push(Column::new(format!("prob_{name}").into(), p));
                }
            }
            _ => {
                let values: Vec<Vec<f32>> = Vec::try_from(
                    outputs
                        .f_reshape([table.rows as i64, -1])
                        .torch()?
                        .f_transpose(0, 1)
                        .torch()?,
                )
                .torch()?;
                if values.len() == 1 {
                    columns.push(Column::new("prediction".into(), values[0].clone()));
                } else {
                    for (j, v) in values.into_iter().enumerate() {
                        columns.push(Column::new(format!("prediction_{j}").into(), v));
                    }
                }
            }
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
