//! Process-level helpers shared by the driver and the node agent: starting supervised worker
//! processes, and the build id that proves a worker runs the driver's very binary. A leaf: it
//! knows nothing of trials, groups or the cluster.

pub(crate) mod build_id;

use std::os::unix::process::CommandExt;
use std::process::ExitStatus;

use tokio::sync::oneshot;

/// Spawns `command` as a worker process that dies with the thread that spawned it
/// (`PR_SET_PDEATHSIG = SIGKILL`: a driver's or node agent's workers never outlive it), and
/// hands its exit to `on_exit`. The returned sender kills it; dropping the sender kills it too.
/// Also returns its stdout and stderr when the command piped them.
/// Call from the thread that lives as long as the workers should (the runtime's `block_on`).
pub(crate) fn spawn_supervised(
    mut command: std::process::Command,
    on_exit: impl FnOnce(std::io::Result<ExitStatus>) + Send + 'static,
) -> std::io::Result<Supervised> {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = tokio::process::Command::from(command).kill_on_drop(true).spawn()?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let (kill, killed) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let status = tokio::select! {
            status = child.wait() => status,
            _ = killed => {
                let _ = child.start_kill();
                child.wait().await
            }
        };
        on_exit(status);
    });
    Ok(Supervised { kill, stdout, stderr })
}

/// A supervised worker process.
pub(crate) struct Supervised {
    /// Send (or drop) to kill it.
    pub kill: oneshot::Sender<()>,
    pub stdout: Option<tokio::process::ChildStdout>,
    pub stderr: Option<tokio::process::ChildStderr>,
}
