//! What each GPU of this machine is doing, from NVIDIA's management library (NVML, the library
//! behind `nvidia-smi`), opened at run time: memory in use and utilisation, for the terminal
//! UI's header and `rtune status`. Where there is no NVIDIA driver there is no NVML, and
//! [`usage`] says so with `None`: the callers then show nothing.
//!
//! NVML is not CUDA: asking it creates no CUDA context, so the driver process may ask.

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// One GPU as NVML sees it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuUsage {
    /// NVML's index of the device (the machine's order, as `nvidia-smi` numbers them).
    pub index: u32,
    pub name: String,
    /// `GPU-<uuid>`, as `CUDA_VISIBLE_DEVICES` may name it.
    pub uuid: String,
    pub memory_used: u64,
    pub memory_total: u64,
    /// Percent of the last sample period in which a kernel ran.
    pub utilization: u32,
}

impl GpuUsage {
    /// `GPU0 31% 12.3/79.6 GB`.
    pub fn short(&self) -> String {
        let gb = |b: u64| b as f64 / 1e9;
        format!(
            "GPU{} {}% {:.1}/{:.1} GB",
            self.index,
            self.utilization,
            gb(self.memory_used),
            gb(self.memory_total)
        )
    }

    /// Whether `CUDA_VISIBLE_DEVICES`-style names (`0`, `GPU-…`) include this device.
    pub fn named_in(&self, names: &[String]) -> bool {
        names.iter().any(|n| *n == self.index.to_string() || self.uuid.starts_with(n.as_str()))
    }
}

type Device = *mut c_void;

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// The NVML calls made here (`nvml.h`, NVML 11 and later).
struct Api {
    device_get_count: unsafe extern "C" fn(*mut c_uint) -> c_int,
    device_get_handle_by_index: unsafe extern "C" fn(c_uint, *mut Device) -> c_int,
    device_get_name: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int,
    device_get_uuid: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int,
    device_get_memory_info: unsafe extern "C" fn(Device, *mut Memory) -> c_int,
    device_get_utilization_rates: unsafe extern "C" fn(Device, *mut Utilization) -> c_int,
    _library: libloading::Library,
}

// SAFETY: NVML's calls are thread-safe (nvml.h: "all NVML functions are thread-safe").
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

impl Api {
    fn open() -> Option<Api> {
        // SAFETY: opening NVML runs no code with preconditions; the symbol types are NVML's
        // documented C signatures; nvmlInit_v2 is called once, before any other call.
        unsafe {
            let library = libloading::Library::new("libnvidia-ml.so.1").ok()?;
            let init: unsafe extern "C" fn() -> c_int = *library.get(b"nvmlInit_v2\0").ok()?;
            if init() != 0 {
                return None;
            }
            macro_rules! symbol {
                ($name:literal) => {
                    *library.get($name).ok()?
                };
            }
            Some(Api {
                device_get_count: symbol!(b"nvmlDeviceGetCount_v2\0"),
                device_get_handle_by_index: symbol!(b"nvmlDeviceGetHandleByIndex_v2\0"),
                device_get_name: symbol!(b"nvmlDeviceGetName\0"),
                device_get_uuid: symbol!(b"nvmlDeviceGetUUID\0"),
                device_get_memory_info: symbol!(b"nvmlDeviceGetMemoryInfo\0"),
                device_get_utilization_rates: symbol!(b"nvmlDeviceGetUtilizationRates\0"),
                _library: library,
            })
        }
    }

    fn device(&self, index: u32) -> Option<GpuUsage> {
        let text = |f: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int, d: Device| {
            let mut buf = [0 as c_char; 128];
            // SAFETY: the buffer's length is passed; NVML NUL-terminates within it.
            if unsafe { f(d, buf.as_mut_ptr(), buf.len() as c_uint) } != 0 {
                return String::new();
            }
            // SAFETY: NUL-terminated within the buffer (above).
            unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
        };
        let mut device: Device = std::ptr::null_mut();
        let (mut memory, mut rates) = (Memory::default(), Utilization::default());
        // SAFETY: out-pointers to locals; `device` is a handle NVML gave for this index.
        unsafe {
            if (self.device_get_handle_by_index)(index, &mut device) != 0 {
                return None;
            }
            if (self.device_get_memory_info)(device, &mut memory) != 0 {
                return None;
            }
            // Not every device reports utilisation (some MIG slices): 0 then.
            let _ = (self.device_get_utilization_rates)(device, &mut rates);
        }
        Some(GpuUsage {
            index,
            name: text(self.device_get_name, device),
            uuid: text(self.device_get_uuid, device),
            memory_used: memory.used,
            memory_total: memory.total,
            utilization: rates.gpu,
        })
    }
}

/// The GPU of NVML's index `index` now; None where NVML cannot be opened or has no such device.
pub fn device_usage(index: u32) -> Option<GpuUsage> {
    api()?.device(index)
}

/// The GPU a process's CUDA device `ordinal` is, among `gpus`: the `ordinal`-th of the
/// devices its `CUDA_VISIBLE_DEVICES` names (`visible`), or NVML's device `ordinal` where that
/// is not set.
pub fn of_device<'g>(
    gpus: &'g [GpuUsage],
    visible: Option<&str>,
    ordinal: usize,
) -> Option<&'g GpuUsage> {
    match visible {
        Some(list) => {
            let name = super::device_list(list).into_iter().nth(ordinal)?;
            gpus.iter().find(|g| g.named_in(std::slice::from_ref(&name)))
        }
        None => gpus.iter().find(|g| g.index as usize == ordinal),
    }
}

/// NVML, opened on first use; None where it cannot be (no NVIDIA driver).
fn api() -> Option<&'static Api> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    API.get_or_init(Api::open).as_ref()
}

/// Every GPU of this machine now; None where NVML cannot be opened (no NVIDIA driver).
pub fn usage() -> Option<Vec<GpuUsage>> {
    let api = api()?;
    let mut count: c_uint = 0;
    // SAFETY: out-pointer to a local.
    if unsafe { (api.device_get_count)(&mut count) } != 0 {
        return None;
    }
    Some((0..count).filter_map(|i| api.device(i)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_reads_in_one_short_line_and_is_found_by_either_name() {
        let gpu = GpuUsage {
            index: 1,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: "GPU-1f2e3d4c-0000-1111-2222-333344445555".into(),
            memory_used: 12_300_000_000,
            memory_total: 79_600_000_000,
            utilization: 31,
        };
        assert_eq!(gpu.short(), "GPU1 31% 12.3/79.6 GB");
        assert!(gpu.named_in(&["0".into(), "1".into()]));
        assert!(gpu.named_in(&["GPU-1f2e3d4c".into()]));
        assert!(!gpu.named_in(&["0".into()]));
    }

    /// A process's CUDA device is found by its visible devices' names, or by NVML's index
    /// where it sees every device.
    #[test]
    fn a_cuda_device_is_found_among_the_machines_gpus() {
        let gpu = |index: u32, uuid: &str| GpuUsage {
            index,
            name: "GPU".into(),
            uuid: uuid.into(),
            memory_used: 0,
            memory_total: 1,
            utilization: 0,
        };
        let gpus = [gpu(0, "GPU-aaaa"), gpu(1, "GPU-bbbb"), gpu(2, "GPU-cccc")];
        assert_eq!(of_device(&gpus, Some("2,0"), 0).map(|g| g.index), Some(2));
        assert_eq!(of_device(&gpus, Some("2,0"), 1).map(|g| g.index), Some(0));
        assert_eq!(of_device(&gpus, Some("GPU-bbbb"), 0).map(|g| g.index), Some(1));
        assert_eq!(of_device(&gpus, None, 1).map(|g| g.index), Some(1));
        assert!(
            of_device(&gpus, Some("2"), 1).is_none() && of_device(&gpus, Some("7"), 0).is_none()
        );
    }
}
