//! The full `rtune` program (see `rtune::cli`): sweeps from sweep files, experiments on disk,
//! and the cluster. `rtune` (src/main.rs) becomes this program for every command that trains or
//! loads models. Like every rtune binary it can also run as a worker process.

fn main() {
    rtune::cli::main(rtune::cli::Registry::builtin())
}
