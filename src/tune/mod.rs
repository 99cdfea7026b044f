//! Ray Tune's half: sweeps whose trials are full `TorchTrainer` runs on the process's shared
//! driver. One owner each:
//!
//! * `controller`: the synchronous core that decides what runs, stops and ends;
//! * `sweep`: the thin async shell that feeds it events and carries its commands out, one trial
//!   at a time a task (`trial_task`, where every command about a running trial is dispatched);
//! * `tuner`: the `Tuner` builder, and `prepare`, which checks every setting before anything
//!   runs; `config` (`TuneConfig`) and `control` (`Control`) are what a user hands it;
//! * `experiment`: the experiment directory, every file name and path in it; `trial` and
//!   `result_grid`: what a sweep returns.
//!
//! `controller`, `config`, `experiment`, `trial` and `result_grid` are `rtune-core`'s (`rtune
//! ls`, `show` and `watch` read experiments without libtorch); this module adds the rest.
//!
//! ```no_run
//! use rtune::search::{Asha, SearchSpace, choice, loguniform};
//! use rtune::{
//!     Mode, RunConfig, ScalingConfig, TorchTrainer, TrainContext, TuneConfig, Tuner,
//! };
//!
//! fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
//!     let (lr, hidden) = (ctx.params().get::<f64>("lr")?, ctx.params().get::<i64>("hidden")?);
//!     for _epoch in ctx.iteration()..20 {
//!         // ... train a model of width `hidden` with learning rate `lr` ...
//!         ctx.report([("val_acc", lr * hidden as f64)])?;
//!     }
//!     Ok(())
//! }
//!
//! fn main() -> anyhow::Result<()> {
//!     rtune::init();
//!     let trainer = TorchTrainer::new(train).scaling(ScalingConfig::workers(2));
//!     let space = SearchSpace::new()
//!         .add("lr", loguniform(1e-4, 1e-1)?)
//!         .add("hidden", choice([32, 64, 128]));
//!     let grid = Tuner::new(trainer, space)
//!         .tune_config(
//!             TuneConfig::new()
//!                 .metric("val_acc")
//!                 .mode(Mode::Max)
//!                 .num_samples(16)
//!                 .scheduler(Asha::new().max_t(20).grace_period(2)),
//!         )
//!         .run_config(RunConfig::new("digits_sweep"))
//!         .fit()?;
//!     let best = grid.best_result()?;
//!     println!("{:?} {:?}", best.params(), best.last("val_acc"));
//!     println!("{}", grid.dataframe()?);
//!     Ok(())
//! }
//! ```

pub use rtune_core::tune::*;

mod sweep;
mod trial_task;
mod tuner;

pub use tuner::{Tuner, trial_count};
