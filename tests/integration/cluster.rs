//! The cluster for real on loopback: an `rtune head` and `rtune node` agents as processes, and
//! TorchTrainer runs whose workers the agents start (this test binary again).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{alive, process_state, wait_for};
use anyhow::{Context, Result, ensure};
use rtune::{
    FailureConfig, Params, PlacementStrategy, RunConfig, ScalingConfig, TorchTrainer, TrainContext,
};
use rtune_searchers::TrialStatus;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");

/// A head and its node agents; all are killed on drop.
pub(crate) struct Cluster {
    pub(crate) address: String,
    token: Option<String>,
    head: Child,
    nodes: Vec<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().chain(std::iter::once(&mut self.head)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Cluster {
    pub(crate) fn start(token: Option<&str>) -> Result<Cluster> {
        let mut command = Command::new(RTUNE);
        command.args(["head", "--port", "0", "--heartbeat-timeout", "2"]);
        if let Some(t) = token {
            command.args(["--token", t]);
        }
        let mut head = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
        let mut line = String::new();
        BufReader::new(head.stdout.take().context("head stdout")?).read_line(&mut line)?;
        let address = line
            .trim()
            .strip_prefix("rtune head listening on ")
            .with_context(|| format!("unexpected head output {line:?}"))?
            .to_owned();
        Ok(Cluster { address, token: token.map(str::to_owned), head, nodes: Vec::new() })
    }

    /// Kills the head and starts a new one on the same port (no state carried over).
    fn restart_head(&mut self) -> Result<()> {
        let _ = self.head.kill();
        let _ = self.head.wait();
        let port = self.address.rsplit(':').next().context("port")?.to_owned();
        let mut head = Command::new(RTUNE)
            .args(["head", "--port", &port, "--heartbeat-timeout", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(head.stdout.take().context("head stdout")?).read_line(&mut line)?;
        ensure!(line.contains(&self.address), "restarted head: {line:?}");
        self.head = head;
        Ok(())
    }

    fn node_command(&self, args: &[&str], token: Option<&str>) -> Command {
        let mut command = Command::new(RTUNE);
        command.args(["node", "--address", &self.address]).args(args);
        if let Some(t) = token {
            command.args(["--token", t]);
        }
        command
    }

    /// Starts a node agent and waits until the head counts it.
    pub(crate) fn add_node(&mut self, args: &[&str]) -> Result<u32> {
        let before = self.alive_nodes()?;
        let child = self
            .node_command(args, self.token.clone().as_deref())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pid = child.id();
        self.nodes.push(child);
        wait_for(Duration::from_secs(20), || Ok(self.alive_nodes()? > before))?;
        Ok(pid)
    }

    fn status_command(&self, token: Option<&str>) -> Command {
        let mut command = Command::new(RTUNE);
        command.args(["status", "--address", &self.address, "--format", "json"]);
        if let Some(t) = token {
            command.args(["--token", t]);
        }
        command
    }

    pub(crate) fn status(&self) -> Result<serde_json::Value> {
        let out = self.status_command(self.token.as_deref()).output()?;
        ensure!(out.status.success(), "status failed: {}", String::from_utf8_lossy(&out.stderr));
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// The nodes' ids as `rtune status` prints them, in node order.
    fn node_ids(&self) -> Result<Vec<String>> {
        let status = self.status()?;
        let nodes = status["nodes"].as_array().context("nodes")?;
        Ok(nodes.iter().map(|n| n["id"].to_string()).collect())
    }

    fn alive_nodes(&self) -> Result<usize> {
        let status = self.status()?;
        let nodes = status["nodes"].as_array().context("nodes")?;
        Ok(nodes.iter().filter(|n| n["alive"] == true).count())
    }

    fn run_config(&self, storage: &Path, name: &str) -> RunConfig {
        RunConfig::new(name).storage_path(storage).cluster(self.address.clone(), self.token.clone())
    }
}

pub fn status_json_matches_the_pool() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    cluster.add_node(&["--num-cpus", "2", "--num-gpus", "0"])?;
    cluster.add_node(&["--num-cpus", "3", "--num-gpus", "0", "--resources", "tpu=1"])?;
    let status = cluster.status()?;
    let nodes = status["nodes"].as_array().context("nodes")?;
    ensure!(nodes.len() == 2, "{status}");
    // Each agent's CPUs and GPUs as declared, its memory as detected.
    let declared = |n: &serde_json::Value| {
        let mut total = n["total"].clone();
        let memory = total.as_object_mut().and_then(|t| t.remove("memory"));
        (total, memory.and_then(|m| m.as_u64()).is_some_and(|m| m > 64 << 20))
    };
    let cpus_2 = serde_json::json!({"CPU": 2, "GPU": 0});
    ensure!(declared(&nodes[0]) == (cpus_2, true), "{}", nodes[0]);
    let cpus_3 = serde_json::json!({"CPU": 3, "GPU": 0, "tpu": 1});
    ensure!(declared(&nodes[1]) == (cpus_3, true), "{}", nodes[1]);
    ensure!(nodes.iter().all(|n| n["alive"] == true && n["free"] == n["total"]), "{status}");
    ensure!(status["placement_groups"] == serde_json::json!([]), "{status}");
    Ok(())
}

/// A node offering a GPU its workers could not use (no NVIDIA driver here; on a GPU machine,
/// no device visible to it) offers none and says why: `rtune status` shows the cause, and a
/// sweep asking for a GPU is refused before any trial with the node's name; `fit` is refused
/// by the head at its reservation with the same.
pub fn gpus_a_node_cannot_use_are_refused_with_its_name() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    let node = cluster
        .node_command(&["--num-cpus", "2", "--num-gpus", "1"], None)
        .env("CUDA_VISIBLE_DEVICES", "")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    cluster.nodes.push(node);
    wait_for(Duration::from_secs(20), || Ok(cluster.alive_nodes()? == 1))?;
    let status = cluster.status()?;
    let node = &status["nodes"][0];
    ensure!(node["total"]["GPU"] == 0, "the unusable GPU is not offered: {node}");
    let cause = node["gpu_error"].as_str().context("the node says why")?.to_owned();
    ensure!(cause.contains("NVIDIA driver") || cause.contains("no CUDA device"), "{cause}");
    let table = Command::new(RTUNE).args(["status", "--address", &cluster.address]).output()?;
    let table = String::from_utf8_lossy(&table.stdout);
    ensure!(table.contains("GPUs not offered") && table.contains(&cause), "{table}");

    let dir = tempfile::tempdir()?;
    let named = format!("node {} (", node["id"]);
    let trainer = TorchTrainer::new(record_node)
        .train_loop_config(Params::new().with("iterations", 1).with("pause_ms", 0))
        .scaling(ScalingConfig::workers(1).use_gpu(true));
    let space = rtune::search::SearchSpace::new().add("x", rtune::search::choice([1, 2]));
    let refused = rtune::Tuner::new(trainer.clone(), space)
        .run_config(cluster.run_config(dir.path(), "sweep"))
        .fit()
        .err()
        .context("the sweep is refused")?
        .to_string();
    ensure!(refused.contains(&named) && refused.contains(&cause), "{refused}");
    ensure!(!dir.path().join("sweep").exists(), "nothing of the refused sweep is left");
    let refused = trainer
        .run_config(cluster.run_config(dir.path(), "fit"))
        .fit()
        .err()
        .context("the run is refused")?
        .to_string();
    ensure!(refused.contains(&named) && refused.contains(&cause), "{refused}");
    Ok(())
}

pub fn wrong_token_is_refused() -> Result<()> {
    let cluster = Cluster::start(Some("right-token"))?;
    let out = cluster.status_command(Some("wrong-token")).output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("cluster token") && err.contains("refused"),
        "{err}"
    );
    let out = cluster.status_command(None).output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success() && err.contains("requires one"), "{err}");
    let node = cluster.node_command(&["--num-cpus", "1"], Some("wrong-token")).output()?;
    let err = String::from_utf8_lossy(&node.stderr);
    ensure!(!node.status.success() && err.contains("cluster token"), "node: {err}");
    ensure!(cluster.alive_nodes()? == 0, "no node joined with a wrong token");
    Ok(())
}

/// Rank `ctx.world_rank()` writes the node id its agent gave it (see `node_of`).
fn mark_node(ctx: &TrainContext) -> Result<()> {
    let node = std::env::var("RTUNE_NODE_ID").unwrap_or_default();
    let marker = ctx.run_dir().join(format!("rank_{}.node", ctx.world_rank()));
    std::fs::write(marker, format!("{node} {} {}", ctx.node_rank(), std::process::id()))?;
    println!("rank {} starts on node {node}", ctx.world_rank());
    Ok(())
}

/// Each rank writes the node id its agent gave it, then reports.
fn record_node(ctx: &mut TrainContext) -> Result<()> {
    mark_node(ctx)?;
    let iterations = ctx.params().get::<u64>("iterations")?;
    let pause = Duration::from_millis(ctx.params().get::<u64>("pause_ms")?);
    for i in ctx.iteration() + 1..=iterations {
        ctx.barrier()?;
        std::thread::sleep(pause);
        let ck = ctx.new_checkpoint()?;
        ctx.report_with_checkpoint([("value", i as f64)], ck)?;
    }
    Ok(())
}

/// (node id, node rank, pid) that rank `rank` recorded.
fn node_of(run_dir: &Path, rank: usize) -> Result<(String, String, i32)> {
    let text = std::fs::read_to_string(run_dir.join(format!("rank_{rank}.node")))?;
    let parts: Vec<&str> = text.split(' ').collect();
    ensure!(parts.len() == 3, "marker {text:?}");
    Ok((parts[0].to_owned(), parts[1].to_owned(), parts[2].parse()?))
}

/// A simulated cluster, the real control plane on one machine: 20 node agents of 1 CPU, each
/// on a loopback address of its own, run a sweep of 200 short trials of one worker, from a
/// driver process of its own (`run_simulated_sweep_if_asked`). The first 20 trials wait for
/// each other (`meet_then_report`), so each node runs one of them whatever the machine's speed.
/// Every trial has its three rows, every node ran trials (the rows' `node_ip`), each agent
/// forked its workers from a fork server of the driver's binary, and after the sweep every
/// group is released, every CPU free, every node alive and no worker left on any; the driver
/// held no more open files at the end than a few (a hub started for each trial once kept three
/// sockets a trial, and 10,000 trials ran out of them).
pub fn a_simulated_cluster_of_20_nodes_runs_200_trials() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    let mut agents = Vec::new();
    for n in 1..=SIMULATED_NODES {
        let ip = format!("127.0.1.{n}");
        let mut command = cluster.node_command(&["--num-cpus", "1", "--node-ip", &ip], None);
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
        agents.push((ip, child.id()));
        cluster.nodes.push(child);
    }
    wait_for(Duration::from_secs(60), || Ok(cluster.alive_nodes()? == SIMULATED_NODES))?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("driver.log");
    let driver = Command::new(std::env::current_exe()?)
        .env(SIMULATED_ENV, format!("{} {}", cluster.address, dir.path().display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .status()?;
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    ensure!(driver.success(), "the driver failed: {}", said());
    let open_files = std::fs::read_to_string(dir.path().join("open_files"))?;
    let (before, after) = open_files.trim().split_once(' ').context("open files")?;
    let (before, after): (usize, usize) = (before.parse()?, after.parse()?);
    ensure!(after < before + 60, "the driver held {before} open files, {after} after 200 trials");
    let mut nodes_used = std::collections::BTreeSet::new();
    let mut trials = 0;
    for entry in std::fs::read_dir(dir.path().join("simulated"))? {
        let path = entry?.path().join("result.json");
        if !path.exists() {
            continue;
        }
        trials += 1;
        let text = std::fs::read_to_string(&path)?;
        let rows: Vec<serde_json::Value> =
            text.lines().map(serde_json::from_str).collect::<std::result::Result<_, _>>()?;
        let iterations: Vec<u64> =
            rows.iter().filter_map(|r| r["training_iteration"].as_u64()).collect();
        ensure!(iterations == [1, 2, 3], "{}: iterations {iterations:?}", path.display());
        nodes_used.extend(rows.iter().filter_map(|r| r["node_ip"].as_str().map(str::to_owned)));
    }
    ensure!(trials == 200, "{trials} trials have rows");
    let addresses: std::collections::BTreeSet<String> =
        agents.iter().map(|(ip, _)| ip.clone()).collect();
    ensure!(nodes_used == addresses, "trials ran on {nodes_used:?}");
    // The head's accounting: every group released, every CPU free, no node lost.
    wait_for(Duration::from_secs(20), || {
        let status = cluster.status()?;
        let nodes = status["nodes"].as_array().context("nodes")?;
        Ok(status["placement_groups"] == serde_json::json!([])
            && nodes.len() == SIMULATED_NODES
            && nodes.iter().all(|n| n["alive"] == true && n["free"] == n["total"]))
    })?;
    // Each agent's processes: its fork server and the spare it keeps forked ahead, no worker.
    for (ip, agent) in &agents {
        let children = children_of(*agent as i32);
        ensure!(children.len() == 1, "agent {ip}'s children: {children:?}");
        let spares = children_of(children[0]);
        ensure!(spares.len() <= 1, "agent {ip}'s fork server's children: {spares:?}");
    }
    Ok(())
}

const SIMULATED_NODES: usize = 20;

/// Set (to `HEAD_ADDRESS STORAGE_DIR`) in the environment of the simulated cluster's driver.
const SIMULATED_ENV: &str = "RTUNE_TEST_SIMULATED_SWEEP";

/// In the simulated cluster's driver process: runs its sweep, writes the open files it held
/// before and after into `STORAGE_DIR/open_files`, and exits (1 if the sweep failed).
pub fn run_simulated_sweep_if_asked() {
    let Ok(spec) = std::env::var(SIMULATED_ENV) else { return };
    let (address, storage) = spec.split_once(' ').expect("HEAD_ADDRESS STORAGE_DIR");
    let code = match simulated_sweep(address, Path::new(storage)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn simulated_sweep(address: &str, storage: &Path) -> Result<()> {
    let meeting = storage.join("meeting");
    std::fs::create_dir(&meeting)?;
    let trainer = TorchTrainer::new(meet_then_report).train_loop_config(
        Params::new()
            .with("meeting", meeting.display().to_string())
            .with("meet", SIMULATED_NODES as i64)
            .with("iterations", 3)
            .with("pause_ms", 30),
    );
    let space = rtune::search::SearchSpace::new().add("x", rtune::search::uniform(0.0, 1.0));
    let open_files = || std::fs::read_dir("/proc/self/fd").map(|d| d.count());
    let before = open_files()?;
    let grid = rtune::Tuner::new(trainer, space)
        .tune_config(
            rtune::TuneConfig::new().num_samples(200).max_concurrent_trials(SIMULATED_NODES),
        )
        .run_config(RunConfig::new("simulated").storage_path(storage).cluster(address, None))
        .fit()?;
    let after = open_files()?;
    ensure!(grid.trials.len() == 200, "{} trials", grid.trials.len());
    for trial in &grid.trials {
        ensure!(trial.status() == TrialStatus::Terminated, "{:?}", grid.errors());
    }
    std::fs::write(storage.join("open_files"), format!("{before} {after}"))?;
    Ok(())
}

/// Leaves a mark in the folder `meeting` and, while it holds fewer than `meet` marks, waits
/// for the others (at most a minute); then `iterations` reports, `pause_ms` apart.
fn meet_then_report(ctx: &mut TrainContext) -> Result<()> {
    let meeting = std::path::PathBuf::from(ctx.params().get::<String>("meeting")?);
    let meet = ctx.params().get::<usize>("meet")?;
    std::fs::write(meeting.join(std::process::id().to_string()), b"")?;
    let waited = std::time::Instant::now();
    while std::fs::read_dir(&meeting)?.count() < meet {
        ensure!(waited.elapsed() < Duration::from_secs(60), "the others never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pause = Duration::from_millis(ctx.params().get::<u64>("pause_ms")?);
    for i in 1..=ctx.params().get::<u64>("iterations")? {
        std::thread::sleep(pause);
        ctx.report([("value", i as f64)])?;
    }
    Ok(())
}

/// The processes whose parent is `pid`.
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).ok().is_some_and(|stat| {
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

pub fn strict_spread_puts_one_worker_on_each_node() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    cluster.add_node(&["--num-cpus", "1"])?;
    cluster.add_node(&["--num-cpus", "1"])?;
    let dir = tempfile::tempdir()?;
    let result = TorchTrainer::new(record_node)
        .train_loop_config(Params::new().with("iterations", 3).with("pause_ms", 0))
        .scaling(ScalingConfig::workers(2).placement_strategy(PlacementStrategy::StrictSpread))
        .run_config(cluster.run_config(dir.path(), "spread"))
        .fit()?;
    ensure!(result.metrics_history.len() == 3, "3 reports: {:?}", result.metrics_history);
    let (a, b) = (node_of(&result.path, 0)?, node_of(&result.path, 1)?);
    ensure!(a.0 != b.0 && !a.0.is_empty(), "ranks on distinct nodes: {a:?} {b:?}");
    ensure!((a.1.as_str(), b.1.as_str()) == ("0", "1"), "node ranks {a:?} {b:?}");
    // Worker output streams back through the head into the driver's run directory.
    let out = std::fs::read_to_string(result.path.join("logs/rank_1.stdout"))?;
    ensure!(out.contains(&format!("rank 1 starts on node {}", b.0)), "rank 1 stdout: {out:?}");
    // The group is released after the run.
    wait_for(Duration::from_secs(10), || {
        Ok(cluster.status()?["placement_groups"] == serde_json::json!([]))
    })?;
    Ok(())
}

pub fn killed_node_agent_fails_over_to_the_other_node() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    let pids = [cluster.add_node(&["--num-cpus", "2"])?, cluster.add_node(&["--num-cpus", "2"])?];
    let ids = cluster.node_ids()?;
    let dir = tempfile::tempdir()?;
    let run_dir = dir.path().join("failover");
    let trainer = TorchTrainer::new(record_node)
        .train_loop_config(Params::new().with("iterations", 12).with("pause_ms", 150))
        .scaling(ScalingConfig::workers(2).placement_strategy(PlacementStrategy::Pack))
        .run_config(
            cluster
                .run_config(dir.path(), "failover")
                .failure_config(FailureConfig::max_failures(3)),
        );
    let fit = std::thread::spawn(move || trainer.fit());
    // Once a few iterations are in, kill the agent of the node running the group.
    wait_for(Duration::from_secs(60), || {
        Ok(std::fs::read_to_string(run_dir.join("result.json"))
            .is_ok_and(|t| t.lines().count() >= 3))
    })?;
    let (victim, _, victim_pid) = node_of(&run_dir, 0)?;
    let index = ids.iter().position(|id| *id == victim).context("victim node")?;
    // SAFETY: kill(2) on a child we started.
    unsafe { libc::kill(pids[index] as i32, libc::SIGKILL) };
    let result = fit.join().map_err(|_| anyhow::anyhow!("fit panicked"))??;
    ensure!(result.failures.len() == 1, "one failure: {:?}", result.failures);
    ensure!(result.failures[0].message.contains("lost"), "{}", result.failures[0].message);
    let iterations: Vec<f64> =
        result.metrics_history.iter().map(|m| m["training_iteration"]).collect();
    ensure!(iterations == (1..=12).map(f64::from).collect::<Vec<_>>(), "{iterations:?}");
    let (after, _, _) = node_of(&result.path, 0)?;
    ensure!(after != victim, "the group moved off node {victim}");
    ensure!(
        !alive(victim_pid),
        "worker {victim_pid} outlived its node agent (state {:?})",
        process_state(victim_pid)
    );
    Ok(())
}

/// Each rank writes its node (`mark_node`), then trains a linear model data-parallel
/// (`DistributedModel`, which goes on in place in an elastic group): `iterations` reports of 4
/// steps, `pause_ms` before each step; each report has a checkpoint and the group's size.
fn elastic_steps(ctx: &mut TrainContext) -> Result<()> {
    use tch::nn::Module;
    mark_node(ctx)?;
    let iterations = ctx.params().get::<u64>("iterations")?;
    let pause = Duration::from_millis(ctx.params().get::<u64>("pause_ms")?);
    tch::manual_seed(ctx.world_rank() as i64);
    let vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let net = tch::nn::linear(vs.root(), 4, 1, Default::default());
    let mut sgd = rtune::worker::OptimizerSettings::sgd(0.01, 0.0).for_model(&vs)?;
    let ddp = ctx.prepare_model(&vs)?;
    for i in ctx.iteration() + 1..=iterations {
        for _ in 0..4 {
            std::thread::sleep(pause);
            let x = tch::Tensor::randn([8, 4], (tch::Kind::Float, tch::Device::Cpu));
            ddp.backward_step(&mut sgd, &net.forward(&x).square().mean(None))?;
        }
        let ck = ctx.new_checkpoint()?;
        ctx.report_with_checkpoint([("value", i as f64)], ck)?;
    }
    Ok(())
}

/// An elastic group (2 to 4 ranks) takes the 4 CPUs of 2 nodes; the agent of the node without
/// rank 0 is SIGKILLed (its workers die with it): the head keeps the group, and the 2 ranks
/// left re-form it in place and go on in the same attempt. A new node joins: the group grows
/// back to 4 ranks on it at a checkpoint. The run ends with no failure and every iteration
/// once; its rows say the group's size, and the resizes say why.
pub fn a_lost_node_shrinks_an_elastic_group_in_place_and_it_grows_back() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    let pids = [cluster.add_node(&["--num-cpus", "2"])?, cluster.add_node(&["--num-cpus", "2"])?];
    let ids = cluster.node_ids()?;
    let dir = tempfile::tempdir()?;
    let run_dir = dir.path().join("elastic");
    let trainer = TorchTrainer::new(elastic_steps)
        .train_loop_config(Params::new().with("iterations", 24).with("pause_ms", 100))
        .scaling(ScalingConfig::elastic(2, 4).placement_strategy(PlacementStrategy::Pack))
        .run_config(cluster.run_config(dir.path(), "elastic"));
    let fit = std::thread::spawn(move || trainer.fit());
    let rows = || -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(run_dir.join("result.json")).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    };
    wait_for(Duration::from_secs(60), || Ok(rows().len() >= 3))?;
    let (home, _, _) = node_of(&run_dir, 0)?;
    let mut victims = Vec::new();
    for rank in 1..4 {
        let (node, _, pid) = node_of(&run_dir, rank)?;
        if node != home {
            victims.push(pid);
        }
    }
    ensure!(victims.len() == 2, "2 ranks on the other node: {victims:?}");
    let index = ids.iter().position(|id| *id != home).context("the other node")?;
    // SAFETY: kill(2) on a child we started.
    unsafe { libc::kill(pids[index] as i32, libc::SIGKILL) };
    wait_for(Duration::from_secs(30), || Ok(rows().iter().any(|r| r["world_size"] == 2)))?;
    cluster.add_node(&["--num-cpus", "2"])?;
    let result = fit.join().map_err(|_| anyhow::anyhow!("fit panicked"))??;
    ensure!(result.failures.is_empty(), "resizes, not failures: {:?}", result.failures);
    let column = |key: &str| -> Vec<f64> {
        result.metrics_history.iter().map(|m| m.get(key).copied().unwrap_or(-1.0)).collect()
    };
    let iterations = column("training_iteration");
    ensure!(iterations == (1..=24).map(f64::from).collect::<Vec<_>>(), "{iterations:?}");
    let worlds = column("world_size");
    let shrunk = worlds.iter().position(|&w| w == 2.0).context(format!("never 2: {worlds:?}"))?;
    ensure!(worlds[0] == 4.0 && worlds[23] == 4.0, "4 ranks, 2, then 4 again: {worlds:?}");
    // Shrunk in the first attempt (an attempt's first row says which it is); grown in the next.
    let attempts = column("group_attempt");
    let began: Vec<(usize, f64)> =
        attempts.iter().copied().enumerate().filter(|(_, a)| *a >= 0.0).collect();
    ensure!(began.len() == 2 && began[0] == (0, 0.0) && began[1].0 > shrunk, "{attempts:?}");
    let said = crate::common::resizes_said(&result.path)?;
    ensure!(said.len() == 2, "{said:?}");
    ensure!(said[0].starts_with("4 -> 2: rank "), "{said:?}");
    ensure!(said[0].contains("was lost") && said[0].ends_with("(in place)"), "{said:?}");
    ensure!(said[1].starts_with("2 -> 4: room appeared on the cluster"), "{said:?}");
    for pid in victims {
        ensure!(!alive(pid), "worker {pid} outlived its node agent");
    }
    wait_for(Duration::from_secs(10), || {
        Ok(cluster.status()?["placement_groups"] == serde_json::json!([]))
    })?;
    Ok(())
}

pub fn nodes_reconnect_to_a_restarted_head() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    cluster.add_node(&["--num-cpus", "2"])?;
    cluster.restart_head()?;
    wait_for(Duration::from_secs(20), || Ok(cluster.alive_nodes().unwrap_or(0) == 1))?;
    let status = cluster.status()?;
    ensure!(status["nodes"][0]["total"]["CPU"] == 2, "{status}");
    Ok(())
}

/// Duration and amount flags that are not positive finite numbers are usage errors naming the
/// flag (`inf` used to panic in `Duration::from_secs_f64`).
pub fn bad_cli_numbers_are_named_not_panics() -> Result<()> {
    for (args, flag) in [
        (&["head", "--port", "0", "--heartbeat-timeout", "inf"][..], "--heartbeat-timeout"),
        (&["head", "--port", "0", "--heartbeat-timeout=-1"], "--heartbeat-timeout"),
        (&["head", "--port", "0", "--heartbeat-timeout", "NaN"], "--heartbeat-timeout"),
        (&["node", "--address", "127.0.0.1:1", "--num-cpus", "inf"], "--num-cpus"),
        (&["node", "--address", "127.0.0.1:1", "--resources", "tpu=nan"], "--resources"),
    ] {
        let out = Command::new(RTUNE).args(args).output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "{args:?} succeeded");
        ensure!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        ensure!(stderr.contains(flag), "{args:?} does not name {flag}: {stderr}");
    }
    Ok(())
}

/// Like `record_node`, but once the test drops a `hang` file into the run directory, rank 0 of
/// the first attempt stops taking part (a worker that would never notice a lost peer, as behind
/// a host that died without closing its sockets): only a kill ends it.
fn hang_on_request(ctx: &mut TrainContext) -> Result<()> {
    let node = std::env::var("RTUNE_NODE_ID").unwrap_or_default();
    let marker = ctx.run_dir().join(format!("rank_{}.node", ctx.world_rank()));
    std::fs::write(marker, format!("{node} {} {}", ctx.node_rank(), std::process::id()))?;
    let first_attempt = ctx.checkpoint().is_none();
    for i in ctx.iteration() + 1..=12 {
        if first_attempt && ctx.world_rank() == 0 && ctx.run_dir().join("hang").exists() {
            std::fs::write(ctx.run_dir().join("hanging"), b"")?;
            loop {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        let ck = ctx.new_checkpoint()?;
        ctx.report_with_checkpoint([("value", i as f64)], ck)?;
    }
    Ok(())
}

fn free_cpu(status: &serde_json::Value, node: &str) -> Result<f64> {
    let id: u64 = node.parse()?;
    let nodes = status["nodes"].as_array().context("nodes")?;
    let n = nodes.iter().find(|n| n["id"] == id).context("node in status")?;
    n["free"]["CPU"].as_f64().context("free CPU")
}

/// A 2-worker group spread over 2 nodes loses one node: its surviving worker on the other node
/// is killed, its CPU comes back only once that worker has exited (never shown free while it
/// runs), and the retry waits for the cluster to grow again instead of failing as a config error.
pub fn node_loss_kills_survivors_and_the_retry_waits_for_capacity() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    let pids = [cluster.add_node(&["--num-cpus", "1"])?, cluster.add_node(&["--num-cpus", "1"])?];
    let ids = cluster.node_ids()?;
    let dir = tempfile::tempdir()?;
    let run_dir = dir.path().join("shrunk");
    let trainer = TorchTrainer::new(hang_on_request)
        .scaling(ScalingConfig::workers(2).placement_strategy(PlacementStrategy::StrictSpread))
        .run_config(
            cluster.run_config(dir.path(), "shrunk").failure_config(FailureConfig::max_failures(1)),
        );
    let fit = std::thread::spawn(move || trainer.fit());
    wait_for(Duration::from_secs(60), || {
        Ok(std::fs::read_to_string(run_dir.join("result.json"))
            .is_ok_and(|t| t.lines().count() >= 3))
    })?;
    std::fs::write(run_dir.join("hang"), b"")?;
    wait_for(Duration::from_secs(30), || Ok(run_dir.join("hanging").exists()))?;
    let (survivor_node, _, survivor) = node_of(&run_dir, 0)?;
    let (victim_node, _, _) = node_of(&run_dir, 1)?;
    let victim = ids.iter().position(|id| *id == victim_node).context("victim node")?;
    // SAFETY: kill(2) on a child we started.
    unsafe { libc::kill(pids[victim] as i32, libc::SIGKILL) };

    // The survivor never notices by itself; the head must kill it, and its CPU stays held
    // until it has exited. (Status first: if the worker is alive after, it was alive then.)
    wait_for(Duration::from_secs(30), || {
        let status = cluster.status()?;
        if !alive(survivor) {
            return Ok(true);
        }
        let free = free_cpu(&status, &survivor_node)?;
        ensure!(
            free == 0.0,
            "node {survivor_node} shows {free} CPU free while worker {survivor} runs"
        );
        Ok(false)
    })
    .context("the surviving worker was not killed")?;

    // The retry cannot fit one node of 1 CPU: it waits (the run does not fail) until a node
    // joins, then resumes from the last checkpoint.
    std::thread::sleep(Duration::from_secs(1));
    ensure!(!fit.is_finished(), "the retry gave up instead of waiting for capacity");
    cluster.add_node(&["--num-cpus", "1"])?;
    let result = fit.join().map_err(|_| anyhow::anyhow!("fit panicked"))??;
    ensure!(result.failures.len() == 1, "one failure: {:?}", result.failures);
    ensure!(result.failures[0].message.contains("lost"), "{}", result.failures[0].message);
    let iterations: Vec<f64> =
        result.metrics_history.iter().map(|m| m["training_iteration"]).collect();
    ensure!(iterations == (1..=12).map(f64::from).collect::<Vec<_>>(), "{iterations:?}");
    Ok(())
}

const DRIVER_ENV: &str = "RTUNE_TEST_DRIVER";

/// In a child started by `dead_driver_frees_its_placement_group` (the variable holds
/// `HEAD_ADDRESS STORAGE_DIR`): run a training on that cluster that never ends, and never
/// return. Elsewhere: return at once.
pub fn run_driver_if_asked() {
    let Ok(spec) = std::env::var(DRIVER_ENV) else { return };
    let (address, storage) = spec.split_once(' ').expect("HEAD_ADDRESS STORAGE_DIR");
    let result = TorchTrainer::new(record_node)
        .train_loop_config(Params::new().with("iterations", 1_000_000).with("pause_ms", 100))
        .scaling(ScalingConfig::workers(2))
        .run_config(RunConfig::new("forever").storage_path(storage).cluster(address, None))
        .fit();
    eprintln!("driver ended: {result:?}");
    std::process::exit(1);
}

/// A driver SIGKILLed mid-run holds nothing: the head sees its lease end, kills its workers and
/// frees its placement group (which used to stay reserved until the head restarted).
pub fn dead_driver_frees_its_placement_group() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    cluster.add_node(&["--num-cpus", "2"])?;
    let dir = tempfile::tempdir()?;
    // The driver's log, shown if it never reports.
    let log = dir.path().join("driver.log");
    let mut driver = Command::new(std::env::current_exe()?)
        .env(DRIVER_ENV, format!("{} {}", cluster.address, dir.path().display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let run_dir = dir.path().join("forever");
    wait_for(Duration::from_secs(60), || {
        Ok(std::fs::read_to_string(run_dir.join("result.json")).is_ok_and(|t| !t.is_empty()))
    })
    .with_context(|| {
        format!(
            "the driver never reported; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    })?;
    let workers = [node_of(&run_dir, 0)?.2, node_of(&run_dir, 1)?.2];
    let groups = cluster.status()?["placement_groups"].as_array().map_or(0, Vec::len);
    ensure!(groups == 1, "the driver holds one placement group, status shows {groups}");

    // Meanwhile another run cannot get the node: it gives up after its placement timeout,
    // saying what it waited for and who holds the cluster.
    let err = TorchTrainer::new(record_node)
        .train_loop_config(Params::new().with("iterations", 1).with("pause_ms", 0))
        .scaling(ScalingConfig::workers(1))
        .run_config(
            cluster.run_config(dir.path(), "starved").placement_timeout(Duration::from_secs(3)),
        )
        .fit()
        .err()
        .context("a run on a full cluster must time out")?
        .to_string();
    ensure!(err.contains("no placement") && err.contains("within 3s"), "{err}");
    ensure!(
        err.contains("0 of 2 CPU") && err.contains("held by") && err.contains("forever"),
        "{err}"
    );

    driver.kill()?;
    driver.wait()?;
    wait_for(Duration::from_secs(20), || {
        let status = cluster.status()?;
        let node = &status["nodes"][0];
        Ok(status["placement_groups"] == serde_json::json!([]) && node["free"] == node["total"])
    })
    .context("the dead driver's placement group was not freed")?;
    for pid in workers {
        wait_for(Duration::from_secs(20), || Ok(!alive(pid)))
            .with_context(|| format!("worker {pid} outlived its driver"))?;
    }
    Ok(())
}

/// `rtune predict --workers` on a cluster (`RTUNE_ADDRESS`, as `rtune slurm run` sets it): 3
/// workers of 1 CPU, more than this machine's pool of 2 holds, on two nodes of 2; the answers
/// are one process's.
pub fn batch_prediction_runs_on_the_cluster() -> Result<()> {
    let mut cluster = Cluster::start(None)?;
    cluster.add_node(&["--num-cpus", "2"])?;
    cluster.add_node(&["--num-cpus", "2"])?;
    let dir = tempfile::tempdir()?;
    let model = crate::predict::digits_export(dir.path())?;
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv.gz");
    let predict = |output: &Path, more: &[&str]| -> Result<String> {
        let (m, i, o) =
            (model.to_str().unwrap(), input.to_str().unwrap(), output.to_str().unwrap());
        let args = ["predict", "--model", m, "--input", i, "--output", o, "--no-header"];
        let out = Command::new(RTUNE)
            .args([&args[..], more].concat())
            .env(rtune::config::ADDRESS_ENV, &cluster.address)
            .output()?;
        ensure!(out.status.success(), "{}", crate::common::text(&out));
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let one = dir.path().join("one.parquet");
    predict(&one, &[])?;
    let across = dir.path().join("across.parquet");
    let said = predict(&across, &["--workers", "3", "--part-rows", "100", "--batch-rows", "50"])?;
    ensure!(said.contains("predicted 1797 rows") && said.contains("on 3 workers"), "{said}");
    crate::predict::same_predictions(&across, &one)?;
    // The group is released after the run.
    wait_for(Duration::from_secs(10), || {
        Ok(cluster.status()?["placement_groups"] == serde_json::json!([]))
    })?;
    Ok(())
}
