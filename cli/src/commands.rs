//! The commands that need no libtorch: `completions`, `ls` and `show`. `rtune` runs them itself
//! (see [`crate::front`]), and so does the full program (`rtune::cli::main`, a user's binary's
//! included), through [`run`]: one implementation, the same output and exit codes.

use std::path::{Path, PathBuf};

use crate::args::Command;
use crate::exit::{EXIT_INVALID, input_error_code};
use crate::inspect;

/// Runs `command` when it is one of these and returns its exit code (having said what went
/// wrong, if anything); None for a command the full program runs.
pub fn run(command: &Command) -> Option<i32> {
    let done = match command {
        Command::Completions { shell } => {
            crate::print_completions(*shell);
            Ok(())
        }
        Command::Ls { dir, format } => dir
            .as_deref()
            .map(local)
            .transpose()
            .and_then(|dir| inspect::ls(dir.as_deref(), *format).map_err(input_error)),
        Command::Show { dir, trial, format, pareto } => local(dir).and_then(|dir| {
            inspect::show(&dir, trial.as_deref(), *format, pareto).map_err(input_error)
        }),
        _ => return None,
    };
    Some(match done {
        Ok(()) => 0,
        Err((code, e)) => {
            eprintln!("rtune: {e:#}");
            code
        }
    })
}

fn input_error(e: anyhow::Error) -> (i32, anyhow::Error) {
    (input_error_code(&e), e)
}

/// A folder argument as a local folder: itself, or, for an `s3://` URL, its staging copy
/// brought up to date from the store (a store that cannot be read: exit 2).
pub fn local(dir: &Path) -> Result<PathBuf, (i32, anyhow::Error)> {
    rtune_core::storage::remote::local_copy(dir).map_err(|e| (EXIT_INVALID, e.into()))
}
