//! rtune's build script:
//! - an rpath to libtorch, so binaries, tests and examples run without LD_LIBRARY_PATH, and
//!   libtorch's folder passed on to dependents' build scripts for theirs (the
//!   gRPC code is rtune-driver's). Only libtorch's CPU library is linked: CUDA is opened at run
//!   time by the processes given a GPU (src/cuda.rs). The libtorch version itself is checked
//!   earlier, by rtune-libtorch-check.
//! - `RTUNE_SOURCES`, a hash of the sources `rtune` and `rtune-torch` are built from: `rtune`
//!   hands its own to `rtune-torch`, which refuses to run for an `rtune` built from other
//!   sources (`cargo build --bin rtune` alone leaves an older `rtune-torch` beside it).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

/// What both programs are built from, from the workspace root: the crates' code and manifests,
/// the protocol, and the locked dependencies (not tests, examples or benchmarks).
const SOURCES: [&str; 12] = [
    "src",
    "driver/src",
    "driver/build.rs",
    "driver/Cargo.toml",
    "cli/src",
    "cli/Cargo.toml",
    "searchers/src",
    "searchers/Cargo.toml",
    "proto",
    "build.rs",
    "Cargo.toml",
    "Cargo.lock",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without these cargo reruns this script, and so rebuilds rtune, whenever any file of the
    // package changes (a test, an example, the README, a benchmark script).
    let mut hasher = DefaultHasher::new();
    for source in SOURCES {
        println!("cargo::rerun-if-changed={source}");
        hash_tree(Path::new(source), &mut hasher)?;
    }
    // std's hasher with its fixed keys: the same for the same files within one toolchain, all
    // that is compared (two programs of one build).
    println!("cargo::rustc-env=RTUNE_SOURCES={:016x}", hasher.finish());
    // torch-sys (links = "tch") passes its lib folder on as DEP_TCH_LIBTORCH_LIB.
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")?;
    println!("cargo::rustc-link-arg=-Wl,-rpath,{lib}");
    // And on to the build scripts of crates that depend on rtune (`links = "rtune"`), as
    // DEP_RTUNE_LIBTORCH_LIB: a user's binaries get the same rpath from one line of their own
    // build.rs (docs/crate.md; a library's link arguments reach no other package's binaries).
    println!("cargo::metadata=libtorch_lib={lib}");
    Ok(())
}

/// Hashes the files at `path` (one, or a folder's, in name order) with their paths.
fn hash_tree(path: &Path, hasher: &mut DefaultHasher) -> std::io::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<_> =
            std::fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
        entries.sort();
        for entry in entries {
            hash_tree(&entry, hasher)?;
        }
    } else if path.is_file() {
        path.hash(hasher);
        std::fs::read(path)?.hash(hasher);
    }
    Ok(())
}
