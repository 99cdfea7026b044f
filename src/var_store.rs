//! A tch `VarStore` in a checkpoint: saved as `model.safetensors` by the rank whose checkpoint
//! is kept, loaded back after a resume. Traits of this crate because checkpoints themselves are
//! `rtune-driver`'s, which links no libtorch; `use rtune::{LoadVarStore, SaveVarStore}`.

use tch::nn::VarStore;

use crate::torch::TorchResult;
use rtune_driver::error::{Error, Result};
use rtune_driver::outcome::Checkpoint;
use rtune_driver::storage::checkpoint::{CheckpointWriter, MODEL_FILE};

/// `writer.save_var_store(&vs)?`: a model into the checkpoint being written.
pub trait SaveVarStore {
    /// Saves `vs` as `model.safetensors` (on a rank whose checkpoint is not kept: nothing).
    fn save_var_store(&mut self, vs: &VarStore) -> Result<()>;
}

/// `checkpoint.load_var_store(&mut vs)?`: the model a checkpoint holds.
pub trait LoadVarStore {
    /// Loads the saved model into `vs` (whose variables must have the same names and shapes).
    fn load_var_store(&self, vs: &mut VarStore) -> Result<()>;
}

impl SaveVarStore for CheckpointWriter {
    fn save_var_store(&mut self, vs: &VarStore) -> Result<()> {
        if self.is_kept() {
            vs.save(self.path().join(MODEL_FILE)).torch()?;
        }
        Ok(())
    }
}

impl LoadVarStore for Checkpoint {
    fn load_var_store(&self, vs: &mut VarStore) -> Result<()> {
        let path = self.files()?.join(MODEL_FILE);
        if !path.is_file() {
            return Err(Error::Checkpoint {
                path: self.path().to_owned(),
                message: format!("no {MODEL_FILE}: this checkpoint holds no VarStore"),
            });
        }
        vs.load(&path)
            .map_err(|e| Error::Checkpoint { path, message: format!("cannot load model: {e}") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks other than 0 write no model: their checkpoint is never kept.
    #[test]
    fn only_rank_zero_saves_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let vs = VarStore::new(tch::Device::Cpu);
        let _w = vs.root().zeros("w", &[1000]);
        for (rank, kept) in [(0, true), (1, false), (3, false)] {
            let mut writer = CheckpointWriter::create(dir.path(), rank, 1).unwrap();
            writer.save_var_store(&vs).unwrap();
            assert_eq!(writer.is_kept(), kept);
            assert_eq!(writer.path().join(MODEL_FILE).is_file(), kept, "rank {rank}");
        }
    }
}
