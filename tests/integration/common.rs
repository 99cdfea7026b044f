//! Helpers shared by the integration tests.

/// The process's state letter from /proc (None when it is gone). A zombie ('Z') has exited and
/// holds nothing; it only waits for init, its new parent, to reap it.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next())
}

pub fn alive(pid: i32) -> bool {
    !matches!(process_state(pid), None | Some('Z') | Some('X'))
}

/// Runs `work` between a `start WHO` and an `end WHO` line appended to the file `events` (many
/// processes may append to it: each line is one small append).
pub fn between_events(events: &str, who: &str, work: impl FnOnce()) -> anyhow::Result<()> {
    use std::io::Write;
    let mark = |what: &str| -> anyhow::Result<()> {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(events)?;
        Ok(f.write_all(format!("{what} {who}\n").as_bytes())?)
    };
    mark("start")?;
    work();
    mark("end")
}

/// Polls `ready` every 50 ms until it says yes; an error after `limit`.
pub fn wait_for(
    limit: std::time::Duration,
    mut ready: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    while !ready()? {
        if start.elapsed() > limit {
            anyhow::bail!("not ready within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

/// A finished command's exit code and output, for failure messages.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a Python script with the `.venv`'s interpreter (torch and safetensors in it).
pub fn python(script: &str, args: &[&std::path::Path]) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .with_context(|| {
            format!(
                "{} (make test installs Python, torch and safetensors into .venv)",
                python.display()
            )
        })?;
    anyhow::ensure!(
        out.status.success(),
        "the Python script failed (make test installs torch, safetensors and optuna into \
         .venv): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

/// A process killed (and reaped) when dropped: a server a test started.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The answer to `GET path` on 127.0.0.1:`port` (HTTP/1.0, so the server closes), with `token`
/// as a bearer token where given: its status line and its body.
pub fn http_get(port: u16, path: &str, token: Option<&str>) -> anyhow::Result<(String, String)> {
    use anyhow::Context;
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").context("no HTTP response")?;
    Ok((head.lines().next().unwrap_or_default().to_owned(), body.to_owned()))
}

/// A sweep file of `synthetic-curve` named `name`, its experiment in `dir`, with `tables`.
pub fn synthetic_sweep(
    dir: &std::path::Path,
    name: &str,
    tables: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let file = dir.join(format!("{name}.toml"));
    let head = format!(
        "name = \"{name}\"\nstorage_path = \"{}\"\n[trainable]\nbuiltin = \"synthetic-curve\"\n",
        dir.display()
    );
    std::fs::write(&file, head + tables)?;
    Ok(file)
}

/// What the rows of the run in `run` say of its group's resizes (`group_resize`), in order.
pub fn resizes_said(run: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let rows = std::fs::read_to_string(run.join("result.json"))?;
    let said: Vec<String> = rows
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|row| row["group_resize"].as_str().map(str::to_owned))
        .flat_map(|said| said.split(" then ").map(str::to_owned).collect::<Vec<_>>())
        .collect();
    // Every resize the rows say is in the run's own list of them, in the same order (which
    // has those no row came after too).
    let listed: Vec<String> = rtune_driver::record::Resized::read(run)
        .iter()
        .map(|r| format!("{} -> {}: {}", r.from, r.to, r.why))
        .collect();
    anyhow::ensure!(listed.starts_with(&said), "the rows say {said:?}, the run lists {listed:?}");
    Ok(said)
}

/// SIGKILLs rank `rank` of the first trial of the sweep in `experiment`, found by `rtune stack`
/// (as a user finds it): its pid.
pub fn kill_rank(experiment: &std::path::Path, rank: usize) -> anyhow::Result<i32> {
    use anyhow::Context;
    let out = crate::cli::rtune(&["stack", experiment.to_str().unwrap(), "0"])?;
    let stacks = String::from_utf8_lossy(&out.stdout).into_owned();
    let pid: i32 = stacks
        .split_once(&format!("rank {rank} (pid "))
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .with_context(|| format!("no rank {rank} in rtune stack:\n{}", text(&out)))?;
    // SAFETY: kill(2) on a worker of the sweep the test started.
    anyhow::ensure!(unsafe { libc::kill(pid, libc::SIGKILL) } == 0, "kill {pid}");
    Ok(pid)
}
