//! The workers' output: `logs/rank_N.{stdout,stderr}` in the run directory, written directly by
//! local workers and appended from the head's event stream for workers on nodes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use super::{AttemptSpec, Exit, ExitTx, remote_worker_id};
use crate::error::{IoContext, Result};

/// Which output of a worker.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stream {
    Stdout,
    Stderr,
}

/// `logs/rank_N.stdout` or `.stderr` in the run directory.
pub(super) fn log_path(spec: &AttemptSpec, rank: usize, stream: Stream) -> PathBuf {
    let name = match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    spec.run.run_dir.join("logs").join(format!("rank_{rank}.{name}"))
}

/// Opens a log for appending (making `logs/` when needed): a restarted attempt's output follows
/// the previous one's.
pub(super) fn open_log(path: &Path) -> Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).at(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path).at(path)
}

/// Turns the head's event stream into the attempt's exits (worker id → rank), appending the
/// workers' output to their logs as it arrives.
pub(super) fn forward_cluster_events(
    mut stream: tonic::Streaming<crate::proto::WorkerEvent>,
    spec: &AttemptSpec,
    exits: ExitTx,
) {
    use crate::proto::worker_event::Kind;

    let ids: Vec<String> = (0..spec.ranks.len()).map(|r| remote_worker_id(spec, r)).collect();
    let logs: Vec<[PathBuf; 2]> = (0..spec.ranks.len())
        .map(|r| [log_path(spec, r, Stream::Stdout), log_path(spec, r, Stream::Stderr)])
        .collect();
    tokio::spawn(async move {
        loop {
            let kind = match stream.message().await {
                Ok(Some(event)) => event.kind,
                Ok(None) | Err(_) => {
                    // The head went away: every worker still counted is lost to us.
                    for rank in 0..ids.len() {
                        let _ = exits.send((rank, Exit::Lost("lost contact with the head".into())));
                    }
                    return;
                }
            };
            match kind {
                Some(Kind::Log(log)) => {
                    let Some(rank) = ids.iter().position(|id| *id == log.worker_id) else {
                        continue;
                    };
                    let path = &logs[rank][usize::from(log.stderr)];
                    let written =
                        open_log(path).and_then(|mut f| f.write_all(&log.data).at(path.as_path()));
                    if let Err(e) = written {
                        tracing::warn!("{e}");
                    }
                }
                Some(Kind::Exit(event)) => {
                    let Some(rank) = ids.iter().position(|id| *id == event.worker_id) else {
                        continue;
                    };
                    let exit = if !event.error.is_empty() {
                        Exit::Lost(event.error)
                    } else if event.signal != 0 {
                        Exit::Status(ExitStatus::from_raw(event.signal))
                    } else {
                        Exit::Status(ExitStatus::from_raw((event.code & 0xff) << 8))
                    };
                    if exits.send((rank, exit)).is_err() {
                        return;
                    }
                }
                None => {}
            }
        }
    });
}
