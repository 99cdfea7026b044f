//! The main job (`make demo`): a 2-worker data-parallel TorchTrainer run of an MLP
//! (64-256-256-10) on the 8x8 handwritten digits shipped in data/. Each worker trains on its
//! shard of every batch, gradients are averaged by rtune's ring all-reduce, and rank 0 reports
//! validation accuracy and a checkpoint every epoch (the best 2 by accuracy are kept).
//! Expected: validation accuracy above 0.95 within ~20 epochs, test accuracy of the best
//! checkpoint >= 95%, in well under a minute on 2 CPU cores.

use anyhow::Result;
use rtune::cli::builtins::{digits_test_accuracy, train_digits_mlp};
use rtune::{CheckpointConfig, Mode, Params, RunConfig, ScalingConfig, TorchTrainer};

fn main() -> Result<()> {
    rtune::init();
    let params = Params::new()
        .with("lr", 1e-3)
        .with("hidden", 256)
        .with("epochs", 25)
        .with("batch_size", 32);
    let storage = std::env::current_dir()?.join("rtune_results");
    println!(
        "training a 2-worker data-parallel MLP on the 8x8 digits (results in {})",
        storage.display()
    );
    let result = TorchTrainer::new(train_digits_mlp)
        .train_loop_config(params.clone())
        .scaling(ScalingConfig::workers(2))
        .run_config(
            RunConfig::default().storage_path(&storage).verbose(true).checkpoint_config(
                CheckpointConfig::new().num_to_keep(2).score("val_acc", Mode::Max),
            ),
        )
        .fit()?;
    let best = result.best_checkpoint().ok_or_else(|| anyhow::anyhow!("no checkpoint kept"))?;
    // Evaluate the best checkpoint on the held-out test set, here in the driver.
    let test_acc = digits_test_accuracy(best, params.get::<i64>("hidden")?)?;
    println!(
        "test accuracy of the best checkpoint: {:.2}% on {} images",
        100.0 * test_acc,
        rtune::data::Digits::split(rtune::cli::builtins::DIGITS_SPLIT_SEED)?.test.len()
    );
    println!("best checkpoint: {}", best.path().display());
    println!(
        "fit took {:.2}s, of which {:.2}s outside the train loop",
        result.fit_seconds,
        result.overhead_seconds()
    );
    anyhow::ensure!(test_acc >= 0.95, "test accuracy {test_acc:.4} is below the 95% target");
    Ok(())
}
