//! The `rtune` command. Sweep, cluster and inspection commands (run, watch, head, node, status,
//! export, predict) land here as their issues are built; for now it reports its version and,
//! like every rtune binary, can run as a worker process.

use clap::Parser;

/// rtune: hyperparameter sweeps of distributed libtorch training (Ray Tune + Ray Train in Rust).
#[derive(Debug, Parser)]
#[command(name = "rtune", version, about)]
struct Cli {}

fn main() {
    rtune::init();
    let _cli = Cli::parse();
    println!("rtune {}: no command given yet; see `rtune --help`", env!("CARGO_PKG_VERSION"));
}
