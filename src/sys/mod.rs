//! Process-level helpers (`rtune-core`'s `sys`), and CUDA opened at run time (`cuda`, public as
//! `rtune::cuda`).

pub use rtune_core::sys::*;

pub mod cuda;
