//! libtorch's errors as rtune's. `rtune-core`'s [`Error`] holds them boxed (that crate links no
//! libtorch), so the error of a `tch` call comes in through [`TorchResult::torch`], not `?`
//! alone.

use crate::error::{Error, Result};

pub(crate) trait TorchResult<T> {
    /// The result, its `tch::TchError` as `Error::Torch`.
    fn torch(self) -> Result<T>;
}

impl<T> TorchResult<T> for std::result::Result<T, tch::TchError> {
    fn torch(self) -> Result<T> {
        self.map_err(|e| Error::Torch(Box::new(e)))
    }
}
