//! `rtune serve`'s model: an export (TorchScript or a tree model, with its preprocessor)
//! predicting a batch of rows exactly as `rtune predict` predicts a file's, behind the Open
//! Inference Protocol of [`rtune_driver::serve`].

use std::path::Path;
use std::sync::Arc;

use polars::prelude::{Column, DataFrame};
use rtune_driver::error::Result;
use rtune_driver::serve::{Engine, Load, Model, TensorSpec};

use super::batch_predict::model::ExportedModel;

impl Engine for ExportedModel {
    fn predict(&mut self, frame: DataFrame) -> Result<DataFrame> {
        ExportedModel::predict(self, frame, "the request")
    }
}

/// The export in `dir` as the server describes it (under `name`, `version`), and how each
/// replica loads it on `device`. The model is loaded once here to check it and to learn its
/// outputs from a prediction of one row (zeros in every column, where its preprocessor takes
/// them).
pub fn model(
    dir: &Path,
    name: String,
    version: String,
    device: tch::Device,
) -> Result<(Model, Load)> {
    let exported = ExportedModel::load(dir, device)?;
    let schema = exported.schema.clone();
    let zeros: Vec<Column> =
        schema.features.iter().map(|f| Column::new(f.into(), vec![0f32])).collect();
    let outputs = DataFrame::new(1, zeros)
        .ok()
        .and_then(|frame| exported.predict(frame, "a row of zeros").ok())
        .and_then(|frame| {
            rtune_driver::serve::protocol::Outputs::from_frame(&frame, schema.features.len()).ok()
        })
        .map(|outputs| outputs.0.iter().map(|o| o.spec()).collect::<Vec<TensorSpec>>())
        .unwrap_or_else(|| Model::default_outputs(&schema));
    let platform = exported.platform().to_owned();
    drop(exported);
    let dir = dir.to_owned();
    let load: Load = Arc::new(move || {
        let model: Box<dyn Engine> = Box::new(ExportedModel::load(&dir, device)?);
        Ok(model)
    });
    Ok((Model { name, version, platform, schema, outputs }, load))
}
