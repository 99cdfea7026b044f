//! How every `rtune` command ends: the exit codes, one table of them (`EXIT_CODES`) for `--help`
//! and the guide (docs/sweep-files.md), and the error a command ends with ([`Exit`]), with its code, in the words of
//! the sweep file.

use crate::doc::Problems;
use rtune_driver::error::Error;
use rtune_driver::setting::Field;

/// Exit codes: the sweep ran and some trials failed or never reported (`--allow-failures`
/// exits 0 instead).
pub const EXIT_TRIALS_FAILED: i32 = 1;
/// A mistake in what was given (a sweep file, an argument, a path, a trial that does not
/// exist): said before anything ran or was written.
pub const EXIT_INVALID: i32 = 2;
/// Ctrl-C or SIGTERM: the sweep stopped resumably (`rtune resume DIR`).
pub const EXIT_INTERRUPTED: i32 = 3;
/// Anything else failed (a disk, the cluster, a bug): the message says what.
pub const EXIT_FAILED: i32 = 4;

/// The exit codes of every command, as `--help` and the guide show them.
pub const EXIT_CODES: &str = "Exit codes:\n  \
    0  success\n  \
    1  the sweep ran and some trials failed or never reported (--allow-failures exits 0)\n  \
    2  invalid input (a sweep file, an argument, a path, a trial): nothing ran (a metric\n       no trial reports: the sweep stops at the first report without it)\n  \
    3  interrupted by Ctrl-C or SIGTERM: the sweep is resumable (rtune resume DIR)\n  \
    4  anything else failed (a disk, the cluster, a bug): the message says what";

/// The exit code of an error of a command that reads what it is given (`ls`, `show`, `export`,
/// `predict`): a mistake in its arguments (2) unless the system failed it (a disk error: 4).
pub(crate) fn input_error_code(e: &anyhow::Error) -> i32 {
    use std::io::ErrorKind as K;
    let system = e.chain().filter_map(|c| c.downcast_ref::<std::io::Error>()).any(|io| {
        !matches!(
            io.kind(),
            K::NotFound
                | K::PermissionDenied
                | K::AlreadyExists
                | K::NotADirectory
                | K::IsADirectory
                | K::InvalidInput
                | K::InvalidData
                | K::UnexpectedEof
                | K::ReadOnlyFilesystem
        )
    });
    if system { EXIT_FAILED } else { EXIT_INVALID }
}

/// The exit code of an error that may be one of rtune's ([`code_of`]); anything else: 4.
pub(crate) fn error_code(e: &anyhow::Error) -> i32 {
    e.downcast_ref().map_or(EXIT_FAILED, code_of)
}

/// The exit code of one of rtune's errors: a mistake in what was given (2), an interrupted
/// sweep (3), or anything else (4).
pub(crate) fn code_of(e: &Error) -> i32 {
    match e {
        Error::Config { .. } | Error::Params(_) | Error::Data(_) | Error::Held { .. } => {
            EXIT_INVALID
        }
        Error::Interrupted { .. } => EXIT_INTERRUPTED,
        _ => EXIT_FAILED,
    }
}

/// An error with the exit code it ends the command with.
#[derive(Debug)]
pub struct Exit(pub i32, pub anyhow::Error);

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
    error_code(e)
}

/// An error of a command that reads what it is given (`ls`, `show`, `export`, `predict`), with
/// its code ([`input_error_code`]).
pub(crate) fn input_error(e: anyhow::Error) -> Exit {
    Exit(input_error_code(&e), e)
}

/// A settings mistake in the words of the sweep file (`tune.metric`, not `TuneConfig.metric`):
/// what `rtune run` and `rtune resume` say of an error the library found, with its exit code.
pub(crate) fn in_sweep_terms(e: Error) -> Exit {
    let code = code_of(&e);
    if let Error::Interrupted { path } = &e {
        let dir = path.display();
        return Exit(code, anyhow::anyhow!("interrupted: `rtune resume {dir}` goes on with it"));
    }
    if let Error::Config { field: Field::Setting(_), .. } = &e {
        // The key the file gives, as the file's own mistakes are named.
        return Exit(code, anyhow::anyhow!(e.in_sweep_terms()));
    }
    Exit(code, e.into())
}
