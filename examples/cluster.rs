//! A cluster on loopback running a sweep: this example starts a head and 2 node agents (2 CPUs
//! each) as processes, which are this binary again in the `head` and `node` roles of rtune's
//! command line, and a Tuner joins them with `RunConfig::cluster`. Each trial is 2 workers
//! placed STRICT_SPREAD, one on each node, started by the agents (this binary again, as
//! workers). Each rank reads its node from `RTUNE_NODE_ID` (set by its agent), the ranks
//! all-reduce them, and rank 0 reports both with the `synthetic-curve` score of the trial's
//! params. The head and the agents are killed at the end, also after an error.
//! Expected (`cargo run --example cluster`): `head at 127.0.0.1:PORT, node agents 0 and 1`, then
//! 8 trials, 2 at a time, each `rank 0 on node 0, rank 1 on node 1`, in about 7 s on 2 CPU
//! cores; the best score 0.8479. With `RTUNE_QUICK=1` (as the tests run it) 4 trials in about
//! 5 s, the same best.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use rtune::builtins::synthetic_score;
use rtune::cli::Registry;
use rtune::collective::ReduceOp;
use rtune::search::{SearchSpace, loguniform, uniform};
use rtune::{Mode, PlacementStrategy, RunConfig, ScalingConfig, TorchTrainer};
use rtune::{TrainContext, TuneConfig, Tuner};

/// The head and the node agents, killed when dropped.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in self.0.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// This binary as the `rtune` command line.
fn rtune(args: &[&str]) -> Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(args).stdout(Stdio::null()).stderr(Stdio::null());
    Ok(command)
}

/// One trial: which node each rank runs on, and 4 iterations of the simulated curve.
fn train(ctx: &mut TrainContext) -> Result<()> {
    let mut nodes = [0f32; 2];
    nodes[ctx.world_rank()] = std::env::var("RTUNE_NODE_ID")?.parse()?;
    ctx.all_reduce(&mut nodes, ReduceOp::Sum)?;
    let [node_0, node_1] = nodes.map(f64::from);
    let (rate, plateau) = (ctx.params().get::<f64>("rate")?, ctx.params().get::<f64>("plateau")?);
    for t in ctx.iteration() + 1..=4 {
        let score = synthetic_score(rate, plateau, 0.01, 0, t);
        ctx.report([("score", score), ("node_of_rank_0", node_0), ("node_of_rank_1", node_1)])?;
    }
    Ok(())
}

fn main() -> Result<()> {
    rtune::init(); // first: worker processes are this binary started again
    if std::env::args().nth(1).is_some_and(|role| ["head", "node", "status"].contains(&&*role)) {
        rtune::cli::main(Registry::builtin()); // `cluster head ..` is `rtune head ..`
    }
    let trials = if std::env::var_os("RTUNE_QUICK").is_some() { 4 } else { 8 };
    let mut head = rtune(&["head", "--port", "0"])?.stdout(Stdio::piped()).spawn()?;
    let stdout = head.stdout.take().context("the head's stdout")?;
    let mut cluster = Processes(vec![head]);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let address = line.trim().strip_prefix("rtune head listening on ");
    let address = address.with_context(|| format!("the head said {line:?}"))?.to_owned();
    for _ in 0..2 {
        cluster.0.push(rtune(&["node", "--address", &address, "--num-cpus", "2"])?.spawn()?);
    }
    let started = Instant::now();
    let nodes = loop {
        let out = rtune(&["status", "--address", &address, "--format", "json"])?
            .stdout(Stdio::piped())
            .output()?;
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let alive = status["nodes"].as_array().map(|n| n.iter().filter(|n| n["alive"] == true));
        let ids: Vec<String> = alive.into_iter().flatten().map(|n| n["id"].to_string()).collect();
        if ids.len() == 2 {
            break ids;
        }
        ensure!(started.elapsed() < Duration::from_secs(30), "the node agents did not join");
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("head at {address}, node agents {} and {}", nodes[0], nodes[1]);
    let space =
        SearchSpace::new().add("rate", loguniform(0.05, 1.0)?).add("plateau", uniform(0.5, 1.0)?);
    let trainer = TorchTrainer::new(train)
        .scaling(ScalingConfig::workers(2).placement_strategy(PlacementStrategy::StrictSpread));
    let grid = Tuner::new(trainer, space)
        .tune_config(
            TuneConfig::new()
                .metric("score")
                .mode(Mode::Max)
                .num_samples(trials)
                .max_concurrent_trials(2)
                .seed(0),
        )
        .run_config(
            RunConfig::default()
                .storage_path(std::env::temp_dir().join("rtune-cluster"))
                .cluster(address, None),
        )
        .fit()?;
    for t in &grid.trials {
        let status = format!("{:?}", t.status()).to_uppercase();
        let last = |metric: &str| t.last(metric).unwrap_or(f64::NAN);
        let (score, a, b) = (last("score"), last("node_of_rank_0"), last("node_of_rank_1"));
        let id = &t.trial_id();
        println!("{id}  {status}  score {score:.4}  rank 0 on node {a}, rank 1 on node {b}");
    }
    let best = grid.best_result()?;
    println!("best trial {}: score {:.4}", best.trial_id(), best.last("score").unwrap_or(f64::NAN));
    drop(cluster); // the agents, then the head
    Ok(())
}
