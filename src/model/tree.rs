//! A tree model out of its checkpoint or export (XGBoost's `model.json`), for prediction: the
//! same rows give what the library's own Python package gives (`xgboost.Booster(model_file=..)
//! .predict(..)`), since it is the library that predicts.

use std::path::Path;

use rtune_driver::error::{Error, Result};

use crate::xgboost::MODEL_FILE;
use crate::xgboost::{Booster, DMatrix};

/// A tree model's answers for some rows: class probabilities (a row each) or values.
#[derive(Debug, Clone, PartialEq)]
pub enum TreeOutput {
    /// `rows` rows of one probability per class.
    Probabilities { rows: usize, classes: usize, values: Vec<f32> },
    /// One value per row: a regression's value, or a class (`multi:softmax`).
    Values(Vec<f32>),
}

/// An XGBoost model loaded from a folder that holds its `model.json`.
pub struct TreeModel {
    booster: Booster,
    /// XGBoost's objective, which says what its outputs are.
    objective: String,
    features: usize,
}

impl std::fmt::Debug for TreeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TreeModel({}, {} features)", self.objective, self.features)
    }
}

impl TreeModel {
    /// Whether `dir` holds a tree model.
    pub fn is_in(dir: &Path) -> bool {
        dir.join(MODEL_FILE).is_file()
    }

    /// The model in `dir` (a checkpoint or an export); errors say what is missing.
    pub fn load(dir: &Path) -> Result<TreeModel> {
        let path = dir.join(MODEL_FILE);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let json: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Data(format!("{}: not an XGBoost JSON model: {e}", path.display()))
        })?;
        let objective = json["learner"]["objective"]["name"].as_str().unwrap_or("").to_owned();
        let refused =
            |e: String| Error::Data(format!("{}: XGBoost refused it: {e}", path.display()));
        let booster = Booster::load(&bytes).map_err(refused)?;
        let features = booster.num_features().map_err(refused)?;
        Ok(TreeModel { booster, objective, features })
    }

    /// The number of inputs a row has.
    pub fn num_features(&self) -> usize {
        self.features
    }

    /// The model's answers for `rows` rows of inputs (row-major, after the preprocessor).
    /// A binary classifier's probability of class 1 is given as two classes' probabilities.
    pub fn predict(&self, inputs: &[f32], rows: usize) -> Result<TreeOutput> {
        if rows > 0 && inputs.len() != rows * self.features {
            return Err(Error::Data(format!(
                "{} inputs for {rows} rows: the model takes {} a row",
                inputs.len(),
                self.features
            )));
        }
        let failed = |e: String| Error::Data(format!("XGBoost could not predict: {e}"));
        let matrix = DMatrix::dense(inputs, rows, None).map_err(failed)?;
        let (values, shape) = self.booster.predict(&matrix).map_err(failed)?;
        Ok(match (shape.as_slice(), self.objective.as_str()) {
            ([_, classes], _) if *classes > 1 => {
                TreeOutput::Probabilities { rows, classes: *classes, values }
            }
            (_, "binary:logistic") => TreeOutput::Probabilities {
                rows,
                classes: 2,
                values: values.iter().flat_map(|&p| [1.0 - p, p]).collect(),
            },
            _ => TreeOutput::Values(values),
        })
    }

    /// Every tree as text (XGBoost's `Booster.get_dump()`).
    pub fn dump(&self) -> Result<Vec<String>> {
        self.booster.dump().map_err(|e| Error::Data(format!("XGBoost: {e}")))
    }
}
