//! The `rtune` command line, all of it: its grammar ([`args`]: every command and flag, as clap
//! parses them), its exit codes and the error a command ends with ([`exit`]), sweep files and
//! their problems ([`doc`], [`program::sweep`]), the commands that only read ([`commands`], with
//! what they show: [`inspect`], [`format`](mod@format) and the views of a sweep, [`ui`]), every
//! other command ([`program`]), and the `rtune` program itself ([`front`]).
//!
//! This crate links no libtorch, and neither does `rtune`: what needs none (`--help`,
//! `--version`, a mistake in the arguments, and the commands of [`commands`]: `completions`,
//! `ls`, `show`, `watch`, `status`) is answered before libtorch would have finished loading.
//! Every other command runs in the full program, `rtune-torch`, which `rtune` becomes by exec:
//! [`program::main`], given the train functions and what needs tensors ([`program::Torch`]) by
//! the `rtune` crate (`rtune::cli::main`). A user's own binary (`rtune::cli::main` with its own
//! train functions) parses the same [`Cli`] and runs everything itself.

pub mod args;
pub mod commands;
pub mod doc;
pub mod exit;
pub mod format;
pub mod front;
pub mod inspect;
pub mod program;
pub mod ui;

pub use exit::{EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_TRIALS_FAILED};

pub use args::{Command, Device, Output, PredictArgs, ServeArgs};
