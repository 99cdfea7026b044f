//! A tree model out of its checkpoint or export (XGBoost's `model.ubj`, LightGBM's
//! `model.txt`), for prediction: the same rows give what the library's own Python package gives
//! (`xgboost.Booster(model_file=..).predict(..)`, `lightgbm.Booster(model_file=..)
//! .predict(..)`), since it is the library that predicts.

use std::path::Path;

use rtune_driver::error::{Error, Result};

use crate::{lightgbm, xgboost};

/// A tree model's answers for some rows: class probabilities (a row each) or values.
#[derive(Debug, Clone, PartialEq)]
pub enum TreeOutput {
    /// `rows` rows of one probability per class.
    Probabilities { rows: usize, classes: usize, values: Vec<f32> },
    /// One value per row: a regression's value, or a class (`multi:softmax`).
    Values(Vec<f32>),
}

/// A tree model loaded from a folder that holds its `model.ubj` (XGBoost; an earlier rtune's
/// `model.json`) or `model.txt` (LightGBM).
pub struct TreeModel {
    booster: Booster,
    /// The library's objective, which says what its outputs are.
    objective: String,
    features: usize,
}

/// The library a model is of.
enum Booster {
    XGBoost(xgboost::Booster),
    LightGBM(lightgbm::Booster),
}

impl std::fmt::Debug for TreeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TreeModel({} {}, {} features)", self.library(), self.objective, self.features)
    }
}

impl TreeModel {
    /// The files tree models are in, one per library.
    pub const FILES: [&str; 3] =
        [xgboost::MODEL_FILE, xgboost::JSON_MODEL_FILE, lightgbm::MODEL_FILE];

    /// Whether `dir` holds a tree model.
    pub fn is_in(dir: &Path) -> bool {
        Self::FILES.iter().any(|file| dir.join(file).is_file())
    }

    /// The model in `dir` (a checkpoint or an export); errors say what is missing.
    pub fn load(dir: &Path) -> Result<TreeModel> {
        if dir.join(lightgbm::MODEL_FILE).is_file() {
            return Self::load_lightgbm(&dir.join(lightgbm::MODEL_FILE));
        }
        let path = xgboost::model_in(dir).unwrap_or_else(|| dir.join(xgboost::MODEL_FILE));
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let refused =
            |e: String| Error::Data(format!("{}: XGBoost refused it: {e}", path.display()));
        let booster = xgboost::Booster::load(&bytes).map_err(refused)?;
        let config = booster.config().map_err(refused)?;
        let objective = config["learner"]["objective"]["name"].as_str().unwrap_or("").to_owned();
        let features = booster.num_features().map_err(refused)?;
        Ok(TreeModel { booster: Booster::XGBoost(booster), objective, features })
    }

    fn load_lightgbm(path: &Path) -> Result<TreeModel> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        // `objective=multiclass num_class:10`: its first word.
        let objective = text
            .lines()
            .find_map(|line| line.strip_prefix("objective="))
            .and_then(|o| o.split_whitespace().next())
            .unwrap_or("")
            .to_owned();
        let refused =
            |e: String| Error::Data(format!("{}: LightGBM refused it: {e}", path.display()));
        let booster = lightgbm::Booster::load(&text).map_err(refused)?;
        let features = booster.num_features().map_err(refused)?;
        Ok(TreeModel { booster: Booster::LightGBM(booster), objective, features })
    }

    /// The library's name (`XGBoost`, `LightGBM`).
    pub fn library(&self) -> &'static str {
        match self.booster {
            Booster::XGBoost(_) => "XGBoost",
            Booster::LightGBM(_) => "LightGBM",
        }
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
        let library = self.library();
        let failed = |e: String| Error::Data(format!("{library} could not predict: {e}"));
        let (values, classes) = match &self.booster {
            Booster::XGBoost(booster) => {
                let matrix = xgboost::DMatrix::dense(inputs, rows, None).map_err(failed)?;
                let (values, shape) = booster.predict(&matrix).map_err(failed)?;
                let classes = match shape.as_slice() {
                    [_, classes] => *classes,
                    _ => 1,
                };
                (values, classes)
            }
            Booster::LightGBM(booster) => {
                let values =
                    booster.predict(inputs, rows, self.features, false, "").map_err(failed)?;
                let classes = booster.num_classes().map_err(failed)?;
                // As LightGBM's Python package gives them: float64, here as the f32 all of
                // rtune's outputs are.
                (values.into_iter().map(|v| v as f32).collect(), classes)
            }
        };
        Ok(match (classes, self.objective.as_str()) {
            (classes, _) if classes > 1 => TreeOutput::Probabilities { rows, classes, values },
            (_, "binary:logistic" | "binary" | "cross_entropy") => TreeOutput::Probabilities {
                rows,
                classes: 2,
                values: values.iter().flat_map(|&p| [1.0 - p, p]).collect(),
            },
            _ => TreeOutput::Values(values),
        })
    }

    /// Every tree as text (XGBoost's `Booster.get_dump()`; LightGBM's model text, whose
    /// trees are its `Tree=` sections).
    pub fn dump(&self) -> Result<Vec<String>> {
        let failed = |e: String| Error::Data(format!("{}: {e}", self.library()));
        match &self.booster {
            Booster::XGBoost(booster) => booster.dump().map_err(failed),
            Booster::LightGBM(booster) => {
                let text = booster.save_text().map_err(failed)?;
                let trees = text.split("end of trees").next().unwrap_or("");
                Ok(trees.split("\n\nTree=").skip(1).map(|t| format!("Tree={}", t.trim())).collect())
            }
        }
    }
}
