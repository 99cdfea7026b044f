//! CUDA as the driver sees it, without ever initialising it: what a GPU trial's workers will
//! find ([`Probe`], run in a child process of the same binary), and why CUDA cannot be used
//! ([`CudaError`]). Opening CUDA in a process (libtorch's CUDA library, the NVIDIA driver's)
//! and the probe's own side are `rtune::cuda`'s.
//!
//! The probe is what the driver runs before any trial that asks for GPUs: the same binary
//! started again with [`PROBE_ENV`] set, which opens CUDA as a worker would, asks the NVIDIA
//! driver its version, initialises it, counts the devices, prints one JSON line and exits. It
//! runs in a child process so that the driver itself never initialises CUDA (a process that did
//! cannot fork usable CUDA children) and never carries CUDA's memory. A node agent runs it at
//! start and reports the result with its resources.
//!
//! A leaf: it knows nothing of workers, runs or the cluster.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Set (to anything) in the environment of a process started to probe CUDA: `rtune::init()`
/// then probes CUDA (`rtune::cuda::probe_here`), prints the answer as one JSON line and exits.
pub const PROBE_ENV: &str = "RTUNE_CUDA_PROBE";

/// How long the probe may take before it counts as hung.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// libtorch's CUDA library, opened beside its CPU one.
pub const TORCH_CUDA: &str = "libtorch_cuda.so";
pub const TORCH_CPU: &str = "libtorch_cpu.so";

/// Why CUDA cannot be used here. Each says the cause and the way out, in one line; the caller
/// adds how to do without a GPU (`use_gpu = false`, `--device cpu`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CudaError {
    /// The libtorch this process runs with is a CPU-only build.
    #[error(
        "this libtorch has no CUDA ({TORCH_CUDA} is not in {}): install PyTorch's CUDA build \
         (`pip install torch==2.11.0`, the default wheel on Linux) and rebuild",
        .dir.display()
    )]
    CpuOnlyLibtorch { dir: PathBuf },
    /// libtorch_cuda (or a CUDA library it needs) could not be opened.
    #[error("cannot open {}: {message}", .path.display())]
    Open { path: PathBuf, message: String },
    /// No NVIDIA driver: `libcuda.so.1` is missing.
    #[error("no NVIDIA driver on {host} ({message}); install the driver")]
    NoDriver { host: String, message: String },
    /// The driver is older than the CUDA libtorch was built with.
    #[error(
        "the NVIDIA driver on {host} supports CUDA {} but this libtorch needs CUDA {}: update \
         the driver (CUDA 13 needs 580 or newer), or install a PyTorch wheel built for CUDA {}",
        version(*.driver), version(*.runtime), version(*.driver)
    )]
    DriverTooOld { host: String, driver: u32, runtime: u32 },
    /// The driver is there but no device is visible to this process.
    #[error(
        "no CUDA device visible on {host} ({why}); check `nvidia-smi` and CUDA_VISIBLE_DEVICES \
         (here {visible})"
    )]
    NoDevice { host: String, why: String, visible: String },
    /// The driver refused to start.
    #[error("the NVIDIA driver on {host} failed to initialise: {message}")]
    Init { host: String, message: String },
    /// libtorch_cuda was opened after `tch::Cuda` had been asked, or registered nothing.
    #[error(
        "libtorch does not see the {devices} CUDA device(s) the driver reports: \
         {TORCH_CUDA} was opened after libtorch was first asked about CUDA; call \
         rtune::cuda::load() (or rtune::init()) before any tch::Cuda call"
    )]
    NotRegistered { devices: u32 },
    /// The probe process itself failed.
    #[error("the CUDA probe failed: {0}")]
    Probe(String),
}

/// `12040` → `12.4`, as CUDA writes its versions.
fn version(v: u32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// What CUDA looks like to this binary on this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// Devices visible (after `CUDA_VISIBLE_DEVICES`), with their names.
    pub devices: Vec<String>,
    /// The CUDA version the driver supports, as `cuDriverGetVersion` gives it (13000 = 13.0).
    pub driver: u32,
    /// The CUDA runtime libtorch was built with (`cudaRuntimeGetVersion`); 0 when unknown.
    pub runtime: u32,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} CUDA device(s) ({}), driver CUDA {}, libtorch CUDA {}",
            self.devices.len(),
            self.devices.join(", "),
            version(self.driver),
            if self.runtime == 0 { "?".into() } else { version(self.runtime) }
        )
    }
}

impl Probe {
    /// Runs the probe in a child process of `exe` (this very binary, whose `main` calls
    /// `rtune::init()`), with this process's environment: what a worker started from here
    /// would find.
    pub fn run(exe: &Path) -> Result<Probe, CudaError> {
        use std::process::Stdio;
        let failed = |e: std::io::Error| CudaError::Probe(format!("{}: {e}", exe.display()));
        let mut child = std::process::Command::new(exe)
            .env(PROBE_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(failed)?;
        // A driver that hangs must not hang the sweep: the probe answers in a second or two.
        let deadline = std::time::Instant::now() + PROBE_TIMEOUT;
        while child.try_wait().map_err(failed)?.is_none() {
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CudaError::Probe(format!(
                    "{} did not answer within {PROBE_TIMEOUT:?} (is the NVIDIA driver hanging? \
                     `nvidia-smi` tells)",
                    exe.display()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let output = child.wait_with_output().map_err(failed)?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let answer = stdout.lines().rev().find_map(|line| serde_json::from_str(line).ok());
        match answer {
            Some(ProbeAnswer::Ok(probe)) => Ok(probe),
            Some(ProbeAnswer::Err(e)) => Err(e),
            None => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
                Err(CudaError::Probe(format!(
                    "{} exited with {} without an answer (does its main call rtune::init() \
                     first?){}",
                    exe.display(),
                    output.status,
                    if last.is_empty() { String::new() } else { format!(": {last}") }
                )))
            }
        }
    }
}

/// What the probe process prints (`rtune::cuda`'s side writes it).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeAnswer {
    Ok(Probe),
    Err(CudaError),
}

pub fn no_device(host: &str, why: String) -> CudaError {
    let visible = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!("CUDA_VISIBLE_DEVICES={v:?}"),
        Err(_) => "unset".into(),
    };
    CudaError::NoDevice { host: host.into(), why, visible }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_errors_read_as_cuda_writes_them() {
        assert_eq!(version(13000), "13.0");
        assert_eq!(version(12040), "12.4");
        let old = CudaError::DriverTooOld { host: "n1".into(), driver: 12040, runtime: 13000 };
        let text = old.to_string();
        assert!(text.contains("supports CUDA 12.4") && text.contains("needs CUDA 13.0"), "{text}");
        // The error crosses the probe's pipe as JSON.
        let json = serde_json::to_string(&ProbeAnswer::Err(old.clone())).unwrap();
        match serde_json::from_str(&json).unwrap() {
            ProbeAnswer::Err(e) => assert_eq!(e, old),
            ProbeAnswer::Ok(p) => panic!("read back as {p:?}"),
        }
    }
}
