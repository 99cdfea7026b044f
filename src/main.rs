//! The `rtune` command (see `rtune::cli`): sweeps from sweep files, experiments on disk, and
//! the cluster. Like every rtune binary it can also run as a worker process.

fn main() {
    rtune::cli::main(rtune::cli::Registry::builtin())
}
