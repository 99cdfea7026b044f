//! How every `rtune` command ends: the error each command ends with, with its exit code (the
//! codes are `rtune_cli::exit`'s), in the words of the sweep file.

use rtune_cli::exit::code_of;
pub use rtune_cli::exit::{
    EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_TRIALS_FAILED,
};

use super::Problems;
use crate::error::Error;

/// An error with the exit code it ends the command with.
#[derive(Debug)]
pub(super) struct Exit(pub(super) i32, pub(super) anyhow::Error);

impl<E: Into<anyhow::Error>> From<E> for Exit {
    fn from(e: E) -> Self {
        let e = e.into();
        Exit(exit_code(&e), e)
    }
}

fn exit_code(e: &anyhow::Error) -> i32 {
    if e.downcast_ref::<Problems>().is_some() {
        return EXIT_INVALID;
    }
    rtune_cli::exit::error_code(e)
}

/// An error of a command that reads what it is given (`ls`, `show`, `export`, `predict`), with
/// its code (`rtune_cli::exit::input_error_code`).
pub(super) fn input_error(e: anyhow::Error) -> Exit {
    Exit(rtune_cli::exit::input_error_code(&e), e)
}

/// The sweep-file key of a setting the library names by its API (`scaling.use_gpu` for
/// `ScalingConfig.use_gpu`, `tune.metric` for `TuneConfig.metric`), if the file has one.
pub(super) fn sweep_key(field: &str) -> Option<String> {
    const KEYS: &[(&str, &str)] = &[
        ("TuneConfig.", "tune."),
        ("ScalingConfig.", "scaling."),
        ("ScalingConfig", "scaling"),
        ("RunConfig.name", "name"),
        ("RunConfig.storage_path", "storage_path"),
        ("CheckpointConfig.", "run.checkpoint."),
        ("FailureConfig.", "run.failure."),
        ("train_loop_config", "param_space"),
        ("OptunaJournal", "run.optuna"),
        ("MlflowLogger", "run.mlflow"),
    ];
    KEYS.iter().find_map(|(api, key)| field.strip_prefix(api).map(|rest| format!("{key}{rest}")))
}

/// A settings mistake in the words of the sweep file (`tune.metric`, not `TuneConfig.metric`):
/// what `rtune run` and `rtune resume` say of an error the library found, with its exit code.
pub(super) fn in_sweep_terms(e: Error) -> Exit {
    let code = code_of(&e);
    if let Error::Interrupted { path } = &e {
        let dir = path.display();
        return Exit(code, anyhow::anyhow!("interrupted: `rtune resume {dir}` goes on with it"));
    }
    if let Error::Config { field, message } = &e
        && let Some(key) = sweep_key(field)
    {
        // The key the file gives, as the file's own mistakes are named.
        return Exit(code, anyhow::anyhow!("invalid `{key}`: {message}"));
    }
    Exit(code, e.into())
}
