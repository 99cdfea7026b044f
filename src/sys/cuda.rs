//! CUDA, opened at run time: one build of rtune (and of a user's binary on it) serves CPU and
//! GPU machines alike.
//!
//! rtune links libtorch's CPU library only. A process that is given a GPU opens
//! `libtorch_cuda.so` from the same folder as the `libtorch_cpu.so` it runs with, `RTLD_NOW |
//! RTLD_GLOBAL`, before anything asks libtorch about CUDA: the library's static initialisers
//! register libtorch's CUDA kernels and hooks, and from then on `tch` sees CUDA exactly as if it
//! had been linked. Linking it instead would cost every process, CPU-only ones included, the
//! loading of about a gigabyte of CUDA libraries (BENCHMARKS.md, "CUDA at run time").
//!
//! Who opens it: a worker whose device is a GPU (before its train function runs), `rtune
//! predict --device cuda`, a [`TorchPredictor`](crate::train::TorchPredictor) asked for a GPU,
//! and the probe. Any other code may call [`load`] first thing; a `tch::Cuda` call made before
//! it caches libtorch's CPU-only hooks, and CUDA then stays unavailable in that process.
//!
//! The probe ([`Probe`]) is what the driver runs before any trial that asks for GPUs: the same
//! binary started again with [`PROBE_ENV`] set, which opens CUDA as a worker would, asks the
//! NVIDIA driver its version, initialises it, counts the devices, prints one JSON line and exits.
//! It runs in a child process so that the driver itself never initialises CUDA (a process that
//! did cannot fork usable CUDA children) and never carries CUDA's memory. A node agent runs it at
//! start and reports the result with its resources.
//!
//! A leaf: it knows nothing of workers, runs or the cluster.

use std::ffi::{CStr, c_char, c_int, c_uint};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::Device;

/// Set (to anything) in the environment of a process started to probe CUDA: `rtune::init()`
/// then runs [`Probe::here`], prints it as one JSON line and exits.
pub const PROBE_ENV: &str = "RTUNE_CUDA_PROBE";

/// How long the probe may take before it counts as hung.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// libtorch's CUDA library, opened beside its CPU one.
const TORCH_CUDA: &str = "libtorch_cuda.so";
const TORCH_CPU: &str = "libtorch_cpu.so";
/// The NVIDIA driver's user-space library.
const DRIVER: &str = "libcuda.so.1";

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

/// Opens libtorch's CUDA library in this process (once; later calls return the first answer).
/// After it returns Ok, `tch::Cuda::is_available()` is true wherever the driver and a device
/// are. Does not initialise the driver.
pub fn load() -> Result<(), CudaError> {
    static LOADED: OnceLock<Result<(), CudaError>> = OnceLock::new();
    LOADED.get_or_init(|| open_global(&torch_cuda_path()?)).clone()
}

/// libtorch's name for `device`.
pub fn torch_device(device: Device) -> tch::Device {
    match device {
        Device::Cpu => tch::Device::Cpu,
        Device::Cuda(index) => tch::Device::Cuda(index),
    }
}

/// Makes `device` usable in this process: for a GPU, opens CUDA and probes it here (see
/// [`Probe::here`]: this process then has CUDA initialised), and checks the device exists.
/// For a process that uses the GPU itself (prediction), not for one that forks workers.
pub fn use_device(device: tch::Device) -> Result<tch::Device, CudaError> {
    let tch::Device::Cuda(index) = device else { return Ok(device) };
    let probe = Probe::here()?;
    if index >= probe.devices.len() {
        return Err(no_device(
            &super::hostname(),
            format!("cuda:{index} asked, {} visible ({})", probe.devices.len(), probe),
        ));
    }
    Ok(device)
}

/// Where libtorch_cuda should be: beside the libtorch_cpu this process has mapped (found in
/// `/proc/self/maps`, so `LD_LIBRARY_PATH`, an rpath or a copied folder all count).
fn torch_cuda_path() -> Result<PathBuf, CudaError> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let dir = loaded_library_dir(&maps, TORCH_CPU).ok_or_else(|| CudaError::Open {
        path: TORCH_CUDA.into(),
        message: format!("{TORCH_CPU} is not loaded in this process, so its folder is unknown"),
    })?;
    beside(&dir)
}

/// `libtorch_cuda.so` in `dir`, or why there is none.
fn beside(dir: &Path) -> Result<PathBuf, CudaError> {
    let path = dir.join(TORCH_CUDA);
    if path.is_file() { Ok(path) } else { Err(CudaError::CpuOnlyLibtorch { dir: dir.to_owned() }) }
}

/// The folder of the first mapping of a file named `name` in a `/proc/<pid>/maps` text.
fn loaded_library_dir(maps: &str, name: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(Path::new)
        .find(|path| path.file_name().is_some_and(|f| f == name))
        .and_then(Path::parent)
        .map(Path::to_owned)
}

fn open_global(path: &Path) -> Result<(), CudaError> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: libtorch_cuda's initialisers register CUDA kernels with the libtorch already
    // loaded (the same build: it sits beside it); they have no other preconditions.
    let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|e| CudaError::Open { path: path.to_owned(), message: dl_error(&e) })?;
    // Never closed: libtorch keeps pointers into it for the life of the process.
    std::mem::forget(library);
    Ok(())
}

/// libloading's error with the loader's own words (`dlerror`), which it keeps as the source.
fn dl_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(source) => source.to_string(),
        None => e.to_string(),
    }
}

/// The NVIDIA driver API calls the probe makes (`cuda.h`).
struct Driver {
    init: unsafe extern "C" fn(c_uint) -> c_int,
    driver_get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> c_int,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> c_int,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int,
    get_error_name: unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int,
    _library: libloading::Library,
}

/// `cuInit`'s answer when no device is visible.
const CUDA_ERROR_NO_DEVICE: c_int = 100;
/// `cuInit`'s answer when the driver is older than the runtime in use.
const CUDA_ERROR_INSUFFICIENT_DRIVER: c_int = 35;

impl Driver {
    fn open(host: &str) -> Result<Driver, CudaError> {
        let no_driver =
            |e: libloading::Error| CudaError::NoDriver { host: host.into(), message: dl_error(&e) };
        // SAFETY: opening libcuda runs no code with preconditions; the symbol types are the
        // driver API's documented C signatures (cuda.h, CUDA 11 and later).
        unsafe {
            let library = libloading::Library::new(DRIVER).map_err(no_driver)?;
            macro_rules! symbol {
                ($name:literal) => {
                    *library.get($name).map_err(no_driver)?
                };
            }
            Ok(Driver {
                init: symbol!(b"cuInit\0"),
                driver_get_version: symbol!(b"cuDriverGetVersion\0"),
                device_get_count: symbol!(b"cuDeviceGetCount\0"),
                device_get: symbol!(b"cuDeviceGet\0"),
                device_get_name: symbol!(b"cuDeviceGetName\0"),
                get_error_name: symbol!(b"cuGetErrorName\0"),
                _library: library,
            })
        }
    }

    fn error_name(&self, code: c_int) -> String {
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
        if unsafe { (self.get_error_name)(code, &mut name) } != 0 || name.is_null() {
            return format!("CUDA error {code}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }

    fn device_names(&self) -> Vec<String> {
        let mut count: c_int = 0;
        // SAFETY: out-pointers to locals; the driver is initialised.
        if unsafe { (self.device_get_count)(&mut count) } != 0 {
            return Vec::new();
        }
        (0..count)
            .map(|ordinal| {
                let (mut device, mut name) = (0 as c_int, [0 as c_char; 256]);
                // SAFETY: as above; the name buffer's length is passed.
                let ok = unsafe {
                    (self.device_get)(&mut device, ordinal) == 0
                        && (self.device_get_name)(name.as_mut_ptr(), name.len() as c_int, device)
                            == 0
                };
                if ok {
                    // SAFETY: cuDeviceGetName NUL-terminates within the buffer.
                    unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned()
                } else {
                    format!("device {ordinal}")
                }
            })
            .collect()
    }
}

/// The CUDA runtime version of the libtorch_cuda just opened (its `libcudart`), 0 if unknown.
fn runtime_version() -> u32 {
    let this = libloading::os::unix::Library::this();
    // SAFETY: cudaRuntimeGetVersion(int*) only writes the version; it does not initialise CUDA.
    unsafe {
        let Ok(get) =
            this.get::<unsafe extern "C" fn(*mut c_int) -> c_int>(b"cudaRuntimeGetVersion\0")
        else {
            return 0;
        };
        let mut v: c_int = 0;
        if get(&mut v) == 0 { v.max(0) as u32 } else { 0 }
    }
}

impl Probe {
    /// Probes CUDA in this process: opens libtorch_cuda, asks the driver its version,
    /// initialises it and counts the devices. Initialises CUDA, so call it in a process that
    /// forks no CUDA children (the probe process; see the module docs).
    pub fn here() -> Result<Probe, CudaError> {
        let host = super::hostname();
        load()?;
        let driver = Driver::open(&host)?;
        let runtime = runtime_version();
        let mut v: c_int = 0;
        // SAFETY: out-pointer to a local; allowed before cuInit.
        let driver_version =
            if unsafe { (driver.driver_get_version)(&mut v) } == 0 { v.max(0) as u32 } else { 0 };
        let too_old =
            || CudaError::DriverTooOld { host: host.clone(), driver: driver_version, runtime };
        // CUDA's minor version compatibility: a driver for 13.0 runs any 13.x runtime.
        if runtime > 0 && driver_version > 0 && driver_version / 1000 < runtime / 1000 {
            return Err(too_old());
        }
        // SAFETY: cuInit(0) has no preconditions.
        match unsafe { (driver.init)(0) } {
            0 => {}
            CUDA_ERROR_INSUFFICIENT_DRIVER => return Err(too_old()),
            CUDA_ERROR_NO_DEVICE => {
                return Err(no_device(&host, driver.error_name(CUDA_ERROR_NO_DEVICE)));
            }
            code => return Err(CudaError::Init { host, message: driver.error_name(code) }),
        }
        let devices = driver.device_names();
        if devices.is_empty() {
            return Err(no_device(&host, "the driver lists none".into()));
        }
        let seen = tch::Cuda::device_count();
        if seen < devices.len() as i64 {
            return Err(CudaError::NotRegistered { devices: devices.len() as u32 });
        }
        Ok(Probe { devices, driver: driver_version, runtime })
    }

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

/// What the probe process prints.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ProbeAnswer {
    Ok(Probe),
    Err(CudaError),
}

fn no_device(host: &str, why: String) -> CudaError {
    let visible = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!("CUDA_VISIBLE_DEVICES={v:?}"),
        Err(_) => "unset".into(),
    };
    CudaError::NoDevice { host: host.into(), why, visible }
}

/// In a probe process (its environment says so): probes, prints the answer as one JSON line on
/// stdout and exits. Returns at once in any other process.
pub(crate) fn probe_if_asked() {
    if std::env::var_os(PROBE_ENV).is_none() {
        return;
    }
    let answer = match Probe::here() {
        Ok(probe) => ProbeAnswer::Ok(probe),
        Err(e) => ProbeAnswer::Err(e),
    };
    println!("{}", serde_json::to_string(&answer).expect("the answer serialises"));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: ends the process without libtorch's static destructors (as a worker does).
    unsafe { libc::_exit(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_of_libtorch_is_read_from_the_maps() {
        let maps = "\
7f00-7f01 r--p 00000000 fd:01 1 /usr/lib/libc.so.6
7f02-7f03 r-xp 00001000 fd:01 2 /venv/torch/lib/libtorch_cpu.so
7f04-7f05 rw-p 00000000 00:00 0 [heap]
7f06-7f07 r--p 00000000 fd:01 3 /other/libtorch_cpu.so.bak";
        assert_eq!(loaded_library_dir(maps, TORCH_CPU), Some(PathBuf::from("/venv/torch/lib")));
        assert_eq!(loaded_library_dir(maps, "libnothing.so"), None);
    }

    #[test]
    fn a_cpu_only_libtorch_is_named_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let err = beside(dir.path()).unwrap_err();
        assert_eq!(err, CudaError::CpuOnlyLibtorch { dir: dir.path().to_owned() });
        let text = err.to_string();
        assert!(text.contains("no CUDA") && text.contains("torch==2.11.0"), "{text}");
        std::fs::write(dir.path().join(TORCH_CUDA), b"").unwrap();
        assert_eq!(beside(dir.path()).unwrap(), dir.path().join(TORCH_CUDA));
    }

    #[test]
    fn devices_are_named_as_torch_names_them() {
        let parse = |text| Device::parse(text).map(torch_device);
        assert_eq!(parse("cpu"), Some(tch::Device::Cpu));
        assert_eq!(parse("cuda"), Some(tch::Device::Cuda(0)));
        assert_eq!(parse(" cuda:3 "), Some(tch::Device::Cuda(3)));
        for wrong in ["gpu", "cuda:x", "cuda:-1", "", "CPU"] {
            assert_eq!(parse(wrong), None, "{wrong}");
        }
        assert_eq!(use_device(tch::Device::Cpu), Ok(tch::Device::Cpu));
    }

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
