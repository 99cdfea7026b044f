//! Benchmark (not a test): a 2-worker data-parallel MLP (64-256-256-10), batch 128 per worker,
//! 1 intra-op thread per worker, 300 timed steps after 20 warm-up steps, on synthetic data.
//! Prints the per-step time and fit()'s overhead (wall time minus time inside the train loop).
//! Compare with `bench/ddp_torch.py` (PyTorch DDP with gloo, same settings); `bench/ddp.sh`
//! runs both side by side. Run in release: `cargo run --release --example bench_ddp`.
//!
//! `-- --hidden 2236 --steps 20` runs a larger MLP (64-H-H-10; H = 2236 is 5.1M parameters,
//! `--layers 3` adds a third H x H layer: 10.1M), where the all-reduce dominates; `--warmup N`.
//!
//! On a GPU machine: `--gpus 1` gives each worker a GPU (`--gpus 0.5`: half of one, so two
//! workers share it and average through the host ring), `--workers N` sets the group's size
//! (default 2); `bench/gpu_torch.py` is PyTorch's single-GPU loop with the same model and
//! batch. The model and the batch live on the worker's device; the timed steps end with a
//! device synchronisation.

use std::time::Instant;

use anyhow::Result;
use rtune::{Params, RunConfig, ScalingConfig, TorchTrainer, TrainContext};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

fn train(ctx: &mut TrainContext) -> Result<()> {
    let (warmup, steps) =
        (ctx.params().get::<usize>("warmup")?, ctx.params().get::<usize>("steps")?);
    let (hidden, layers) =
        (ctx.params().get::<i64>("hidden")?, ctx.params().get::<usize>("layers")?);
    tch::manual_seed(ctx.world_rank() as i64);
    let device = ctx.device();
    let vs = nn::VarStore::new(device);
    let root = vs.root();
    let mut net = nn::seq().add(nn::linear(&root / "fc1", 64, hidden, Default::default()));
    for layer in 2..=layers {
        net = net.add_fn(|x| x.relu()).add(nn::linear(
            &root / format!("fc{layer}"),
            hidden,
            hidden,
            Default::default(),
        ));
    }
    let net = net.add_fn(|x| x.relu()).add(nn::linear(
        &root / format!("fc{}", layers + 1),
        hidden,
        10,
        Default::default(),
    ));
    let ddp = ctx.prepare_model(&vs)?;
    let mut opt = nn::Sgd::default().build(&vs, 0.01)?;
    let batch = ctx.params().get::<i64>("batch")?;
    let x = Tensor::randn([batch, 64], (Kind::Float, device));
    let y = Tensor::randint(10, [batch], (Kind::Int64, device));
    let synchronize = || {
        if let Device::Cuda(index) = device {
            tch::Cuda::synchronize(index as i64);
        }
    };
    let mut started = Instant::now();
    for step in 0..warmup + steps {
        if step == warmup {
            synchronize();
            started = Instant::now();
        }
        let loss = net.forward(&x).cross_entropy_for_logits(&y);
        ddp.backward_step(&mut opt, &loss)?;
    }
    synchronize();
    let per_step_ms = started.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let parameters: i64 = vs.trainable_variables().iter().map(|t| t.numel() as i64).sum();
    ctx.report([("per_step_ms", per_step_ms), ("parameters", parameters as f64)])?;
    Ok(())
}

fn main() -> Result<()> {
    rtune::init();
    let storage = tempfile_dir()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str, default: f64| -> Result<f64> {
        match args.iter().position(|a| a == name) {
            Some(i) => Ok(args.get(i + 1).map(|v| v.parse()).transpose()?.unwrap_or(default)),
            None => Ok(default),
        }
    };
    let params = Params::new()
        .with("warmup", arg("--warmup", 20.0)? as i64)
        .with("steps", arg("--steps", 300.0)? as i64)
        .with("hidden", arg("--hidden", 256.0)? as i64)
        .with("layers", arg("--layers", 2.0)? as i64)
        .with("batch", arg("--batch", 128.0)? as i64);
    let mut scaling = ScalingConfig::workers(arg("--workers", 2.0)? as usize);
    let gpus = arg("--gpus", 0.0)?;
    if gpus > 0.0 {
        scaling = scaling.use_gpu(true).resources_per_worker([("GPU".to_owned(), gpus)].into());
    }
    let result = TorchTrainer::new(train)
        .train_loop_config(params)
        .scaling(scaling)
        .run_config(RunConfig::default().storage_path(&storage))
        .fit()?;
    let per_step = result.metrics.as_ref().map_or(f64::NAN, |m| m["per_step_ms"]);
    let parameters = result.metrics.as_ref().map_or(f64::NAN, |m| m["parameters"]);
    println!(
        "rtune  parameters {parameters}  per_step_ms {per_step:.3}  fit_s {:.3}  train_loop_s {:.3}  overhead_s {:.3}",
        result.fit_seconds,
        result.train_loop_seconds,
        result.overhead_seconds()
    );
    std::fs::remove_dir_all(&storage).ok();
    Ok(())
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("rtune_bench_ddp_{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
