//! `rtune slurm run|resume|node`: a sweep on the cluster of a Slurm job, started, bounded and
//! ended by the job.
//!
//! `rtune slurm run FILE` runs on the batch host of a job (see `examples/slurm/sweep.sbatch`):
//! it serves a head in its own process, starts one node agent on every allocated node with one
//! `srun` step (`rtune slurm node`), waits until all of them have joined, runs the sweep on
//! them, and ends the step when the sweep ends. Each agent offers what Slurm allocated on its
//! node, never the whole machine (see `cluster::slurm`). The cluster token is made per job and
//! reaches the agents through the step's environment only.
//!
//! `scancel`, the job's time limit or a node failure send SIGTERM to every process of the
//! job. The driver stops the sweep resumable and records it; the agents drain (their workers
//! ignore the SIGTERM and are stopped by the driver) and exit once their workers are gone.
//! `rtune slurm resume DIR` in a new job goes on with it; a requeued job (`sbatch --requeue`,
//! or `scontrol requeue`) that runs `rtune slurm run` again with the same experiment name
//! resumes it by itself.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::args::ClusterArgs;
use anyhow::{Context, Result, anyhow};

use rtune_driver::cluster::pool::PoolStatus;
use rtune_driver::cluster::slurm::{self, Allocation, NodeAllocation};
use rtune_driver::cluster::{client, head, node};

/// The cluster of one job: the head (served here) and the `srun` step of its node agents.
pub(super) struct JobCluster {
    /// The head's address as the nodes reach it, HOST:PORT.
    pub address: String,
    /// Made for this job; never printed.
    pub token: String,
    /// The head as this process reaches it (loopback).
    local: String,
    agents: Option<Child>,
    /// Every agent joined: they end by themselves with the head.
    joined: bool,
    /// The head's server; dropping the runtime ends it and the agents' sessions with it.
    head: Option<(head::HeadHandle, tokio::runtime::Runtime)>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl JobCluster {
    /// Serves the head, starts the agents and waits for every allocated node to join.
    pub(super) fn start(args: &ClusterArgs) -> Result<JobCluster> {
        let allocation = Allocation::from_env(env)?;
        let head_ip = match &args.head_ip {
            Some(ip) => ip.clone(),
            None => env("SLURMD_NODENAME")
                .and_then(|name| slurm::node_addr(&name))
                .unwrap_or_else(rtune_driver::sys::hostname),
        };
        let token = rtune_driver::cluster::new_token();
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let config = head::HeadConfig {
            bind: ([0, 0, 0, 0], args.port).into(),
            token: Some(token.clone()),
            heartbeat_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(1),
        };
        let handle = runtime.block_on(head::serve(config))?;
        // The head's own port, unless the address the nodes reach it by names one (a
        // forwarded port).
        let names_port = head_ip.parse::<std::net::SocketAddr>().is_ok()
            || head_ip
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.contains(':') && port.parse::<u16>().is_ok());
        let address = if names_port {
            head_ip.clone()
        } else {
            format!("{head_ip}:{}", handle.address.port())
        };
        let agents = start_agents(&allocation, &address, &token)?;
        let local = format!("127.0.0.1:{}", handle.address.port());
        let mut cluster = JobCluster {
            address,
            token,
            local,
            agents: Some(agents),
            joined: false,
            head: Some((handle, runtime)),
        };
        println!(
            "slurm job {}: head at {}, starting a node agent on {}",
            allocation.job_id,
            cluster.address,
            allocation.nodes.join(", ")
        );
        match cluster.wait_for(&allocation.nodes, args.join_timeout) {
            Ok(status) => {
                cluster.joined = true;
                println!("slurm: {}", joined_line(&status));
                Ok(cluster)
            }
            Err(e) => {
                cluster.stop();
                Err(e)
            }
        }
    }

    /// Where `rtune run`/`resume` run the sweep: on this cluster. `resume_existing`: a `run` of
    /// an experiment that exists (a requeued job's) resumes it.
    pub(super) fn target(&self, resume_existing: bool) -> super::Target {
        super::Target { cluster: Some((self.address.clone(), self.token.clone())), resume_existing }
    }

    /// Waits until every node of `names` has an agent alive, the step ends, or `timeout`.
    fn wait_for(&mut self, names: &[String], timeout: Duration) -> Result<PoolStatus> {
        let began = Instant::now();
        let (address, token) = (self.local.clone(), self.token.clone());
        let mut client = None;
        loop {
            if let Some(child) = &mut self.agents
                && let Some(status) = child.try_wait()?
            {
                return Err(anyhow!(
                    "the srun step of the node agents ended ({status}) before every node joined; \
                     its output is in the job's output file"
                ));
            }
            let (_, runtime) = self.head.as_ref().expect("the head serves until stop");
            let status = runtime.block_on(async {
                if client.is_none() {
                    client = Some(client::connect_head(&address, Some(&token)).await?);
                }
                client::status(client.as_mut().expect("connected above")).await
            });
            let missing = match &status {
                Ok(status) => missing_nodes(status, names),
                Err(_) => names.to_vec(),
            };
            if missing.is_empty() {
                return Ok(status?);
            }
            if began.elapsed() >= timeout {
                let why = status.err().map_or(String::new(), |e| format!(" (the head: {e})"));
                return Err(anyhow!(
                    "{} of {} allocated node(s) never joined within {:?}: {}{why}. Each should run \
                     `rtune slurm node` from the srun step; see the job's output for their \
                     errors, and --join-timeout to wait longer",
                    missing.len(),
                    names.len(),
                    timeout,
                    missing.join(", ")
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Ends the head, and with it the agents' sessions: each agent then exits by itself (no
    /// worker is left to drain) and the srun step ends. One that does not, or agents that never
    /// all joined, are ended by SIGTERM to srun, then SIGKILL.
    pub(super) fn stop(&mut self) {
        if let Some((handle, runtime)) = self.head.take() {
            drop(handle);
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
        let Some(mut child) = self.agents.take() else { return };
        if self.joined {
            if ended_within(&mut child, Duration::from_secs(10)) {
                return;
            }
            tracing::warn!("the node agents' srun step did not end with the head: SIGTERM");
        }
        // SAFETY: kill() on our own child's pid (srun passes SIGTERM on to its tasks).
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        if !ended_within(&mut child, Duration::from_secs(30)) {
            tracing::warn!("the node agents' srun step did not end within 30 s: killing it");
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for JobCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `child` exits within `time`.
fn ended_within(child: &mut Child, time: Duration) -> bool {
    let deadline = Instant::now() + time;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// One `srun` step: one `rtune slurm node` task on every node of the job.
fn start_agents(allocation: &Allocation, address: &str, token: &str) -> Result<Child> {
    let exe = std::env::current_exe().context("this program's path")?;
    let nodes = allocation.nodes.len().to_string();
    let mut command = Command::new("srun");
    command
        .args(["--nodes", &nodes, "--ntasks", &nodes, "--ntasks-per-node", "1"])
        // The agents share the job's CPUs with what runs on them; each offers its node's.
        .args(["--overlap", "--cpu-bind=none", "--kill-on-bad-exit=0", "--job-name=rtune-nodes"])
        .arg(exe)
        .args(["slurm", "node", "--address", address])
        .env(rtune_driver::config::TOKEN_ENV, token)
        .stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe. The step ends with this process (SIGTERM to srun
    // ends its tasks), even if it is killed; this is the main thread, which lives as long.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    command.spawn().context("cannot run srun (is this a Slurm job, with srun on PATH?)")
}

/// The nodes of `names` with no live agent in `status`.
fn missing_nodes(status: &PoolStatus, names: &[String]) -> Vec<String> {
    let joined = |name: &String| {
        let key = slurm::node_resource(name);
        status.nodes.iter().any(|n| n.alive && n.total.custom.contains_key(&key))
    };
    names.iter().filter(|n| !joined(n)).cloned().collect()
}

/// `2 node agents joined: n1 (2 CPUs, 0 GPUs), n2 (...)`.
fn joined_line(status: &PoolStatus) -> String {
    let nodes: Vec<String> = status
        .nodes
        .iter()
        .filter(|n| n.alive)
        .map(|n| {
            let name = n.total.custom.keys().find_map(|k| slurm::node_of_resource(k));
            format!(
                "{} ({} CPUs, {} GPUs, at {})",
                name.unwrap_or("?"),
                n.total.cpu,
                n.total.gpu,
                n.address
            )
        })
        .collect();
    format!("{} node agent(s) joined: {}", nodes.len(), nodes.join(", "))
}

/// `rtune slurm node`: this node's agent, as a task of the job's srun step.
pub(super) fn node(address: String, node_ip: Option<String>, drain_grace: Duration) -> Result<()> {
    let allocation = NodeAllocation::from_env(env, slurm::affinity_cpus())?;
    let token =
        env(rtune_driver::config::TOKEN_ENV).filter(|t| !t.is_empty()).ok_or_else(|| {
            anyhow!(
                "{} is not set: `rtune slurm run` starts this agent",
                rtune_driver::config::TOKEN_ENV
            )
        })?;
    let ip = node_ip
        .or_else(|| slurm::node_addr(&allocation.name))
        .unwrap_or_else(rtune_driver::sys::hostname);
    let mut config = node::NodeConfig::new(address, Some(token), allocation.spec(ip));
    config.once = true;
    config.workers_ignore_sigterm = true;
    config.drain_grace = drain_grace;
    if !allocation.gpus.is_empty() {
        config.devices = Some(allocation.gpus.clone());
    }
    let (drain, drained) = tokio::sync::watch::channel(false);
    config.drain = Some(drained);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let span = tracing::info_span!("node", name = %allocation.name);
    span.in_scope(|| {
        tracing::info!(
            "offering {} CPUs, GPUs [{}], {} MB of memory",
            allocation.cpus,
            allocation.gpus.join(","),
            allocation.memory_bytes.map_or("unbounded".into(), |b| (b >> 20).to_string())
        )
    });
    let agent = async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::info!("asked to end: draining");
            let _ = drain.send(true);
        });
        node::run(config).await.map_err(anyhow::Error::from)
    };
    runtime.block_on(tracing::Instrument::instrument(agent, span))
}
