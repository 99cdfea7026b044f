//! Files on disk: result files and checkpoint folders (`rtune-core`'s `storage`), and a tch
//! `VarStore` in a checkpoint ([`SaveVarStore`], [`LoadVarStore`]).

pub use rtune_core::storage::*;

mod var_store;

pub use var_store::{LoadVarStore, SaveVarStore};
