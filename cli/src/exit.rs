//! How every `rtune` command ends: the exit codes, and one table of them (`EXIT_CODES`) for
//! `--help` and the README.

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

/// The exit codes of every command, as `--help` and the README show them.
pub const EXIT_CODES: &str = "Exit codes:\n  \
    0  success\n  \
    1  the sweep ran and some trials failed or never reported (--allow-failures exits 0)\n  \
    2  invalid input (a sweep file, an argument, a path, a trial): nothing ran (a metric\n       no trial reports: the sweep stops at the first report without it)\n  \
    3  interrupted by Ctrl-C or SIGTERM: the sweep is resumable (rtune resume DIR)\n  \
    4  anything else failed (a disk, the cluster, a bug): the message says what";

/// The exit code of an error of a command that reads what it is given (`ls`, `show`, `export`,
/// `predict`): a mistake in its arguments (2) unless the system failed it (a disk error: 4).
pub fn input_error_code(e: &anyhow::Error) -> i32 {
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
pub fn error_code(e: &anyhow::Error) -> i32 {
    e.downcast_ref().map_or(EXIT_FAILED, code_of)
}

/// The exit code of one of rtune's errors: a mistake in what was given (2), an interrupted
/// sweep (3), or anything else (4).
pub fn code_of(e: &rtune_driver::error::Error) -> i32 {
    use rtune_driver::error::Error;
    match e {
        Error::Config { .. } | Error::Params(_) | Error::Data(_) | Error::Held { .. } => {
            EXIT_INVALID
        }
        Error::Interrupted { .. } => EXIT_INTERRUPTED,
        _ => EXIT_FAILED,
    }
}

/// A command that only prints what it reads (`ls`, `show`, `status`, `builtins`,
/// `completions`) ends quietly when what reads its output goes away (`rtune ls | head -1`), as
/// `ls` and `git` do: SIGPIPE's default action, which Rust programs otherwise ignore (and then
/// panic on the next print). Not for the commands that start or talk to other processes
/// (workers, a fork server, a CUDA probe) through pipes: a write to a dead child's pipe would
/// end them. A sweep's driver keeps running: what it prints to a closed pipe is dropped.
pub fn end_quietly_on_broken_pipe(command: &crate::args::Command) {
    use crate::args::Command;
    if matches!(
        command,
        Command::Ls { .. }
            | Command::Show { .. }
            | Command::Status { .. }
            | Command::Builtins
            | Command::Completions { .. }
    ) {
        // SAFETY: setting a signal's disposition to its default, before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
}
