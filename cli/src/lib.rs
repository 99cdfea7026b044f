//! The `rtune` command line: its grammar ([`args`]: every command and flag, as clap parses
//! them), its exit codes ([`exit`]), the commands that need no libtorch ([`commands`], with
//! what they show: [`inspect`], [`format`](mod@format) and the views of a sweep, [`ui`]), and
//! the `rtune` program itself ([`front`]).
//!
//! This crate links no libtorch, and neither does `rtune`: what needs none (`--help`,
//! `--version`, a mistake in the arguments, and the commands of [`commands`]: `completions`,
//! `ls`, `show`, `watch`, `status`) is answered before libtorch would have finished loading.
//! Every other command runs in the full program, `rtune-torch` (the `rtune` crate's
//! `cli::main`), which `rtune` becomes by exec. A user's own binary (`rtune::cli::main` with its
//! own train functions) parses the same [`Cli`] and runs everything itself.

pub mod args;
pub mod commands;
pub mod exit;
pub mod format;
pub mod front;
pub mod inspect;
pub mod ui;

pub use args::{
    Cli, ClusterArgs, Command, Device, Format, ModeArg, Output, PredictArgs, SlurmCommand,
};

/// Prints `shell`'s completion script for the `rtune` command to stdout.
pub fn print_completions(shell: clap_complete::Shell) {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "rtune", &mut std::io::stdout());
}
