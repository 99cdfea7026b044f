//! A PyTorch DDP script swept by rtune: `CommandTrainable` runs `examples/command/ddp_digits.py`
//! unchanged, once per worker with torchrun's environment (2 processes a trial, gloo), and ASHA
//! stops the trials that fall behind after 2 or 4 epochs (the script reads `stop` from rtune and
//! ends cleanly). Python with PyTorch is the path in `RTUNE_PYTHON`, else the repository's
//! `.venv/bin/python` (which `make test` installs).
//! Expected (`cargo run --example command_trainable`): 8 trials, one at a time, in 30 to 90 s on
//! 2 CPU cores (each Python process imports torch first): ASHA stops 4 at epoch 2 and 1 at epoch
//! 4; the best val_acc 0.9805 (lr 0.094, hidden 128). With `RTUNE_QUICK=1` (as the tests run it)
//! 3 trials of 4 epochs in 15 to 35 s, one stopped at epoch 2, the best val_acc 0.9638.

use std::path::PathBuf;

use anyhow::{Result, ensure};
use rtune::search::{Asha, SearchSpace, choice, loguniform};
use rtune::train::CommandTrainable;
use rtune::{Mode, Params, RunConfig, ScalingConfig, TuneConfig, Tuner};

fn main() -> Result<()> {
    rtune::init(); // first: worker processes are this binary started again
    let quick = std::env::var_os("RTUNE_QUICK").is_some();
    let (trials, epochs) = if quick { (3, 4) } else { (8, 8) };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = match std::env::var_os("RTUNE_PYTHON") {
        Some(path) => std::path::absolute(path)?, // the command runs in examples/command
        None => root.join(".venv/bin/python"),
    };
    ensure!(
        python.is_file(),
        "{} is missing: set RTUNE_PYTHON to a Python with PyTorch, or run `make test` to install \
         the repository's .venv",
        python.display()
    );
    let trainer = CommandTrainable::new([python.display().to_string(), "ddp_digits.py".into()])
        .working_dir(root.join("examples/command"))
        .trainer()?
        .train_loop_config(Params::new().with("epochs", epochs))
        .scaling(ScalingConfig::workers(2));
    let space = SearchSpace::new()
        .add("lr", loguniform(1e-3, 0.2)?)
        .add("hidden", choice([32, 64, 128]))
        .add("batch_size", choice([32, 64]));
    let grid = Tuner::new(trainer, space)
        .tune_config(
            TuneConfig::new()
                .metric("val_acc")
                .mode(Mode::Max)
                .num_samples(trials)
                .scheduler(Asha::new().max_t(epochs as u32).grace_period(2).reduction_factor(2))
                .seed(0),
        )
        .run_config(RunConfig::default().storage_path(std::env::temp_dir().join("rtune-command")))
        .fit()?;
    for t in &grid.trials {
        let (id, n, params) =
            (&t.trial_id(), t.history().len(), serde_json::to_string(&t.params())?);
        let status = format!("{:?}", t.status()).to_uppercase();
        let acc = t.last("val_acc").unwrap_or(f64::NAN);
        println!("{id}  {status}  {n} epochs  val_acc {acc:.4}  {params}");
    }
    let best = grid.best_result()?;
    let acc = best.last("val_acc").unwrap_or(f64::NAN);
    println!("best trial {}: val_acc {acc:.4}", best.trial_id());
    Ok(())
}
