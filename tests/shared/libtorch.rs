//! A CPU-only libtorch made from this process's own, for the tests that check how rtune
//! refuses GPUs with one (the integration tests and the GPU group include this file).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The folder of the libtorch this process runs with (from its memory map, so an rpath, a
/// `LIBTORCH` build or `LD_LIBRARY_PATH` all count).
pub fn libtorch_dir() -> Result<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let cpu = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libtorch_cpu.so"))
        .context("libtorch_cpu.so is not mapped in this process")?;
    Ok(Path::new(cpu).parent().context("its folder")?.to_owned())
}

/// This libtorch's folder without `libtorch_cuda.so`: its other files hard-linked into a
/// temporary folder beside the torch folder (hard links need one file system), and the
/// `LD_LIBRARY_PATH` that puts it first (binaries' rpath is a RUNPATH, which that overrides),
/// then the CUDA wheels' libraries that libtorch_cpu finds relative to its own folder (it needs
/// libcupti), then the path this process has.
pub fn cpu_only_libtorch() -> Result<(tempfile::TempDir, OsString)> {
    let lib = libtorch_dir()?;
    let folder = tempfile::tempdir_in(lib.parent().context("the torch folder")?)?;
    for entry in std::fs::read_dir(&lib)? {
        let entry = entry?;
        if entry.file_name() != "libtorch_cuda.so" && entry.file_type()?.is_file() {
            std::fs::hard_link(entry.path(), folder.path().join(entry.file_name()))?;
        }
    }
    let mut path = vec![folder.path().to_owned()];
    if let Ok(nvidia) = std::fs::read_dir(lib.join("../../nvidia")) {
        path.extend(nvidia.filter_map(|e| e.ok()).map(|e| e.path().join("lib")));
    }
    if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH") {
        path.extend(std::env::split_paths(&rest));
    }
    Ok((folder, std::env::join_paths(path)?))
}
