//! `rtune`, the program a user types: it answers what needs no libtorch itself and becomes the
//! full program for everything else.
//!
//! Loading libtorch costs a process about 0.2 s and 140 MB before `main` runs (its static
//! constructors build the operator registry), whatever the command. So `rtune` links none:
//! `--help`, `--version` and a mistake in the arguments (clap's message, exit 2) are answered
//! here, and so are `completions`, `ls`, `show`, `watch`, `stack` and `status` ([`crate::commands`]).
//! Any other command execs [`FULL_PROGRAM`], installed beside `rtune`, with the same arguments:
//! the command then runs in this very process (its id, its terminal, its signals), so Ctrl-C,
//! `rtune stop` and a parent waiting on it see nothing different. Both programs come from one
//! build: `rtune` passes the hash of the sources it was built from in [`SOURCES_ENV`], and
//! `rtune-torch` refuses to run for another (`cargo build --bin rtune` alone leaves an older
//! `rtune-torch` beside a new `rtune`).

use std::os::unix::process::CommandExt;

use clap::Parser;

use crate::args::Cli;
use crate::exit::EXIT_FAILED;

/// The full program's file name, in the same folder as `rtune` (`cargo build` and `cargo
/// install` put both there).
pub(crate) const FULL_PROGRAM: &str = "rtune-torch";

/// The variable in which `rtune` tells the full program the hash of the sources `rtune` was
/// built from (rtune's build script makes it).
pub(crate) const SOURCES_ENV: &str = "RTUNE_SOURCES";

/// `rtune`'s `main`; `sources`: the hash of the sources it was built from.
pub fn main(sources: &str) -> ! {
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    crate::commands::end_quietly_on_broken_pipe(&cli.command);
    if let Some(code) = crate::commands::run(&cli.command) {
        std::process::exit(code);
    }
    let error = exec_full_program(sources);
    eprintln!("rtune: {error}");
    std::process::exit(EXIT_FAILED)
}

/// Replaces this process with the full program, given this one's arguments (and its `argv[0]`,
/// which clap's messages name the command by). Returns only when that failed: what to say.
fn exec_full_program(sources: &str) -> String {
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "rtune".into());
    let full = match std::env::current_exe() {
        Ok(me) => me.with_file_name(FULL_PROGRAM),
        Err(e) => return format!("cannot find this program's path to start {FULL_PROGRAM}: {e}"),
    };
    let e =
        std::process::Command::new(&full).arg0(arg0).args(args).env(SOURCES_ENV, sources).exec();
    format!(
        "cannot start {} ({e}); rtune runs every command but --help, --version, completions, ls, \
         show, watch, stack and status with {FULL_PROGRAM}, which belongs in the same folder (cargo \
         build and cargo install put both there)",
        full.display()
    )
}
