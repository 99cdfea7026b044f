//! Benchmark (not a test): sharded data parallelism (ZeRO-1, ZeRO-2) against plain data
//! parallelism on CPU ranks, Adam, an MLP of 64 → H → H (`--depth` H×H layers) → 10 (default
//! H = 4096, depth 3: 50.6M parameters), batch 32 per rank, at 1, 2 and 4 ranks (half a CPU
//! each). Per rank: the optimizer state's bytes, the peak resident memory (`VmHWM`) and the
//! median step time over `--steps` (5) after one warm-up step. Prints a markdown table.
//! Run in release: `cargo run --release --example bench_zero -- [--hidden H] [--depth D]
//! [--steps N] [--ranks 1,2,4]`.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result};
use rtune::config::Sharding;
use rtune::worker::OptimizerSettings;
use rtune::{Params, RunConfig, ScalingConfig, TorchTrainer, TrainContext};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

/// Peak resident memory of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn train(ctx: &mut TrainContext) -> Result<()> {
    let p = ctx.params();
    let (way, hidden, depth, steps) = (
        p.get::<String>("way")?,
        p.get::<i64>("hidden")?,
        p.get::<usize>("depth")?,
        p.get::<usize>("steps")?,
    );
    tch::manual_seed(ctx.world_rank() as i64);
    let vs = nn::VarStore::new(Device::Cpu);
    let root = vs.root();
    let mut net = nn::seq().add(nn::linear(&root / "in", 64, hidden, Default::default()));
    for layer in 0..depth {
        net = net.add_fn(|x| x.relu()).add(nn::linear(
            &root / format!("h{layer}"),
            hidden,
            hidden,
            Default::default(),
        ));
    }
    let net =
        net.add_fn(|x| x.relu()).add(nn::linear(&root / "out", hidden, 10, Default::default()));
    let parameters: i64 =
        vs.trainable_variables().iter().map(Tensor::numel).map(|n| n as i64).sum();
    let x = Tensor::randn([32, 64], (Kind::Float, Device::Cpu));
    let y = Tensor::randint(10, [32], (Kind::Int64, Device::Cpu));
    let mut times = Vec::new();
    let state_bytes = if way == "ddp" {
        let ddp = ctx.prepare_model(&vs)?;
        let mut opt = nn::Adam::default().build(&vs, 1e-4)?;
        for _ in 0..=steps {
            let started = Instant::now();
            ddp.backward_step(&mut opt, &net.forward(&x).cross_entropy_for_logits(&y))?;
            times.push(started.elapsed().as_secs_f64());
        }
        // libtorch's Adam: two f32 moments of every parameter.
        2 * 4 * parameters as usize
    } else {
        let sharding = if way == "zero1" { Sharding::Zero1 } else { Sharding::Zero2 };
        let mut model = ctx.prepare_model_sharded(&vs, sharding, OptimizerSettings::adam(1e-4))?;
        for _ in 0..=steps {
            let started = Instant::now();
            model.backward_step(&net.forward(&x).cross_entropy_for_logits(&y))?;
            times.push(started.elapsed().as_secs_f64());
        }
        model.optimizer_state_bytes()
    };
    let mut timed = times[1..].to_vec();
    timed.sort_by(f64::total_cmp);
    let out = serde_json::json!({
        "parameters": parameters,
        "state_bytes": state_bytes,
        "peak_rss": peak_rss(),
        "step_s": timed[timed.len() / 2],
    });
    let file = ctx.run_dir().join(format!("bench_{}.json", ctx.world_rank()));
    std::fs::write(file, out.to_string())?;
    ctx.report([("done", 1.0)]).map_err(Into::into)
}

fn main() -> Result<()> {
    rtune::init();
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: &str| -> String {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    };
    let (hidden, depth, steps) =
        (arg("--hidden", "4096"), arg("--depth", "3"), arg("--steps", "5"));
    let ranks: Vec<usize> =
        arg("--ranks", "1,2,4").split(',').map(str::parse).collect::<Result<_, _>>()?;
    let dir = tempfile::tempdir()?;
    println!(
        "| ranks | way | parameters | optimizer state / rank | peak RSS / rank | step (median) |"
    );
    println!("|--:|---|--:|--:|--:|--:|");
    for &workers in &ranks {
        for way in ["ddp", "zero1", "zero2"] {
            let config = Params::new()
                .with("way", way)
                .with("hidden", hidden.parse::<i64>()?)
                .with("depth", depth.parse::<i64>()?)
                .with("steps", steps.parse::<i64>()?);
            let half = BTreeMap::from([("CPU".to_owned(), 0.5)]);
            let result = TorchTrainer::new(train)
                .train_loop_config(config)
                .scaling(ScalingConfig::workers(workers).resources_per_worker(half))
                .run_config(RunConfig::default().storage_path(dir.path()))
                .fit()?;
            let mut rows = Vec::new();
            for rank in 0..workers {
                let file = result.path.join(format!("bench_{rank}.json"));
                let text = std::fs::read(&file).with_context(|| file.display().to_string())?;
                rows.push(serde_json::from_slice::<serde_json::Value>(&text)?);
            }
            let most = |key: &str| rows.iter().filter_map(|r| r[key].as_f64()).fold(0.0, f64::max);
            println!(
                "| {workers} | {way} | {:.1}M | {:.0} MB | {:.0} MB | {:.3} s |",
                most("parameters") / 1e6,
                most("state_bytes") / 1e6,
                most("peak_rss") / 1e6,
                rows[0]["step_s"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    Ok(())
}
