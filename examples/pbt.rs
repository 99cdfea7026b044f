//! Population based training of the digits MLP (the `digits-mlp` train function, which saves a
//! checkpoint every epoch and goes on from `ctx.checkpoint()`). A population of 4 starts from
//! learning rates 3e-2 to 1e-4 (as many train at once as there are CPUs); every 2 epochs, a trial
//! in the bottom quarter by val_loss takes over the latest checkpoint of one in the top quarter
//! and goes on with that trial's lr, perturbed (x0.8 or x1.2) or redrawn. The exploits are read
//! from the scheduler's status through a `Callback`.
//! Expected (`cargo run --example pbt`): 4 trials of 12 epochs in about 6 s on 2 CPU cores, 2 to 4
//! exploits (when each trial reports decides which); the trial that started at lr 3e-2 (val_loss
//! 3.4 after 2 epochs) takes over a better one's weights and ends near the others, val_loss 0.08
//! to 0.14 and val_acc 0.97 everywhere. With `RTUNE_QUICK=1` (as the tests run it) 6 epochs in
//! about 4 s, 1 or 2 exploits, the best val_acc 0.97.

use std::sync::{Arc, Mutex};

use anyhow::Result;
use rtune::builtins::{digits_data, train_digits_mlp};
use rtune::callback::Callback;
use rtune::search::{Pbt, SchedulerStatus, SearchSpace, TrialId, grid_search, loguniform};
use rtune::{Mode, Params, RunConfig, TorchTrainer, TuneConfig, Tuner};

/// Keeps the scheduler's latest status (PBT's exploits).
#[derive(Default)]
struct LatestStatus(Mutex<SchedulerStatus>);

impl Callback for LatestStatus {
    fn on_scheduler_status(&self, status: &SchedulerStatus) -> rtune::Result<()> {
        *self.0.lock().expect("not poisoned") = status.clone();
        Ok(())
    }
}

fn main() -> Result<()> {
    rtune::init(); // first: worker processes are this binary started again
    let quick = std::env::var_os("RTUNE_QUICK").is_some();
    let epochs = if quick { 6 } else { 12 };
    let trainer = digits_data(TorchTrainer::new(train_digits_mlp))?.train_loop_config(
        Params::new().with("epochs", epochs).with("hidden", 256).with("batch_size", 16),
    );
    let population = SearchSpace::new().add("lr", grid_search([3e-2, 1e-2, 1e-3, 1e-4]));
    let pbt = Pbt::new()
        .time_attr("training_iteration")
        .perturbation_interval(2)
        .hyperparam_mutations(SearchSpace::new().add("lr", loguniform(1e-4, 5e-2)?))
        .seed(0);
    let status = Arc::new(LatestStatus::default());
    let grid = Tuner::new(trainer, population)
        .tune_config(
            TuneConfig::new()
                .metric("val_loss")
                .mode(Mode::Min)
                .scheduler(pbt)
                .max_concurrent_trials(4)
                .seed(0),
        )
        .run_config(
            RunConfig::default()
                .storage_path(std::env::temp_dir().join("rtune-pbt"))
                .callback(status.clone()),
        )
        .fit()?;
    let status = status.0.lock().expect("not poisoned").clone();
    println!("exploits: {} (the latest below, oldest first)", status.perturbations);
    for e in status.exploits.iter().rev() {
        let id = |t: TrialId| grid.trials[t.0 as usize].trial_id();
        println!("  epoch {:>2}: {} took over {}'s checkpoint", e.time, id(e.trial), id(e.source));
    }
    for t in &grid.trials {
        let status = format!("{:?}", t.status()).to_uppercase();
        let last = |metric: &str| t.last(metric).unwrap_or(f64::NAN);
        let (epochs, loss, acc) = (last("training_iteration"), last("val_loss"), last("val_acc"));
        let (id, lr) = (&t.trial_id(), t.params().get::<f64>("lr")?);
        println!(
            "{id}  {status}  {epochs:>2} epochs  lr {lr:.1e}  val_loss {loss:.4}  val_acc {acc:.4}"
        );
    }
    let best = grid.best_result()?;
    let acc = best.last("val_acc").unwrap_or(0.0);
    println!("best trial {}: val_acc {acc:.4}", best.trial_id());
    Ok(())
}
