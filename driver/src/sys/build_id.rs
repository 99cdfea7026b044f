//! The identity of the running executable, so a worker started from a different binary than its
//! driver's (say, rebuilt mid-sweep) is refused: train functions travel as offsets into the
//! binary, which only mean the same function in the same build.
//!
//! On Linux the GNU build id note that the linker writes into the executable (a hash of its
//! contents) is read from the loaded image itself: no file I/O, microseconds. Without one, a
//! hash of the executable's bytes is used.

use std::sync::OnceLock;

/// This process's build id, computed once.
pub fn build_id() -> &'static [u8] {
    static ID: OnceLock<Vec<u8>> = OnceLock::new();
    ID.get_or_init(|| gnu_build_id().unwrap_or_else(hash_of_executable))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

fn hash_of_executable() -> Vec<u8> {
    // FNV-1a over the file: slow for big binaries but only the fallback.
    let bytes = std::env::current_exe().and_then(std::fs::read).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in &bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.to_le_bytes().to_vec()
}

#[cfg(target_os = "linux")]
fn gnu_build_id() -> Option<Vec<u8>> {
    use std::ffi::c_void;

    const NT_GNU_BUILD_ID: u32 = 3;

    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call, and `data`
        // is the `&mut Option<Vec<u8>>` given below.
        let (info, found) = unsafe { (&*info, &mut *(data as *mut Option<Vec<u8>>)) };
        // The first object visited is the main program; stop after it.
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_NOTE {
                continue;
            }
            let start = (info.dlpi_addr + ph.p_vaddr) as *const u8;
            // SAFETY: a PT_NOTE segment is mapped readable for p_memsz bytes.
            let notes = unsafe { std::slice::from_raw_parts(start, ph.p_memsz as usize) };
            if let Some(id) = find_note(notes, NT_GNU_BUILD_ID) {
                *found = Some(id);
                break;
            }
        }
        1
    }

    let mut found: Option<Vec<u8>> = None;
    // SAFETY: `visit` only reads the headers it is given and writes through `data`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut _ as *mut c_void) };
    found
}

#[cfg(not(target_os = "linux"))]
fn gnu_build_id() -> Option<Vec<u8>> {
    None
}

/// Walks ELF notes (4-byte aligned namesz, descsz, type, name, desc) for a "GNU" note of `kind`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn find_note(mut notes: &[u8], kind: u32) -> Option<Vec<u8>> {
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let align = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let (namesz, descsz, ty) =
            (word(notes, 0)? as usize, word(notes, 4)? as usize, word(notes, 8)?);
        let name = notes.get(12..12 + namesz)?;
        let desc_at = 12 + align(namesz);
        let desc = notes.get(desc_at..desc_at + descsz)?;
        if ty == kind && name.starts_with(b"GNU") {
            return Some(desc.to_vec());
        }
        notes = notes.get(desc_at + align(descsz)..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_is_stable_and_nonempty() {
        assert!(!build_id().is_empty());
        assert_eq!(build_id(), build_id());
        assert_eq!(from_hex(&hex(build_id())).as_deref(), Some(build_id()));
    }
}
