//! The GPU test group (`make test-gpu`): what needs a CUDA device, run where there is one.
//! Without a device it prints `GPU tests: not run (no CUDA device)` and exits 0; it never says
//! "passed" for what did not run.
//!
//! One binary serves a GPU machine that has PyTorch but no Rust (tests/gpu/device.sh): it is
//! the test driver, the `rtune` command (with the builtin trainables, when `RTUNE_GPU_TEST_CLI`
//! is set: the sweeps below run through it, as a user runs them) and every worker process.
//! Paths: the repository is the working directory (or `RTUNE_REPO`), PyTorch's Python is
//! `RTUNE_PYTHON` (else the project's `.venv`, else `python3`).

mod checks;
#[path = "../shared/libtorch.rs"]
mod libtorch;

use libtest_mimic::{Arguments, Trial};

/// Set in the environment of this binary started as the `rtune` command.
pub const AS_CLI: &str = "RTUNE_GPU_TEST_CLI";

fn main() {
    if std::env::var_os(AS_CLI).is_some() {
        rtune::cli::main(rtune::cli::Registry::builtin());
    }
    rtune::init();
    let exe = std::env::current_exe().expect("the test binary's path");
    let has_device_files = std::fs::read_dir("/dev").is_ok_and(|dir| {
        dir.filter_map(|e| e.ok()).any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("nvidia").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                && name.len() > "nvidia".len()
        })
    });
    match rtune::cuda::Probe::run(&exe) {
        Ok(probe) => println!("GPU tests on {probe}"),
        Err(e) if !has_device_files => {
            println!("GPU tests: not run (no CUDA device)\n  {e}");
            return;
        }
        Err(e) => {
            // A GPU is there but cannot be used: that is a failure, not "nothing to test".
            eprintln!("GPU tests: failed: this machine has NVIDIA devices, but {e}");
            std::process::exit(1);
        }
    }
    let tests = vec![
        test("demo_sweep_on_the_gpu_predicts_the_test_set", checks::demo_sweep_on_the_gpu),
        test("fractional_trials_run_two_at_a_time", checks::fractional_trials_two_at_a_time),
        test("two_ranks_on_one_gpu_train_to_the_cpu_weights", checks::two_ranks_on_one_gpu),
        test("gpu_checkpoint_resumes_on_cpu_and_exports_for_pytorch", checks::gpu_to_cpu),
        test("sharded_training_on_one_gpu", checks::sharded_on_one_gpu),
        test("gpus_workers_cannot_use_are_refused", checks::unusable_gpus_are_refused),
        test("rtune_status_shows_the_nodes_gpus", checks::status_shows_the_gpus),
        test("batch_prediction_on_gpu_workers", checks::batch_prediction_on_gpu_workers),
        test(
            "elastic_group_on_one_gpu_goes_on_in_place",
            checks::elastic_group_on_one_gpu_goes_on_in_place,
        ),
        test("xgboost_trial_boosts_on_the_gpu", checks::xgboost_trial_boosts_on_the_gpu),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

fn test(name: &'static str, f: fn() -> anyhow::Result<()>) -> Trial {
    Trial::test(name, move || f().map_err(|e| format!("{e:#}").into()))
}
