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
//! predict --device cuda`, a [`TorchPredictor`](crate::model::TorchPredictor) asked for a GPU,
//! and the probe. Any other code may call [`load`] first thing; a `tch::Cuda` call made before
//! it caches libtorch's CPU-only hooks, and CUDA then stays unavailable in that process.
//!
//! The probe ([`Probe`], the driver's side in `rtune_driver::sys::cuda_probe`) is what the driver runs before any trial that asks for GPUs: the same
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

use crate::native::{dl_error, loaded_library_dir};

pub use rtune_driver::sys::cuda_probe::{CudaError, PROBE_ENV, Probe};
use rtune_driver::sys::cuda_probe::{ProbeAnswer, TORCH_CPU, TORCH_CUDA, no_device};
use rtune_driver::sys::{Device, hostname};

/// The NVIDIA driver's user-space library.
const DRIVER: &str = "libcuda.so.1";

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
/// [`probe_here`]: this process then has CUDA initialised), and checks the device exists.
/// For a process that uses the GPU itself (prediction), not for one that forks workers.
pub fn use_device(device: tch::Device) -> Result<tch::Device, CudaError> {
    let tch::Device::Cuda(index) = device else { return Ok(device) };
    let probe = probe_here()?;
    if index >= probe.devices.len() {
        return Err(no_device(
            &hostname(),
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

/// Probes CUDA in this process: opens libtorch_cuda, asks the driver its version,
/// initialises it and counts the devices. Initialises CUDA, so call it in a process that
/// forks no CUDA children (the probe process; see the module docs).
pub fn probe_here() -> Result<Probe, CudaError> {
    let host = hostname();
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

/// In a probe process (its environment says so): probes, prints the answer as one JSON line on
/// stdout and exits. Returns at once in any other process.
pub(crate) fn probe_if_asked() {
    if std::env::var_os(PROBE_ENV).is_none() {
        return;
    }
    let answer = match probe_here() {
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
}
