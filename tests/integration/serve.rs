//! `rtune serve`: an export behind the Open Inference Protocol, talked to by Triton's own
//! clients (tritonclient's HTTP and gRPC, from PyPI) and by plain HTTP load from many threads
//! (tests/integration/serve_client.py): the answers are `rtune predict`'s for the same rows, bit
//! for bit; concurrent requests are batched; a full queue is refused at once with Retry-After;
//! SIGTERM answers what is in flight and exits 0; every bad input is a 400 (INVALID_ARGUMENT)
//! naming it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::cli::{RTUNE, rtune};
use crate::common::{Killed, http_get, text};
use crate::predict::{digits_csv, digits_export, predict};

/// A running `rtune serve` and where it listens.
struct Server {
    process: Killed,
    http: u16,
    grpc: u16,
    stderr: PathBuf,
}

impl Server {
    /// `rtune serve model` on free loopback ports, with `more` flags; returns once it says it
    /// serves.
    fn start(model: &Path, stderr: PathBuf, more: &[&str]) -> Result<Server> {
        Self::start_with("127.0.0.1", model, stderr, more, &[])
    }

    /// The same on `host`'s free ports, with `env` set.
    fn start_with(
        host: &str,
        model: &Path,
        stderr: PathBuf,
        more: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server> {
        let (http, grpc) = (format!("{host}:0"), format!("{host}:0"));
        let mut child = Command::new(RTUNE)
            .args(["serve", model.to_str().unwrap(), "--http", &http, "--grpc", &grpc])
            .args(["--name", "model"])
            .args(more)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let (said, line) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut first = String::new();
            let _ = BufReader::new(stdout).read_line(&mut first);
            let _ = said.send(first);
        });
        let process = Killed(child);
        let line = line.recv_timeout(Duration::from_secs(120)).unwrap_or_default();
        let port = |after: &str| -> Result<u16> {
            let at = line.find(after).with_context(|| {
                format!("`rtune serve` said {line:?}; its stderr: {}", read(&stderr))
            })?;
            let rest = &line[at + after.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Ok(digits.parse()?)
        };
        let (http, grpc) = (port(&format!("http://{host}:"))?, port(&format!("gRPC {host}:"))?);
        Ok(Server { process, http, grpc, stderr })
    }

    fn pid(&self) -> i32 {
        self.process.0.id() as i32
    }

    /// Sends SIGTERM and waits for the exit: its code.
    fn terminate(mut self) -> Result<(Option<i32>, String)> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let status = wait_exit(&mut self.process.0, Duration::from_secs(60))?;
        Ok((status, read(&self.stderr)))
    }

    /// `GET /metrics`' value of `series` (a full sample name with its labels), summed over
    /// the samples that start with it.
    fn metric(&self, series: &str) -> Result<f64> {
        let (status, body) = http_get(self.http, "/metrics", None)?;
        ensure!(status.contains("200"), "{status}: {body}");
        Ok(body
            .lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn wait_exit(child: &mut Child, patience: Duration) -> Result<Option<i32>> {
    let until = Instant::now() + patience;
    while Instant::now() < until {
        if let Some(status) = child.try_wait()? {
            return Ok(status.code());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("`rtune serve` did not exit within {patience:?} of SIGTERM")
}

/// tests/integration/serve_client.py's JSON line for `args`.
fn client(args: &[&str]) -> Result<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join(".venv/bin/python"))
        .arg(root.join("tests/integration/serve_client.py"))
        .args(args)
        .output()
        .context("make test installs tritonclient into .venv")?;
    ensure!(out.status.success(), "the client failed: {}", text(&out));
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).with_context(|| format!("the client said {line}"))
}

/// A digits export, its rows as a CSV file with a header, and `rtune predict`'s answers for
/// them (CSV).
fn digits_with_predictions(dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let model = digits_export(dir)?;
    let rows = dir.join("rows.csv");
    digits_csv(&rows, 1)?;
    let predicted = dir.join("predicted.csv");
    predict(&model, &rows, &predicted, &[])?;
    Ok((model, rows, predicted))
}

/// A POST to `/v2/models/model/infer` that says its body is `length` bytes and sends
/// `sent` of them: the status line and body of the answer.
fn post_claiming(port: u16, length: usize, sent: &[u8]) -> Result<(String, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "POST /v2/models/model/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n\
         Connection: close\r\n\r\n"
    )?;
    stream.write_all(sent)?;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").context("no HTTP response")?;
    Ok((head.lines().next().unwrap_or_default().to_owned(), body.to_owned()))
}

/// `model` served, asked by tritonclient (HTTP and gRPC) for every row of `rows`: the
/// answers are `predicted`'s (what `rtune predict` wrote), the metadata says `platform`, and
/// each bad input is refused naming it. Returns the server, still running.
fn serves_what_predict_gives(
    model: &Path,
    rows: &Path,
    predicted: &Path,
    platform: &str,
    dir: &Path,
) -> Result<Server> {
    let server = Server::start(model, dir.join(format!("{platform}.err")), &[])?;
    let (h, g) = (server.http.to_string(), server.grpc.to_string());
    let seen = client(&["check", &h, &g, rows.to_str().unwrap(), predicted.to_str().unwrap()])?;
    ensure!(seen["http_health"] == serde_json::json!([true, true, true]), "{seen}");
    ensure!(seen["grpc_health"] == serde_json::json!([true, true, true]), "{seen}");
    let metadata = serde_json::json!({
        "platform": platform,
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [
            {"name": "prediction", "datatype": "INT64", "shape": [-1]},
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
        ],
    });
    ensure!(seen["http_metadata"] == metadata, "{}", seen["http_metadata"]);
    ensure!(seen["grpc_metadata"] == metadata, "{}", seen["grpc_metadata"]);
    for form in ["http_binary", "http_json", "grpc", "per_column"] {
        ensure!(seen[form] == true, "{form}: not what `rtune predict` gives: {seen}");
    }
    // Each bad input: the protocol's refusal, naming what is wrong.
    let bad = &seen["bad"];
    let said = |case: &str, front: &str, status: &str, words: &[&str]| -> Result<()> {
        let answer = &bad[case][front];
        let (code, message) = (answer[0].to_string(), answer[1].as_str().unwrap_or_default());
        ensure!(code.contains(status), "{case} over {front}: {answer}");
        for w in words {
            ensure!(message.contains(w), "{case} over {front}: {message:?} lacks {w:?}");
        }
        Ok(())
    };
    let fronts = [("http", "400", "404"), ("grpc", "INVALID_ARGUMENT", "NOT_FOUND")];
    for (front, invalid, missing) in fronts {
        said("unknown_input", front, invalid, &["input `pixels`", "`pixel_0`"])?;
        said("wrong_datatype", front, invalid, &["`input`", "INT64", "FP32"])?;
        said("wrong_shape", front, invalid, &["[1, 63]", "[rows, 64]"])?;
        said("missing_column", front, invalid, &["lacks", "`pixel_1`"])?;
        said("strings", front, invalid, &["`input`", "BYTES"])?;
        said("unknown_model", front, missing, &["no model `nope`", "`model`"])?;
    }
    said("garbage", "http", "400", &["not JSON"])?;
    said("no_name", "http", "400", &["input 0 has no `name`"])?;
    said("non_numeric", "http", "400", &["input `input` holds \"a\"", "not a number"])?;
    Ok(server)
}

pub fn triton_clients_get_what_rtune_predict_gives_and_bad_input_is_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let (model, rows, predicted) = digits_with_predictions(d)?;
    let server = serves_what_predict_gives(&model, &rows, &predicted, "pytorch_torchscript", d)?;
    // A body over the limit is refused from its length, before it is read.
    let (status, body) = post_claiming(server.http, 33 << 20, b"{")?;
    ensure!(status.contains("413") && body.contains("--max-request-mb"), "{status}: {body}");
    let (status, body) = http_get(server.http, "/v2/models/nope", None)?;
    ensure!(status.contains("404") && body.contains("\"error\""), "{status}: {body}");
    // The metrics count the answers by protocol and code.
    let series = |protocol: &str, code: u16| {
        format!(
            r#"rtune_serve_requests_total{{model="model",protocol="{protocol}",code="{code}"}}"#
        )
    };
    let ok = server.metric(&series("grpc", 200))?;
    ensure!(ok >= 18.0, "{ok} gRPC answers counted");
    let refused = server.metric(&series("http", 400))?;
    ensure!(refused >= 8.0, "{refused} HTTP refusals counted");
    let (code, stderr) = server.terminate()?;
    ensure!(code == Some(0), "exit {code:?}: {stderr}");
    Ok(())
}

/// Off loopback the server needs a token, and every request then carries it.
pub fn off_loopback_every_request_needs_the_token() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let model = digits_export(d)?;
    let out = rtune(&["serve", model.to_str().unwrap(), "--http", "0.0.0.0:0"])?;
    let said = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "{}", text(&out));
    ensure!(said.contains("--http") && said.contains("--token or $RTUNE_TOKEN"), "{said}");
    let server =
        Server::start_with("0.0.0.0", &model, d.join("serve.err"), &["--token", "s3cret"], &[])?;
    let (status, body) = http_get(server.http, "/v2/health/ready", None)?;
    ensure!(status.contains("401") && body.contains("Bearer"), "{status}: {body}");
    let (status, _) = http_get(server.http, "/v2/health/ready", Some("wrong"))?;
    ensure!(status.contains("401"), "{status}");
    let (status, body) = http_get(server.http, "/v2/models/model", Some("s3cret"))?;
    ensure!(status.contains("200") && body.contains("pytorch_torchscript"), "{status}: {body}");
    let (code, stderr) = server.terminate()?;
    ensure!(code == Some(0), "exit {code:?}: {stderr}");
    Ok(())
}

/// XGBoost's and LightGBM's exports are served as `rtune predict` predicts with them.
pub fn tree_models_are_served_as_rtune_predict_predicts() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let rows = d.join("rows.csv");
    digits_csv(&rows, 1)?;
    let sweeps = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sweeps");
    for (file, experiment, rounds, platform) in [
        (
            "digits_xgboost_asha.toml",
            "digits-xgboost-asha",
            "param_space.num_boost_round=5",
            "xgboost",
        ),
        (
            "digits_lightgbm_asha.toml",
            "digits-lightgbm-asha",
            "param_space.num_boost_round=5",
            "lightgbm",
        ),
    ] {
        let storage = format!("storage_path={:?}", d.display().to_string());
        let sweep = sweeps.join(file);
        let sets = ["--set", &storage, "--set", "tune.num_samples=1", "--set", rounds];
        let out = rtune(&[&["run", sweep.to_str().unwrap(), "--no-tui"], &sets[..]].concat())?;
        ensure!(out.status.success(), "{}", text(&out));
        let model = d.join(platform);
        let experiment = d.join(experiment);
        let out =
            rtune(&["export", experiment.to_str().unwrap(), "--to", model.to_str().unwrap()])?;
        ensure!(out.status.success(), "{}", text(&out));
        let predicted = d.join(format!("{platform}.csv"));
        predict(&model, &rows, &predicted, &[])?;
        let server = serves_what_predict_gives(&model, &rows, &predicted, platform, d)?;
        let (code, stderr) = server.terminate()?;
        ensure!(code == Some(0), "exit {code:?}: {stderr}");
    }
    Ok(())
}

pub fn concurrent_clients_are_batched_and_every_answer_is_right() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let (model, rows, predicted) = digits_with_predictions(d)?;
    // The model in the server's own process (the others test replica processes).
    let flags = ["--batch-wait-ms", "20", "--in-process"];
    let server = Server::start(&model, d.join("serve.err"), &flags)?;
    let h = server.http.to_string();
    let (clients, each) = (64, 8);
    let seen = client(&[
        "load",
        &h,
        rows.to_str().unwrap(),
        predicted.to_str().unwrap(),
        &clients.to_string(),
        &each.to_string(),
    ])?;
    ensure!(seen["wrong"] == serde_json::json!([]), "wrong answers for rows {}", seen["wrong"]);
    ensure!(seen["right"] == clients * each, "{seen}");
    let batches = server.metric("rtune_serve_batch_requests_count")?;
    let requests = server.metric("rtune_serve_batch_requests_sum")?;
    ensure!(requests == f64::from(clients * each), "{requests} requests batched");
    let mean = requests / batches;
    ensure!(mean > 1.0, "{requests} requests in {batches} batches: none batched together");
    let (code, stderr) = server.terminate()?;
    ensure!(code == Some(0), "exit {code:?}: {stderr}");
    ensure!(stderr.contains("rows a batch"), "no line of throughput: {stderr}");
    Ok(())
}

/// A copy of the digits export whose TorchScript model takes `steps` products of a 384x384
/// matrix per batch (a slow model, whatever the batch), then answers as a linear model.
fn slow_export(model: &Path, to: &Path, steps: u32) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for file in ["preprocessor.json", "metadata.json", "params.json"] {
        std::fs::copy(model.join(file), to.join(file))?;
    }
    let script = format!(
        r#"
import sys, torch
class Slow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(64, 10) * 0.1)
        self.m = torch.nn.Parameter(torch.randn(384, 384) / 20)
    def forward(self, x):
        y = self.m
        for _ in range({steps}):
            y = torch.tanh(y @ self.m)
        return x @ self.w + 0.0 * y.sum()
torch.jit.trace(Slow(), torch.zeros(16, 64)).save(sys.argv[1])
"#
    );
    crate::common::python(&script, &[&to.join("model.pt")])?;
    Ok(())
}

/// Peak resident memory of a process, in bytes.
fn peak_bytes(pid: i32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM")?;
    let kb: u64 = line.split_whitespace().nth(1).context("VmHWM")?.parse()?;
    Ok(kb * 1024)
}

pub fn overload_is_refused_at_once_and_sigterm_answers_what_is_in_flight() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let (model, rows, _) = digits_with_predictions(d)?;
    let slow = d.join("slow");
    slow_export(&model, &slow, 100)?;
    let rows = rows.to_str().unwrap();

    // A queue of 4 and 200 requests at once: the model runs a batch of 10 while the others
    // come, so most are refused at once, and every one is answered.
    let flags = ["--max-queued", "4", "--max-batch-size", "10"];
    let server = Server::start(&slow, d.join("overload.err"), &flags)?;
    let seen = client(&["burst", &server.http.to_string(), rows, "200"])?;
    let codes = seen["codes"].as_object().context("codes")?;
    let count = |code: &str| codes.get(code).and_then(Value::as_u64).unwrap_or(0);
    ensure!(count("200") + count("503") == 200, "requests unanswered or refused otherwise: {seen}");
    // A refusal means 4 were queued then, behind at least one in the model: all answered.
    ensure!(count("503") > 0 && count("200") >= 5, "{seen}");
    ensure!(seen["retry_after"] == serde_json::json!(["1"]), "{seen}");
    let refused =
        server.metric(r#"rtune_serve_requests_total{model="model",protocol="http",code="503"}"#)?;
    ensure!(refused == count("503") as f64, "{refused} refusals counted: {seen}");
    let peak = peak_bytes(server.pid())?;
    ensure!(peak < 1 << 31, "the server's memory peaked at {peak} bytes");
    let (code, stderr) = server.terminate()?;
    ensure!(code == Some(0), "exit {code:?}: {stderr}");

    // SIGTERM with 30 requests queued: each is answered, then the server exits 0.
    let server = Server::start(&slow, d.join("drain.err"), &[])?;
    let http = server.http.to_string();
    let rows_owned = rows.to_owned();
    let burst = std::thread::spawn(move || client(&["burst", &http, &rows_owned, "30"]));
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting = server.metric("rtune_serve_queue_depth")?;
        let answered = server.metric("rtune_serve_batch_requests_sum")?;
        if waiting + answered >= 30.0 {
            ensure!(waiting > 0.0, "every request was answered before SIGTERM could be sent");
            break;
        }
        ensure!(Instant::now() < until, "30 requests never reached the server");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, stderr) = server.terminate()?;
    let seen = burst.join().expect("the client's thread")?;
    ensure!(seen["codes"] == serde_json::json!({"200": 30}), "{seen}; the server: {stderr}");
    ensure!(code == Some(0), "exit {code:?}: {stderr}");

    // A request past its deadline gets 504 at the deadline, not whenever the model is done.
    let server = Server::start(&slow, d.join("deadline.err"), &["--request-timeout", "0.05"])?;
    let body = r#"{"inputs": [{"name": "input", "datatype": "FP32", "shape": [64], "data": [0]}]}"#;
    let body = body.replace("[0]", &format!("[{}]", vec!["0"; 64].join(",")));
    let (status, answer) = post_claiming(server.http, body.len(), body.as_bytes())?;
    ensure!(status.contains("504") && answer.contains("--request-timeout"), "{status}: {answer}");
    Ok(())
}

/// The pids of the replicas `rtune serve` said are up (in its stderr at `path`), once there
/// are `count` such lines.
fn replicas_up(path: &Path, count: usize, patience: Duration) -> Result<Vec<i32>> {
    let until = Instant::now() + patience;
    loop {
        let said = read(path);
        let pids: Vec<i32> = said
            .lines()
            .filter_map(|l| l.split_once(" is up (pid ")?.1.split(' ').next()?.parse().ok())
            .collect();
        if pids.len() >= count {
            return Ok(pids);
        }
        ensure!(Instant::now() < until, "{} of {count} replicas up: {said}", pids.len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn a_killed_replica_comes_back_and_every_request_is_answered() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let (model, rows, predicted) = digits_with_predictions(d)?;
    let server = Server::start(&model, d.join("serve.err"), &["--replicas", "2"])?;
    let pids = replicas_up(&server.stderr, 2, Duration::from_secs(60))?;
    // The replicas are sent the export the server read: the one started again needs no folder.
    std::fs::remove_dir_all(&model)?;
    let (http, rows, predicted) = (
        server.http.to_string(),
        rows.to_str().unwrap().to_owned(),
        predicted.to_str().unwrap().to_owned(),
    );
    let (h, r, p) = (http.clone(), rows.clone(), predicted.clone());
    let load = std::thread::spawn(move || client(&["load", &h, &r, &p, "8", "300"]));
    let answered = r#"rtune_serve_requests_total{model="model",protocol="http",code="200"}"#;
    let until = Instant::now() + Duration::from_secs(60);
    while server.metric(answered)? < 100.0 {
        ensure!(Instant::now() < until, "100 requests were never answered");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) on a replica process of the server this test started.
    unsafe { libc::kill(pids[0], libc::SIGKILL) };
    let seen = load.join().expect("the client's thread")?;
    let codes = seen["codes"].as_object().context("codes")?;
    let total: u64 = codes.values().filter_map(Value::as_u64).sum();
    ensure!(total == 8 * 300, "{total} of 2400 requests answered: {seen}");
    ensure!(codes.keys().all(|c| c == "200" || c == "500"), "{seen}");
    ensure!(seen["wrong"] == serde_json::json!([]), "wrong answers: {seen}");
    // The replica is started again, in a process of its own, and both serve.
    let pids = replicas_up(&server.stderr, 3, Duration::from_secs(120))?;
    ensure!(pids[2] != pids[0], "{pids:?}");
    ensure!(server.metric("rtune_serve_replica_restarts_total")? >= 1.0, "no restart counted");
    let seen = client(&["load", &http, &rows, &predicted, "8", "10"])?;
    ensure!(seen["right"] == 80, "after the restart: {seen}");
    let (code, stderr) = server.terminate()?;
    ensure!(code == Some(0), "exit {code:?}: {stderr}");
    Ok(())
}

/// `rtune serve --replicas 2` on a cluster (`$RTUNE_ADDRESS`, as `rtune slurm run` sets it) of
/// two nodes of one CPU each: a replica on each node, sent the export through the dock, each
/// node's CPU held while it serves and given back at SIGTERM; every answer right.
pub fn replicas_serve_from_the_cluster_nodes() -> Result<()> {
    let mut cluster = crate::cluster::Cluster::start(None)?;
    cluster.add_node(&["--num-cpus", "1"])?;
    cluster.add_node(&["--num-cpus", "1"])?;
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let (model, rows, predicted) = digits_with_predictions(d)?;
    let env = [(rtune::config::ADDRESS_ENV, cluster.address.as_str())];
    let flags = ["--replicas", "2"];
    let server = Server::start_with("127.0.0.1", &model, d.join("serve.err"), &flags, &env)?;
    replicas_up(&server.stderr, 2, Duration::from_secs(60))?;
    let status = cluster.status()?;
    let nodes = status["nodes"].as_array().context("nodes")?;
    ensure!(nodes.len() == 2 && nodes.iter().all(|n| n["free"]["CPU"] == 0), "{status}");
    let groups = status["placement_groups"].as_array().context("placement groups")?;
    ensure!(groups.len() == 2, "a group per replica: {status}");
    let (http, rows, predicted) =
        (server.http.to_string(), rows.to_str().unwrap(), predicted.to_str().unwrap());
    let seen = client(&["load", &http, rows, predicted, "8", "20"])?;
    ensure!(seen["right"] == 160 && seen["wrong"] == serde_json::json!([]), "{seen}");
    let (code, stderr) = server.terminate()?;
    ensure!(code == Some(0), "exit {code:?}: {stderr}");
    crate::common::wait_for(Duration::from_secs(30), || {
        let status = cluster.status()?;
        let nodes = status["nodes"].as_array().context("nodes")?;
        Ok(status["placement_groups"] == serde_json::json!([])
            && nodes.iter().all(|n| n["free"]["CPU"] == 1))
    })?;
    Ok(())
}
