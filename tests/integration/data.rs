//! Datasets end to end: real worker processes reading their shards of real parquet and CSV
//! files, batches compared across ranks, runs and a resume; the preprocessor fitted by the
//! driver on `train` only, saved with the checkpoint and applied again by the predictor.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use polars::prelude::{Column, DataFrame, ParquetWriter};
use rtune::data::{Chain, Columns, Dataset, OneHotEncoder, Preprocessor, StandardScaler};
use rtune::model::TorchPredictor;
use rtune::worker::{Balance, BatchSpec};
use rtune::{
    FailureConfig, Params, RunConfig, SaveVarStore, ScalingConfig, TorchTrainer, TrainContext,
};
use rtune_driver::data::DataSchema;
use serde_json::json;
use tch::nn;

/// Rows in the sharded dataset: 51 for rank 0 and 52 for rank 1 of 2.
const ROWS: usize = 103;

fn id_frame(rows: usize) -> Result<DataFrame> {
    let ids: Vec<i64> = (0..rows as i64).collect();
    Ok(DataFrame::new(
        rows,
        vec![
            Column::new("id".into(), ids.clone()),
            Column::new("x".into(), ids.iter().map(|&i| i as f64 * 0.5).collect::<Vec<_>>()),
            Column::new("y".into(), ids.iter().map(|&i| i % 4).collect::<Vec<_>>()),
        ],
    )?)
}

/// Every epoch, this rank's batches as lists of row ids, in `ids_r{rank}_e{epoch}.json` of the
/// run directory, with whether the attempt resumed from a checkpoint. Params: `epochs`,
/// `batch`, `balance` ("pad" or "drop"), `fail_at` (rank 0 fails once when it reaches that
/// epoch, 0 for never).
fn record_batches(ctx: &mut TrainContext) -> Result<()> {
    let p = ctx.params();
    let (epochs, batch, fail_at) =
        (p.get::<u64>("epochs")?, p.get::<usize>("batch")?, p.get::<u64>("fail_at")?);
    let balance = match p.get::<String>("balance")?.as_str() {
        "drop" => Balance::Drop,
        _ => Balance::Pad,
    };
    let spec = BatchSpec::new(batch).shuffle(11).balance(balance);
    let mut shard = ctx.dataset_shard("train")?;
    let marker = ctx.run_dir().join("failed_once");
    for epoch in ctx.iteration()..epochs {
        if ctx.world_rank() == 0 && fail_at > 0 && epoch == fail_at && !marker.exists() {
            std::fs::write(&marker, "")?;
            anyhow::bail!("planned failure at epoch {epoch}");
        }
        let batches: Vec<Vec<i64>> = shard
            .iter_batches(&spec)?
            .map(|(x, _)| {
                Vec::<f32>::try_from(x.select(1, 0)).map(|v| v.iter().map(|&i| i as i64).collect())
            })
            .collect::<Result<_, _>>()?;
        let record = json!({ "batches": batches, "resumed": ctx.checkpoint().is_some() });
        let file = ctx.run_dir().join(format!("ids_r{}_e{epoch}.json", ctx.world_rank()));
        std::fs::write(file, record.to_string())?;
        let checkpoint = ctx.new_checkpoint()?;
        ctx.report_with_checkpoint([("epoch", epoch as f64)], checkpoint)?;
    }
    Ok(())
}

/// The batches rank `rank` recorded for `epoch` in `run`, and whether it had resumed.
fn batches(run: &Path, rank: usize, epoch: u64) -> Result<(Vec<Vec<i64>>, bool)> {
    let path = run.join(format!("ids_r{rank}_e{epoch}.json"));
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).with_context(|| path.display().to_string())?)?;
    let resumed = record["resumed"].as_bool().context("resumed")?;
    Ok((serde_json::from_value(record["batches"].clone())?, resumed))
}

pub fn shards_partition_rows_and_batch_evenly_across_runs_and_resumes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("rows.parquet");
    ParquetWriter::new(std::fs::File::create(&file)?).finish(&mut id_frame(ROWS)?)?;
    let fit = |name: &str, balance: &str, fail_at: u64| {
        TorchTrainer::new(record_batches)
            .datasets([("train", Dataset::parquet(&file))])
            .columns(Columns::new().features(["id", "x"]).label("y"))
            .train_loop_config(
                Params::new()
                    .with("epochs", 3)
                    .with("batch", 17)
                    .with("balance", balance)
                    .with("fail_at", fail_at),
            )
            .scaling(ScalingConfig::workers(2))
            .run_config(
                RunConfig::new(name)
                    .storage_path(dir.path())
                    .failure_config(FailureConfig::max_failures(1)),
            )
            .fit()
    };
    let pad = fit("pad", "pad", 0)?;
    // Each rank's wait for its batches is in every row.
    for row in &pad.metrics_history {
        for rank in 0..2 {
            let waited = row.get(&format!("ranks/{rank}/time_data_s")).copied();
            ensure!(waited.is_some_and(|w| w > 0.0), "rank {rank}'s data wait in {row:?}");
        }
    }
    let pad = pad.path;
    let drop = fit("drop", "drop", 0)?.path;
    for (run, balance) in [(&pad, Balance::Pad), (&drop, Balance::Drop)] {
        for epoch in 0..3 {
            let (r0, _) = batches(run, 0, epoch)?;
            let (r1, _) = batches(run, 1, epoch)?;
            // Unbalanced, 17-row batches would be 3 on rank 0 (51 rows) and 4 on rank 1 (52).
            let want = if balance == Balance::Pad { 4 } else { 3 };
            ensure!(
                r0.len() == want && r1.len() == want,
                "{balance:?} epoch {epoch}: {} and {} batches",
                r0.len(),
                r1.len()
            );
            let (ids0, ids1): (Vec<i64>, Vec<i64>) = (r0.concat(), r1.concat());
            ensure!(
                ids0.iter().all(|&i| (0..51).contains(&i)),
                "rank 0 read outside its rows: {ids0:?}"
            );
            ensure!(
                ids1.iter().all(|&i| (51..103).contains(&i)),
                "rank 1 read outside its rows: {ids1:?}"
            );
            let mut all: Vec<i64> = ids0.iter().chain(&ids1).copied().collect();
            all.sort_unstable();
            let rows = all.len();
            all.dedup();
            match balance {
                Balance::Pad => ensure!(
                    all.len() == ROWS && rows == 104,
                    "pad: {} distinct of {rows}",
                    all.len()
                ),
                _ => ensure!(
                    all.len() == 102 && rows == 102,
                    "drop: {} distinct of {rows}",
                    all.len()
                ),
            }
        }
        ensure!(batches(run, 0, 0)?.0 != batches(run, 0, 1)?.0, "epochs 0 and 1 have one order");
    }
    // The same seed gives the same batches in another run, and after a failure at epoch 2 the
    // resumed attempt (from the epoch-2 checkpoint) goes on with epoch 2's order, not epoch 0's.
    let again = fit("again", "pad", 0)?.path;
    let resumed = fit("resumed", "pad", 2)?.path;
    ensure!(resumed.join("failed_once").exists(), "the planned failure did not happen");
    for epoch in 0..3 {
        for rank in 0..2 {
            let want = batches(&pad, rank, epoch)?.0;
            ensure!(batches(&again, rank, epoch)?.0 == want, "run 2, rank {rank}, epoch {epoch}");
            let (got, was_resumed) = batches(&resumed, rank, epoch)?;
            ensure!(
                got == want,
                "after the resume, rank {rank}, epoch {epoch}: {got:?} vs {want:?}"
            );
            ensure!(
                was_resumed == (epoch == 2),
                "epoch {epoch} written by a resumed attempt: {was_resumed}"
            );
        }
    }
    Ok(())
}

/// Rank 0 records the first rows of its `train` and `valid` inputs (`inputs.json`) and saves a
/// linear model over them in the checkpoint.
fn record_inputs(ctx: &mut TrainContext) -> Result<()> {
    let train = ctx.dataset_shard("train")?;
    let valid = ctx.dataset_shard("valid")?;
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let _model = nn::linear(vs.root() / "fc", 3, 2, Default::default());
    let mut checkpoint = ctx.new_checkpoint()?;
    checkpoint.save_var_store(&vs)?;
    if ctx.world_rank() == 0 {
        let rows = |t: &tch::Tensor| Vec::<Vec<f32>>::try_from(t.narrow(0, 0, 4));
        let record = json!({ "train": rows(train.features())?, "valid": rows(valid.features())? });
        std::fs::write(ctx.run_dir().join("inputs.json"), record.to_string())?;
    }
    ctx.report_with_checkpoint([("done", 1.0)], checkpoint)?;
    Ok(())
}

/// `x` = `offset + id`, `city` cycling through a and b, `y` = id % 2.
fn city_frame(rows: usize, offset: f64) -> Result<DataFrame> {
    Ok(DataFrame::new(
        rows,
        vec![
            Column::new("x".into(), (0..rows).map(|i| offset + i as f64).collect::<Vec<_>>()),
            Column::new("city".into(), (0..rows).map(|i| ["a", "b"][i % 2]).collect::<Vec<_>>()),
            Column::new("y".into(), (0..rows as i64).map(|i| i % 2).collect::<Vec<_>>()),
        ],
    )?)
}

pub fn preprocessor_fits_on_train_and_travels_with_the_checkpoint() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Validation rows lie far from the training rows: a scaler fitted on them would centre
    // them at 0.
    let valid_csv = dir.path().join("valid.csv");
    let mut csv = String::from("x,city,y\n");
    for i in 0..40 {
        csv += &format!("{},{},{}\n", 1000 + i, ["b", "a"][i % 2], i % 2);
    }
    std::fs::write(&valid_csv, csv)?;
    let result = TorchTrainer::new(record_inputs)
        .datasets([
            ("train", Dataset::frame(city_frame(100, 0.0)?)),
            ("valid", Dataset::csv(&valid_csv)),
        ])
        .columns(Columns::new().features(["x", "city"]).label("y"))
        .preprocessor(
            Chain::new().then(OneHotEncoder::new()).then(StandardScaler::new().columns(["x"])),
        )
        .scaling(ScalingConfig::workers(2))
        .run_config(RunConfig::new("scaled").storage_path(dir.path()))
        .fit()?;
    let checkpoint = result.checkpoint.context("a checkpoint")?;
    let schema =
        DataSchema::read(checkpoint.path())?.context("no preprocessor.json in the checkpoint")?;
    ensure!(schema.model_inputs == ["x", "city=a", "city=b"], "{:?}", schema.model_inputs);
    let saved = serde_json::to_value(schema.preprocessor.as_ref().context("no preprocessor")?)?;
    let offset = saved["steps"][1]["fitted"]["offset"][0].as_f64().context("scaler offset")?;
    ensure!(offset == 49.5, "the scaler's mean is {offset}, not the training rows' 49.5");

    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(result.path.join("inputs.json"))?)?;
    let train_seen: Vec<Vec<f32>> = serde_json::from_value(recorded["train"].clone())?;
    let valid_seen: Vec<Vec<f32>> = serde_json::from_value(recorded["valid"].clone())?;
    let std = (((0..100).map(|i| (f64::from(i) - 49.5).powi(2)).sum::<f64>()) / 100.0).sqrt();
    ensure!(
        valid_seen[0] == [((1000.0 - 49.5) / std) as f32, 0.0, 1.0],
        "valid row 0: {:?}",
        valid_seen[0]
    );

    // The predictor applies the saved preprocessor: the same inputs as the worker saw.
    let predictor = TorchPredictor::from_checkpoint(&checkpoint, |p| {
        nn::linear(p / "fc", 3, 2, Default::default())
    })?;
    let inputs = predictor.inputs(&city_frame(4, 0.0)?)?;
    ensure!(Vec::<Vec<f32>>::try_from(&inputs)? == train_seen, "{inputs} vs {train_seen:?}");
    let unseen =
        DataFrame::new(1, vec![Column::new("x".into(), [1.0]), Column::new("city".into(), ["c"])])?;
    let err = predictor.inputs(&unseen).unwrap_err().to_string();
    ensure!(
        err.contains("column `city` of the input: category `c` (row 0) was not seen in training"),
        "{err}"
    );
    let err = predictor.inputs(&unseen.drop("city")?).unwrap_err().to_string();
    ensure!(err.contains("the input has no column `city`"), "{err}");
    // Without a train dataset there is nothing to fit the preprocessor on: said before start.
    let err = TorchTrainer::new(record_inputs)
        .datasets([("training", Dataset::frame(city_frame(4, 0.0)?))])
        .preprocessor(Preprocessor::from(StandardScaler::new()))
        .run_config(RunConfig::new("no-train").storage_path(dir.path()))
        .fit()
        .unwrap_err()
        .to_string();
    ensure!(err.contains("fitted on the dataset named `train`, and there is none"), "{err}");
    ensure!(!dir.path().join("no-train").exists(), "a run that never started left a folder");
    Ok(())
}

/// Reports the rows of the dataset its `data` param names and of its own shard.
fn report_rows(ctx: &mut TrainContext) -> Result<()> {
    let name = ctx.params().get::<String>("data")?;
    let shard = ctx.dataset_shard(&name)?;
    let report = [("rows", shard.total_rows() as f64), ("shard_rows", shard.len() as f64)];
    ctx.report(report)?;
    Ok(())
}

pub fn a_sweep_prepares_its_datasets_once_and_a_param_picks_one() -> Result<()> {
    use rtune::search::{SearchSpace, grid_search};
    use rtune::{TuneConfig, Tuner};
    let dir = tempfile::tempdir()?;
    let small = dir.path().join("small.csv");
    std::fs::write(&small, "id,x,y\n0,0.5,0\n1,1.5,1\n2,2.5,0\n")?;
    let trainer = TorchTrainer::new(report_rows)
        .datasets([("small", Dataset::csv(&small)), ("large", Dataset::frame(id_frame(ROWS)?))])
        .columns(Columns::new().features(["x"]).label("y"))
        .scaling(ScalingConfig::workers(2));
    let space = SearchSpace::new().add("data", grid_search(["small", "large", "small"]));
    let grid = Tuner::new(trainer, space)
        .tune_config(TuneConfig::new().max_concurrent_trials(3))
        .run_config(RunConfig::new("pick").storage_path(dir.path()))
        .fit()?;
    ensure!(grid.errors().is_empty(), "{:?}", grid.errors());
    for t in &grid.trials {
        let want = if t.params().get::<String>("data")? == "small" { 3.0 } else { ROWS as f64 };
        ensure!(t.last("rows") == Some(want), "{}: {:?} rows", t.trial_id(), t.last("rows"));
        let shard = t.last("shard_rows").context("shard_rows")?;
        ensure!(shard == (want / 2.0).floor(), "rank 0's shard of {want} rows is {shard}");
    }
    // One parquet copy per dataset for the whole sweep, none per trial.
    let experiment = dir.path().join("pick");
    let mut cached: Vec<String> = std::fs::read_dir(experiment.join(".datasets"))?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    cached.sort();
    ensure!(cached == ["large.parquet", "small.parquet"], "{cached:?}");
    for t in &grid.trials {
        ensure!(!t.path().join(".datasets").exists(), "trial {} prepared its own", t.trial_id());
    }
    Ok(())
}
