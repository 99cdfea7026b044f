use rtune::search::{Asha, SearchSpace, Tpe, loguniform};
use rtune::{Mode, ScalingConfig, TorchTrainer, TrainContext, TuneConfig, Tuner};

fn train(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let lr = ctx.params().get::<f64>("lr")?;
    for epoch in ctx.iteration()..10 {
        // ... an epoch of your tch model on this rank's shard, with learning rate `lr` ...
        ctx.report([("loss", 1.0 / (1.0 + lr * (epoch + 1) as f64))])?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    rtune::init(); // first: worker processes are this binary started again
    let trainer = TorchTrainer::new(train).scaling(ScalingConfig::workers(2));
    let space = SearchSpace::new().add("lr", loguniform(1e-4, 1e-1)?);
    let grid = Tuner::new(trainer, space)
        .tune_config(
            TuneConfig::new()
                .metric("loss")
                .mode(Mode::Min)
                .num_samples(8)
                .search_alg(Tpe::new())
                .scheduler(Asha::new().max_t(10)),
        )
        .fit()?;
    println!("best: {}", grid.best_result()?);
    Ok(())
}
