//! Command trainables, the driver side: a `TorchTrainer` whose workers each run an executable
//! (a PyTorch DDP script, say) instead of a Rust function: the worker's own command runner
//! ([`TrainFnId::COMMAND`], `rtune::worker::run_command`, which describes the protocol the
//! executable speaks), told what to run by [`COMMAND_ENV`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::setting::Setting;
use crate::train::{TorchTrainer, TrainFnId};

/// The variable a command trainable's worker finds its [`CommandSpec`] in.
pub const COMMAND_ENV: &str = "RTUNE_COMMAND";
/// The prefix of a report line on the command's stdout.
/// What to run, as the driver resolved it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommandSpec {
    /// The program (an absolute path, or a name looked up on `PATH`) and its arguments.
    pub argv: Vec<String>,
    pub working_dir: PathBuf,
    /// How long a command told to stop has to exit before SIGTERM.
    pub stop_grace_s: f64,
}

/// Any executable as the train function, one process per worker, with torchrun's environment
/// (see `rtune::worker::run_command` for the protocol).
///
/// ```no_run
/// use rtune_driver::config::ScalingConfig;
/// use rtune_driver::train::CommandTrainable;
/// let trainer = CommandTrainable::new(["python3", "train.py"])
///     .working_dir("examples/command")
///     .trainer()?
///     .scaling(ScalingConfig::workers(2));
/// # Ok::<(), rtune_driver::error::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct CommandTrainable {
    argv: Vec<String>,
    working_dir: Option<PathBuf>,
    stop_grace: Duration,
}

impl CommandTrainable {
    /// The program and its arguments. A program with a `/` in it is a path (relative ones are
    /// taken from the working directory); a bare name is looked up on `PATH`.
    pub fn new(argv: impl IntoIterator<Item = impl Into<String>>) -> Self {
        CommandTrainable {
            argv: argv.into_iter().map(Into::into).collect(),
            working_dir: None,
            stop_grace: Duration::from_secs(30),
        }
    }

    /// Where the command runs (default: the current directory).
    pub fn working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// How long a command told to stop (a scheduler's decision) has to exit before it gets
    /// SIGTERM (default 30 s).
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// The trainer that runs it, once the program and working directory are found (a typo
    /// there is an error now, not one failed trial after another).
    pub fn trainer(self) -> Result<TorchTrainer> {
        let invalid = |setting: Setting, message| Error::config(setting, message);
        let Some(program) = self.argv.first() else {
            let message = "is empty: give the program and its arguments".to_owned();
            return Err(invalid(Setting::Command, message));
        };
        let here = std::env::current_dir().map_err(|e| Error::io("current directory", e))?;
        let working_dir =
            lexical(&here.join(self.working_dir.as_deref().unwrap_or(Path::new("."))));
        if !working_dir.is_dir() {
            let message = format!("{} is not a folder", working_dir.display());
            return Err(invalid(Setting::WorkingDir, message));
        }
        let program =
            resolve_program(program, &working_dir).map_err(|m| invalid(Setting::Command, m))?;
        let mut argv = self.argv;
        argv[0] = program.display().to_string();
        let spec = CommandSpec { argv, working_dir, stop_grace_s: self.stop_grace.as_secs_f64() };
        let spec = serde_json::to_string(&spec).expect("a command spec serialises");
        Ok(TorchTrainer::of(TrainFnId::COMMAND).env(COMMAND_ENV, spec))
    }
}

/// The executable `program` names: a path (relative to `dir`) when it has a `/`, else the first
/// match on `PATH`.
fn resolve_program(program: &str, dir: &Path) -> std::result::Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = lexical(&dir.join(program));
        return match executable(&path) {
            true => Ok(path),
            false => Err(format!("{} is not an executable file", path.display())),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| executable(p)).ok_or_else(|| {
        format!(
            "{program:?} is not found on PATH (give its path, or activate the environment \
                 that has it, e.g. `. .venv/bin/activate`)"
        )
    })
}

/// `path` without its `.` components (`/a/./b` → `/a/b`), for messages and logs.
fn lexical(path: &Path) -> PathBuf {
    path.components().filter(|c| *c != std::path::Component::CurDir).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_path_or_from_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(resolve_program("sh", dir.path()).unwrap().ends_with("sh"));
        let e = resolve_program("no-such-program-rtune", dir.path()).unwrap_err();
        assert!(e.contains("not found on PATH"), "{e}");
        let script = dir.path().join("train.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let e = resolve_program("./train.sh", dir.path()).unwrap_err();
        assert!(e.contains("not an executable file"), "{e}");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        assert_eq!(resolve_program("./train.sh", dir.path()).unwrap(), script);
    }

    #[test]
    fn an_empty_command_or_a_missing_folder_is_refused() {
        let e = CommandTrainable::new(Vec::<String>::new()).trainer().unwrap_err().to_string();
        assert!(e.contains("invalid CommandTrainable.argv: is empty"), "{e}");
        let e = CommandTrainable::new(["sh"]).working_dir("/no/such/dir").trainer().unwrap_err();
        assert!(e.to_string().contains("/no/such/dir is not a folder"), "{e}");
    }
}
