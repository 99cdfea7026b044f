//! The `rtune` command: cluster commands (`head`, `node`, `status`) today; sweep commands (run,
//! watch, ls, show, export, predict) land here as their issues are built. Like every rtune
//! binary it can also run as a worker process.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use rtune::cluster::{self, client, head, node, pool};

/// rtune: hyperparameter sweeps of distributed libtorch training (Ray Tune + Ray Train in Rust).
#[derive(Debug, Parser)]
#[command(name = "rtune", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a cluster: the resource pool that drivers reserve worker groups from.
    Head {
        #[arg(long, default_value_t = 6380)]
        port: u16,
        /// Address to listen on. Anything but loopback requires a cluster token.
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// The cluster token; generated and printed once when binding beyond loopback.
        #[arg(long, env = "RTUNE_TOKEN")]
        token: Option<String>,
        /// Seconds of silence after which a node is dead.
        #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
        heartbeat_timeout: Duration,
    },
    /// Offer this machine to a head and run worker processes on its command.
    Node {
        /// The head, HOST:PORT.
        #[arg(long)]
        address: String,
        #[arg(long, value_parser = amount)]
        num_cpus: Option<f64>,
        #[arg(long)]
        num_gpus: Option<u32>,
        /// Custom resources, e.g. `--resources tpu=2,ssd=1`.
        #[arg(long, default_value = "")]
        resources: String,
        /// Where this node's workers listen (their address as seen by other nodes).
        #[arg(long, default_value = "127.0.0.1")]
        node_ip: String,
        #[arg(long, env = "RTUNE_TOKEN")]
        token: Option<String>,
    },
    /// Show a cluster's nodes (total and free resources) and its placement groups.
    Status {
        #[arg(long, env = "RTUNE_ADDRESS")]
        address: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        #[arg(long, env = "RTUNE_TOKEN")]
        token: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
}

fn main() {
    rtune::init();
    if let Err(e) = run(Cli::parse()) {
        eprintln!("rtune: {e:#}");
        std::process::exit(1);
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Head { port, bind, token, heartbeat_timeout } => {
            let token = match token {
                Some(t) => Some(t),
                None if !bind.is_loopback() => {
                    let t = cluster::new_token();
                    println!(
                        "cluster token (give it to nodes and drivers as --token or RTUNE_TOKEN): {t}"
                    );
                    Some(t)
                }
                None => None,
            };
            let config = head::HeadConfig {
                bind: SocketAddr::new(bind, port),
                token,
                heartbeat_timeout,
                heartbeat_interval: (heartbeat_timeout / 5).min(Duration::from_secs(1)),
            };
            runtime()?.block_on(async {
                let handle = head::serve(config).await?;
                println!("rtune head listening on {}", handle.address);
                tokio::signal::ctrl_c().await?;
                Ok(())
            })
        }
        Command::Node { address, num_cpus, num_gpus, resources, node_ip, token } => {
            let mut spec = pool::NodeSpec::detect_local();
            spec.address = node_ip;
            if let Some(cpus) = num_cpus {
                spec = spec.cpus(cpus);
            }
            if let Some(gpus) = num_gpus {
                spec = spec.gpus(gpus);
            }
            for (name, amount) in parse_resources(&resources)? {
                spec = spec.custom(name, amount);
            }
            let config =
                node::NodeConfig { head: address, token, spec, retry: Duration::from_millis(500) };
            runtime()?.block_on(node::run(config))?;
            Ok(())
        }
        Command::Status { address, format, token } => {
            let status = runtime()?.block_on(async {
                let mut c = client::connect_head(&address, token.as_deref()).await?;
                client::status(&mut c).await
            })?;
            match format {
                Format::Json => println!("{}", serde_json::to_string_pretty(&status)?),
                Format::Table => print_table(&status),
            }
            Ok(())
        }
    }
}

fn parse_resources(text: &str) -> Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, amount) = pair
            .split_once('=')
            .with_context(|| format!("--resources: {pair:?} is not NAME=AMOUNT (e.g. tpu=2)"))?;
        let amount = self::amount(amount.trim())
            .map_err(|e| anyhow::anyhow!("--resources: {name}={amount:?}: {e}"))?;
        out.insert(name.trim().to_owned(), amount);
    }
    Ok(out)
}

/// A duration flag: a positive, finite number of seconds (clap names the flag in its error).
fn seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("{text} is not a positive, finite number of seconds (e.g. 5 or 0.5)"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{text} seconds is too long"))
}

/// A resource amount: a finite number ≥ 0.
fn amount(text: &str) -> Result<f64, String> {
    let x: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if !(x.is_finite() && x >= 0.0) {
        return Err(format!("{text} is not a finite amount ≥ 0"));
    }
    Ok(x)
}

fn print_table(status: &pool::PoolStatus) {
    println!(
        "{:<6} {:<22} {:<6} {:>10} {:>10} {:>10} {:>10}",
        "NODE", "ADDRESS", "ALIVE", "CPU", "CPU free", "GPU", "GPU free"
    );
    for n in &status.nodes {
        println!(
            "{:<6} {:<22} {:<6} {:>10} {:>10} {:>10} {:>10}",
            n.id.to_string(),
            n.address,
            n.alive,
            n.total.cpu,
            n.free.cpu,
            n.total.gpu,
            n.free.gpu
        );
    }
    println!("{} placement group(s)", status.groups.len());
    for g in &status.groups {
        println!("  {}", serde_json::to_string(g).unwrap_or_default());
    }
}
