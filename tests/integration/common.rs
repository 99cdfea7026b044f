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
