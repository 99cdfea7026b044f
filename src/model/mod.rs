//! A trained model, out of its checkpoint: exported for PyTorch and TorchScript ([`Export`],
//! [`ExportCheckpoint`]), loaded for prediction on one process ([`TorchPredictor`]) or over a
//! dataset by a group of workers ([`BatchPredictor`]); a tree trainer's model ([`TreeModel`])
//! for the same predictions.

mod batch_predict;
mod export;
mod predictor;
pub mod serve;
pub mod tree;

pub use batch_predict::{BatchPredictor, Predicted};
pub use export::{Export, ExportCheckpoint, METRICS_FILE, Model, TORCHSCRIPT_FILE};
pub use predictor::TorchPredictor;
pub use tree::{TreeModel, TreeOutput};
