//! The cluster commands that need libtorch's program: `rtune head`, `rtune node` (`rtune
//! status` is `crate::commands`').

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};

use rtune_driver::cluster::{self, head, node, pool};
use rtune_driver::monitor::Monitor;

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

pub(super) fn head(
    port: u16,
    bind: std::net::IpAddr,
    token: Option<String>,
    heartbeat_timeout: Duration,
    metrics: &str,
) -> Result<()> {
    let token = match token {
        Some(t) => Some(t),
        None if !bind.is_loopback() => {
            let t = cluster::new_token();
            println!("cluster token (give it to nodes and drivers as --token or RTUNE_TOKEN): {t}");
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
    let check = rtune_driver::monitor::check_address(metrics, config.token.as_deref());
    check.map_err(|why| anyhow::anyhow!("invalid `--metrics`: {why}"))?;
    let runtime = runtime()?;
    runtime.block_on(async {
        let handle = head::serve(config.clone()).await?;
        println!("rtune head listening on {}", handle.address);
        // The cluster's pool, for Prometheus: what its nodes offer and what trials hold.
        let pool = handle.pool.clone();
        let monitor = Monitor::new(move || pool.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let server =
            rtune_driver::monitor::serve(monitor, metrics, config.token.clone(), runtime.handle())?;
        handle.metrics_served_at(server.address());
        // On stderr: stdout's first line is the head's address, which scripts read.
        let url = rtune_driver::monitor::url(server.address());
        eprintln!("rtune head: metrics for Prometheus at {url}");
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}

pub(super) fn node(
    address: String,
    num_cpus: Option<f64>,
    num_gpus: Option<u32>,
    resources: String,
    node_ip: String,
    token: Option<String>,
) -> Result<()> {
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
    let config = node::NodeConfig::new(address, token, spec);
    runtime()?.block_on(node::run(config))?;
    Ok(())
}

fn parse_resources(text: &str) -> Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, amount) = pair
            .split_once('=')
            .with_context(|| format!("--resources: {pair:?} is not NAME=AMOUNT (e.g. tpu=2)"))?;
        let amount = crate::args::amount(amount.trim())
            .map_err(|e| anyhow::anyhow!("--resources: {name}={amount:?}: {e}"))?;
        out.insert(name.trim().to_owned(), amount);
    }
    Ok(out)
}
