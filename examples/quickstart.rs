//! Quickstart: `make demo` as library code. A Tuner sweeps the digits MLP (the `digits-mlp`
//! train function, 2 data-parallel worker processes a trial, each reading its shard of the
//! `train` dataset, standardized by a scaler fitted on it) with TPE and ASHA, then the best
//! trial's checkpoint predicts the held-out test set through `TorchPredictor`, which applies
//! the scaler saved with it.
//! Expected (`cargo run --example quickstart`): 12 trials in about 5 s on 2 CPU cores, the best
//! val_loss about 0.03-0.04, and about 95-96% of the 271 test images right. With `RTUNE_QUICK=1` (as
//! the tests run it) 4 trials of 4 epochs, about 90%.

use anyhow::Result;
use rtune::builtins::{DIGITS_SPLIT_SEED, digits_mlp, predictor_accuracy, train_digits_mlp};
use rtune::data::{Columns, Dataset, StandardScaler};
use rtune::digits::{DIGIT_LABEL, Digits};
use rtune::model::TorchPredictor;
use rtune::search::{Asha, SearchSpace, Tpe, choice, loguniform};
use rtune::{Mode, Params, RunConfig, ScalingConfig, TorchTrainer, TuneConfig, Tuner};

fn main() -> Result<()> {
    rtune::init(); // first: worker processes are this binary started again
    let quick = std::env::var_os("RTUNE_QUICK").is_some();
    let (trials, epochs) = if quick { (4, 4) } else { (12, 12) };
    let space = SearchSpace::new()
        .add("lr", loguniform(1e-4, 3e-2)?)
        .add("hidden", choice([64, 128, 256]))
        .add("batch_size", choice([16, 32, 64]));
    let split = Digits::split(DIGITS_SPLIT_SEED)?;
    let (train, valid) = (split.train.frame()?, split.validation.frame()?);
    let trainer = TorchTrainer::new(train_digits_mlp)
        .datasets([("train", Dataset::frame(train)), ("valid", Dataset::frame(valid))])
        .columns(Columns::new().label(DIGIT_LABEL))
        .preprocessor(StandardScaler::new())
        .train_loop_config(Params::new().with("epochs", epochs))
        .scaling(ScalingConfig::workers(2));
    let storage = std::env::temp_dir().join("rtune-quickstart");
    let grid = Tuner::new(trainer, space)
        .tune_config(
            TuneConfig::new()
                .metric("val_loss")
                .mode(Mode::Min)
                .num_samples(trials)
                .search_alg(Tpe::new().n_startup_trials(4))
                .scheduler(Asha::new().max_t(epochs as u32).grace_period(2))
                .seed(0),
        )
        .run_config(RunConfig::default().storage_path(&storage))
        .fit()?;
    for t in &grid.trials {
        let (id, n, params) =
            (&t.trial_id(), t.history().len(), serde_json::to_string(&t.params())?);
        let loss = t.last("val_loss").unwrap_or(f64::NAN);
        println!("{id}  {n:>2} epochs  val_loss {loss:.4}  {params}");
    }
    let best = grid.best_result()?;
    let checkpoint = best.checkpoint()?;
    let hidden = best.params().get::<i64>("hidden")?;
    let predictor = TorchPredictor::from_checkpoint(checkpoint, |p| digits_mlp(p, hidden))?;
    let accuracy = predictor_accuracy(&predictor, &split.test)?;
    println!("best trial {}: {:.2}% of the test set right", best.trial_id(), 100.0 * accuracy);
    Ok(())
}
