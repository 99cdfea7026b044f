//! Where the driver's plain data meets libtorch: libtorch's errors as rtune's (`rtune-driver`'s
//! [`Error`] holds them boxed, as that crate links no libtorch, so the error of a `tch` call
//! comes in through [`TorchResult::torch`], not `?` alone), and a preprocessed table's inputs
//! and labels as tensors.

use tch::Tensor;

use rtune_driver::data::table::Table;
use rtune_driver::data::{DataSchema, Labels};
use rtune_driver::error::{Error, Result};

pub(crate) trait TorchResult<T> {
    /// The result, its `tch::TchError` as `Error::Torch`.
    fn torch(self) -> Result<T>;
}

impl<T> TorchResult<T> for std::result::Result<T, tch::TchError> {
    fn torch(self) -> Result<T> {
        self.map_err(|e| Error::Torch(Box::new(e)))
    }
}

/// The model inputs of a preprocessed table as a `[rows, model_inputs]` float tensor.
pub(crate) fn inputs(schema: &DataSchema, table: &Table, what: &str) -> Result<Tensor> {
    let buffer = schema.inputs(table, what)?;
    let shape = [table.rows as i64, schema.model_inputs.len() as i64];
    Ok(Tensor::from_slice(&buffer).view(shape))
}

/// The labels of a preprocessed table as a tensor: int64 classes or float values.
pub(crate) fn labels(schema: &DataSchema, table: &Table, what: &str) -> Result<Tensor> {
    Ok(match schema.labels(table, what)? {
        Labels::Classes(classes) => Tensor::from_slice(&classes),
        Labels::Values(values) => Tensor::from_slice(&values),
    })
}
