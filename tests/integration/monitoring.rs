//! The sweep's metrics endpoint, as Prometheus sees it: a real `prometheus` server (Debian's;
//! `make test` installs it) scrapes a running sweep, and its query API answers what the sweep
//! is doing, and every query of the Grafana dashboard; `promtool check metrics` accepts the
//! endpoint's answer; an endpoint off loopback needs the cluster token; a cluster's head
//! serves its pool.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::cli::{RTUNE, rtune};
use crate::common::{Killed, http_get, text, wait_for};

/// Two quick trials and one that sleeps 30 s before its first report: while it sleeps, the
/// sweep holds still (2 TERMINATED with 3 results each, 1 RUNNING).
const SWEEP: &str = r#"
name = "watched"
storage_path = "{storage}"

[trainable]
builtin = "synthetic-curve"

[param_space]
sleep_s = { grid_search = [0.0, 0.0, 30.0] }
iterations = 3

[tune]
metric = "score"
mode = "max"
max_concurrent_trials = 3
"#;

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Prometheus on 127.0.0.1, scraping `target` every second, with its data in `dir`.
fn prometheus(dir: &Path, target: &str) -> Result<(Killed, u16)> {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: rtune\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )?;
    let port = free_port()?;
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("prometheus (make test installs Debian's prometheus package)")?;
    let server = Killed(child);
    wait_for(Duration::from_secs(60), || {
        Ok(http_get(port, "/-/ready", None).is_ok_and(|(s, _)| s.contains("200")))
    })?;
    Ok((server, port))
}

/// The series Prometheus' query API answers `query` with (an instant vector).
fn series(port: u16, query: &str) -> Result<Vec<serde_json::Value>> {
    let encoded: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = http_get(port, &format!("/api/v1/query?query={encoded}"), None)?;
    ensure!(status.contains("200"), "{status}: {body}");
    let json: serde_json::Value = serde_json::from_str(&body)?;
    ensure!(json["status"] == "success", "{query}: {body}");
    Ok(json["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The value of the one sample Prometheus answers `query` with; None for none.
fn query(port: u16, query: &str) -> Result<Option<f64>> {
    match series(port, query)?.as_slice() {
        [] => Ok(None),
        [one] => Ok(one["value"][1].as_str().and_then(|v| v.parse().ok())),
        more => bail!("{query}: more than one series: {more:?}"),
    }
}

/// Prometheus scrapes a running sweep: trials by status, the results reported and the best
/// score are what the sweep's files say; `rtune show` names the endpoint; `promtool` accepts
/// its answer.
pub fn prometheus_scrapes_a_running_sweep() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let file = dir.path().join("sweep.toml");
    std::fs::write(&file, SWEEP.replace("{storage}", &storage.display().to_string()))?;
    let port = free_port()?;
    let target = format!("127.0.0.1:{port}");
    let (_prometheus, prometheus_port) = prometheus(dir.path(), &target)?;
    let sweep = Killed(
        Command::new(RTUNE)
            .args(["run", file.to_str().unwrap(), "--no-tui", "--metrics", &target])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?,
    );
    let experiment = storage.join("watched");
    // The two quick trials end; the third sleeps.
    let settled = || -> Result<bool> {
        Ok(query(prometheus_port, "rtune_trials{status=\"TERMINATED\"}")? == Some(2.0)
            && query(prometheus_port, "rtune_trials{status=\"RUNNING\"}")? == Some(1.0))
    };
    if let Err(e) = wait_for(Duration::from_secs(60), settled) {
        let (_, body) = http_get(port, "/metrics", None).unwrap_or_default();
        bail!(
            "{e}: Prometheus never saw 2 trials TERMINATED and 1 RUNNING; the endpoint says:\n{body}"
        );
    }
    let grid = rtune::tune::ResultGrid::from_path(&experiment)?;
    let reported: usize = grid.trials.iter().map(|t| t.history().len()).sum();
    ensure!(reported == 6, "the files hold {reported} results");
    ensure!(query(prometheus_port, "rtune_results_total")? == Some(6.0), "results");
    ensure!(query(prometheus_port, "rtune_trials{status=\"PENDING\"}")? == Some(0.0), "pending");
    // Each result carried a checkpoint. The trials' group starts ride on their first results:
    // the ended trials' went with them, and the third has not reported yet.
    let checkpoints = query(prometheus_port, "rtune_checkpoints_total")?;
    ensure!(checkpoints == Some(6.0), "checkpoints {checkpoints:?}");
    let bytes = query(prometheus_port, "rtune_checkpoint_bytes_total")?;
    ensure!(bytes.is_some_and(|b| b > 0.0), "checkpoint bytes {bytes:?}");
    let starts = series(prometheus_port, "rtune_trial_group_start_seconds")?;
    ensure!(starts.is_empty(), "group starts of trials that ended: {starts:?}");
    let best =
        grid.trials.iter().flat_map(|t| t.history()).map(|r| r["score"]).fold(f64::MIN, f64::max);
    let seen = query(prometheus_port, "rtune_best_metric{metric=\"score\",mode=\"max\"}")?;
    ensure!(seen == Some(best), "best score: Prometheus {seen:?}, the files {best}");
    // The pool of this machine: its CPUs, of which the running trial holds one.
    let cpus = query(prometheus_port, "sum(rtune_pool_capacity{resource=\"CPU\"})")?;
    ensure!(cpus.is_some_and(|c| c >= 1.0), "pool capacity {cpus:?}");
    let used = query(prometheus_port, "sum(rtune_pool_used{resource=\"CPU\"})")?;
    ensure!(used == Some(1.0), "pool use {used:?}");
    // And its memory, as the machine has it.
    let memory = query(prometheus_port, "sum(rtune_pool_memory_capacity_bytes)")?;
    ensure!(memory.is_some_and(|m| m > (64 << 20) as f64), "pool memory {memory:?}");
    // What promtool says of the endpoint's answer.
    let (_, body) = http_get(port, "/metrics", None)?;
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    promtool.stdin.take().context("stdin")?.write_all(body.as_bytes())?;
    let checked = promtool.wait_with_output()?;
    ensure!(checked.status.success(), "promtool check metrics: {}\n{body}", text(&checked));
    // Every query of the Grafana dashboard (deploy/grafana/rtune.json) is one Prometheus
    // reads, naming only series the endpoint has, and answers with data; the per-rank and
    // per-trial ones have data once a running trial reported (none has yet: the third sleeps).
    let (_, endpoint) = http_get(port, "/metrics", None)?;
    let families: Vec<&str> =
        endpoint.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../deploy/grafana/rtune.json"))?;
    let panels = dashboard["panels"].as_array().context("panels")?;
    let exprs: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(|e| e.replace("$job", ".*")))
        .collect();
    ensure!(exprs.len() >= panels.len(), "a panel without a query");
    for expr in &exprs {
        // Which series the per-rank and per-trial queries name is checked against a monitor
        // that has them (`monitor::tests`): the endpoint has none yet.
        if expr.contains("rtune_rank_") || expr.contains("rtune_trial_") {
            series(prometheus_port, expr).with_context(|| format!("the dashboard's {expr}"))?;
            continue;
        }
        for name in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let Some(name) = name.strip_prefix("rtune_").map(|_| name) else { continue };
            let family = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .fold(name, |n, suffix| n.strip_suffix(suffix).unwrap_or(n));
            let known = families.contains(&name) || families.contains(&family);
            ensure!(known, "the dashboard's {name} is not the endpoint's");
        }
        let answered =
            wait_for(Duration::from_secs(30), || Ok(!series(prometheus_port, expr)?.is_empty()));
        ensure!(answered.is_ok(), "the dashboard's {expr} has no data");
    }
    // `rtune show` names the endpoint of the running sweep.
    let out = rtune(&["show", experiment.to_str().unwrap()])?;
    let wanted = format!("metrics for Prometheus: http://{target}/metrics");
    ensure!(String::from_utf8_lossy(&out.stdout).contains(&wanted), "{}", text(&out));
    // Killed (its driver.json stays behind), the sweep's endpoint is no more: `show` names none.
    drop(sweep);
    let out = rtune(&["show", experiment.to_str().unwrap()])?;
    let said = String::from_utf8_lossy(&out.stdout);
    ensure!(said.contains("interrupted") && !said.contains("metrics for Prometheus"), "{said}");
    // Resumed, the endpoint describes the experiment from its first answer: the trials that
    // ended before, the best among them, the trials it was set up for.
    let port = free_port()?;
    let resumed = Killed(
        Command::new(RTUNE)
            .args(["resume", experiment.to_str().unwrap(), "--no-tui"])
            .args(["--metrics", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let mut body = String::new();
    wait_for(Duration::from_secs(60), || {
        body = http_get(port, "/metrics", None).map(|(_, b)| b).unwrap_or_default();
        Ok(body.contains("rtune_trials{status=\"RUNNING\"} 1"))
    })
    .with_context(|| format!("the resumed sweep's endpoint:\n{body}"))?;
    for line in ["rtune_trials{status=\"TERMINATED\"} 2\n", "rtune_sweep_trials 3\n"] {
        ensure!(body.contains(line), "no {line:?} after the resume:\n{body}");
    }
    let best = grid.best_result()?.last("score").context("no best score")?;
    let shown = body.lines().find_map(|l| {
        l.strip_prefix("rtune_best_metric{metric=\"score\",mode=\"max\"} ")?.parse::<f64>().ok()
    });
    ensure!(shown == Some(best), "the best is {best}, the endpoint says {shown:?}:\n{body}");
    let out = rtune(&["stop", experiment.to_str().unwrap()])?;
    ensure!(out.status.success(), "{}", text(&out));
    drop(resumed);
    Ok(())
}

/// Off loopback the endpoint needs the cluster token: refused before anything runs without
/// one, and a request without it gets 401.
pub fn the_endpoint_off_loopback_needs_the_token() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let file = dir.path().join("sweep.toml");
    let sweep = SWEEP.replace("{storage}", &storage.display().to_string());
    std::fs::write(&file, sweep.replace("30.0]", "15.0]"))?;
    let port = free_port()?;
    let all = format!("0.0.0.0:{port}");
    let f = file.to_str().unwrap();
    let out = Command::new(RTUNE)
        .args(["run", f, "--no-tui", "--metrics", &all])
        .env_remove(rtune::config::TOKEN_ENV)
        .output()?;
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(stderr.contains("`--metrics`") && stderr.contains("not loopback"), "{}", text(&out));
    ensure!(!storage.exists(), "the sweep ran anyway");
    let sweep = Killed(
        Command::new(RTUNE)
            .args(["run", f, "--no-tui", "--metrics", &all])
            .env(rtune::config::TOKEN_ENV, "s3cret")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_for(Duration::from_secs(60), || Ok(http_get(port, "/metrics", Some("s3cret")).is_ok()))?;
    let (status, _) = http_get(port, "/metrics", None)?;
    ensure!(status.contains("401"), "without the token: {status}");
    let (status, _) = http_get(port, "/metrics", Some("wrong"))?;
    ensure!(status.contains("401"), "with another token: {status}");
    let (status, body) = http_get(port, "/metrics", Some("s3cret"))?;
    ensure!(status.contains("200") && body.contains("rtune_trials"), "{status}\n{body}");
    let out = rtune(&["stop", storage.join("watched").to_str().unwrap()])?;
    ensure!(out.status.success(), "{}", text(&out));
    drop(sweep);
    Ok(())
}

/// A cluster's head serves its pool: what each node offers, as its agent said when it joined.
pub fn the_head_serves_its_pool_to_prometheus() -> Result<()> {
    use std::io::BufRead;
    let mut head = Killed(
        Command::new(RTUNE)
            .args(["head", "--port", "0", "--heartbeat-timeout", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?,
    );
    let mut line = String::new();
    std::io::BufReader::new(head.0.stdout.take().context("stdout")?).read_line(&mut line)?;
    let address = line.trim().strip_prefix("rtune head listening on ").context(line.clone())?;
    // The metrics line comes on stderr; the rest of it is drained so that the head never
    // blocks on a full pipe.
    let stderr = std::io::BufReader::new(head.0.stderr.take().context("stderr")?);
    let (found, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = found.send(line);
        }
    });
    let metrics = loop {
        let line = lines.recv_timeout(Duration::from_secs(30)).context("no metrics line")?;
        if let Some(url) = line.strip_prefix("rtune head: metrics for Prometheus at http://") {
            break url.trim_end_matches("/metrics").to_owned();
        }
    };
    let port: u16 = metrics.rsplit(':').next().context("port")?.parse()?;
    let _node = Killed(
        Command::new(RTUNE)
            .args(["node", "--address", address, "--num-cpus", "3", "--num-gpus", "0"])
            .args(["--resources", "tpu=1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let wanted = ["resource=\"CPU\"} 3.0", "resource=\"tpu\"} 1.0", "rtune_pool_waiting_groups 0"];
    let mut body = String::new();
    let seen = wait_for(Duration::from_secs(30), || {
        body = http_get(port, "/metrics", None)?.1;
        Ok(wanted.iter().all(|w| body.contains(w)))
    });
    ensure!(seen.is_ok(), "the head's metrics never showed the node:\n{body}");
    // `rtune status` says where they are, in its table and in its JSON.
    let out = rtune(&["status", "--address", address])?;
    let url = format!("http://{metrics}/metrics");
    ensure!(out.status.success(), "{}", text(&out));
    let said = format!("metrics for Prometheus: {url}");
    ensure!(String::from_utf8_lossy(&out.stdout).contains(&said), "{}", text(&out));
    let out = rtune(&["status", "--address", address, "--format", "json"])?;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).context(text(&out))?;
    ensure!(json["metrics"] == url.as_str() && json["nodes"].is_array(), "{json}");
    Ok(())
}

/// A sweep file (`dir/results/slow.toml`) of one `synthetic-curve` trial of 2 ranks reporting
/// `iterations` times, rank 1 slowed on purpose (`slow_rank`); its experiment is
/// `dir/results/slow`.
pub(crate) fn slow_rank_sweep(dir: &Path, iterations: u32) -> Result<std::path::PathBuf> {
    let storage = dir.join("results");
    std::fs::create_dir_all(&storage)?;
    let tables = format!(
        "[scaling]\nnum_workers = 2\n[param_space]\niterations = {iterations}\nsleep_s = 0.1\n\
         slow_rank = 1\n"
    );
    crate::common::synthetic_sweep(&storage, "slow", &tables)
}

/// A rank slowed on purpose (`synthetic-curve`'s `slow_rank`) is marked a straggler in
/// `rtune show DIR TRIAL`, from the trial's files.
pub fn a_slow_rank_is_marked_a_straggler() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let file = slow_rank_sweep(dir.path(), 4)?;
    let out = rtune(&["run", file.to_str().unwrap(), "--no-tui"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let experiment = storage.join("slow");
    let out = rtune(&["show", experiment.to_str().unwrap(), "0"])?;
    ensure!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let table = stdout.split_once("ranks, means over 4 reports").context(stdout.to_string())?.1;
    let row =
        |rank: &str| table.lines().find(|l| l.trim_start().starts_with(rank)).unwrap_or_default();
    ensure!(row("1 ").ends_with("straggler"), "rank 1 is not marked:\n{stdout}");
    ensure!(!row("0 ").contains("straggler"), "rank 0 is marked:\n{stdout}");
    // The per-rank figures are a table of their own, not columns of the results.
    ensure!(!stdout.contains("ranks/1/time_step_s"), "{stdout}");
    // Below it, how the group started and what its checkpoints (one a report) weighed.
    ensure!(stdout.contains("attempt 0: its group of 2 ranks started in "), "{stdout}");
    ensure!(stdout.contains("checkpoints: 4, "), "{stdout}");
    ensure!(stdout.contains("reports kept the train function waiting "), "{stdout}");
    Ok(())
}
