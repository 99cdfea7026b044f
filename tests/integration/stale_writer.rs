//! One writer per checkpoint in a store: a request of a dead attempt that lands late (held in
//! the network while its worker died, delivered after the next attempt recorded its own
//! checkpoint of the same iteration) writes nothing the trial recorded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rtune::ResultGrid;

use crate::common::{text, wait_for};
use crate::storage::S3Server;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");

/// A relay in front of the S3 server that holds the first request whose request line holds
/// `trigger` (read whole, passed on to nobody) until [`release`](Holdup::release), then
/// delivers it to the server; every other request passes.
struct Holdup {
    endpoint: String,
    held: Arc<AtomicBool>,
    released: Arc<AtomicBool>,
    /// The server's answer to the held request once delivered (its status line).
    answer: Arc<Mutex<Option<String>>>,
}

impl Holdup {
    fn start(server: &S3Server, trigger: &str) -> Result<Holdup> {
        let upstream = server.endpoint.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let (held, released) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let answer = Arc::new(Mutex::new(None));
        let (h, r, a, trigger) =
            (held.clone(), released.clone(), answer.clone(), trigger.to_owned());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                let (h, r, a, trigger) = (h.clone(), r.clone(), a.clone(), trigger.clone());
                std::thread::spawn(move || relay(client, server, &trigger, &h, &r, &a));
            }
        });
        Ok(Holdup { endpoint, held, released, answer })
    }

    fn held(&self) -> bool {
        self.held.load(Ordering::SeqCst)
    }

    fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    fn answer(&self) -> Option<String> {
        self.answer.lock().unwrap().clone()
    }
}

/// Passes `client`'s requests to `server` one at a time and the answers back; holds the first
/// request (of all connections) that names `trigger` until `released`.
fn relay(
    client: TcpStream,
    mut server: TcpStream,
    trigger: &str,
    held: &AtomicBool,
    released: &AtomicBool,
    answer: &Mutex<Option<String>>,
) {
    let mut requests = BufReader::new(client.try_clone().unwrap());
    let (mut back, mut to_client) = (server.try_clone().unwrap(), client);
    let answers = std::thread::spawn(move || std::io::copy(&mut back, &mut to_client));
    while let Some(request) = read_request(&mut requests) {
        let line = String::from_utf8_lossy(&request[..request.len().min(300)]).into_owned();
        let hold = line.lines().next().is_some_and(|l| l.contains(trigger))
            && !held.swap(true, Ordering::SeqCst);
        if !hold {
            if server.write_all(&request).is_err() {
                return;
            }
            continue;
        }
        while !released.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Delivered late, on a connection of its own; the answer is kept.
        let Ok(mut late) = TcpStream::connect(server.peer_addr().unwrap()) else { return };
        let _ = late.write_all(&request);
        let mut status = String::new();
        let _ = BufReader::new(late).read_line(&mut status);
        *answer.lock().unwrap() = Some(status.trim().to_owned());
        return;
    }
    drop(answers);
}

/// One HTTP/1.1 request, whole (its head and its `Content-Length` of body); None at the end.
fn read_request(from: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut request = Vec::new();
    let mut length = 0;
    loop {
        let mut line = Vec::new();
        if from.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&line).to_ascii_lowercase();
        if let Some(value) = text.strip_prefix("content-length:") {
            length = value.trim().parse().ok()?;
        }
        request.extend_from_slice(&line);
        if line == b"\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    from.read_exact(&mut body).ok()?;
    request.extend_from_slice(&body);
    Some(request)
}

/// A trial's rank 0 is killed while the upload of its third checkpoint is held in the network;
/// the retry goes on from the second and records its own third; then the held upload lands.
/// The checkpoint the trial recorded for iteration 3 is untouched (the late write went to the
/// dead attempt's own name), the trial ends with every iteration once, and its kept
/// checkpoints are the retry's, whole.
pub fn a_dead_attempts_late_upload_replaces_no_recorded_checkpoint() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let proxy = Holdup::start(&server, "/checkpoint_000003/state.bin ")?;
    let dir = tempfile::tempdir()?;
    let staging = dir.path().join("staging");
    let file = dir.path().join("late.toml");
    std::fs::write(
        &file,
        format!(
            r#"
name = "late"
storage_path = "s3://exp/stale"

[trainable]
builtin = "synthetic-curve"

[param_space]
iterations = 6
sleep_s = 0.2
checkpoint_kb = 16

[tune]
metric = "score"
mode = "max"
num_samples = 1

[run]
failure = {{ max_failures = 1 }}
checkpoint = {{ num_to_keep = 6 }}
store = {{ endpoint = "{}" }}
"#,
            proxy.endpoint
        ),
    )?;
    let env: Vec<_> = server.env().into_iter().filter(|(k, _)| *k != "AWS_ENDPOINT_URL").collect();
    let child = Command::new(RTUNE)
        .args(["run", file.to_str().unwrap(), "--no-tui"])
        .envs(env)
        .env("RTUNE_STAGING", &staging)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    wait_for(Duration::from_secs(60), || Ok(proxy.held()))?;
    // Rank 0 (each row names its process) dies with its upload in flight.
    let experiment = staging.join("exp/stale/late");
    let rows = std::fs::read_dir(&experiment)?
        .flatten()
        .map(|e| e.path().join("result.json"))
        .find(|p| p.exists())
        .context("the trial's rows")?;
    let row: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&rows)?.lines().last().context("a row")?)?;
    let pid = row["pid"].as_i64().context("a pid")? as i32;
    // SAFETY: kill(2) on a pid the sweep reported as its worker's.
    ensure!(unsafe { libc::kill(pid, libc::SIGKILL) } == 0, "kill {pid}");
    let out = child.wait_with_output()?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));

    let grid = ResultGrid::from_path(&experiment)?;
    let trial = grid.trials.first().context("a trial")?;
    let iterations: Vec<f64> = trial.history().iter().map(|m| m["training_iteration"]).collect();
    ensure!(iterations == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{iterations:?}");
    let trial_dir = trial.path().file_name().context("name")?.to_string_lossy().into_owned();
    let prefix = format!("stale/late/{trial_dir}/");
    let result = trial.result().context("a result")?;
    let third = result.best_checkpoints.iter().find(|(c, _)| c.iteration().ok() == Some(3));
    let third = third.context("iteration 3's checkpoint")?.0.path().file_name().context("name")?;
    let recorded = format!("{prefix}{}/state.bin", third.to_string_lossy());
    let written = |key: &str| {
        server.boto3(&format!(
            "print(s3.head_object(Bucket='exp', Key='{key}')['LastModified'].isoformat())"
        ))
    };
    let before = written(&recorded)?;
    // Later than the recorded one by the clock's resolution at least.
    std::thread::sleep(Duration::from_millis(1100));
    proxy.release();
    wait_for(Duration::from_secs(30), || Ok(proxy.answer().is_some()))?;
    let answer = proxy.answer().unwrap_or_default();
    ensure!(answer.contains(" 200"), "the late upload was not taken: {answer}");
    ensure!(written(&recorded)? == before, "the recorded checkpoint was written over");
    // It landed under the dead attempt's own name, which no row names.
    let keys = server.keys("exp", &prefix)?;
    ensure!(keys.contains(&format!("{prefix}checkpoint_000003/state.bin")), "{keys:?}");
    for (checkpoint, metrics) in &result.best_checkpoints {
        let iteration = checkpoint.iteration()?;
        let by = checkpoint.metadata()?.attempt;
        ensure!(by == u32::from(iteration >= 3), "{metrics:?} by attempt {by}");
        let name = checkpoint.path().file_name().context("name")?.to_string_lossy().into_owned();
        ensure!(name.ends_with("_a1") == (by == 1), "{name}");
    }
    Ok(())
}
