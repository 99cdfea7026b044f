//! rtune's build script: an rpath to libtorch so binaries, tests and examples run without
//! LD_LIBRARY_PATH (the gRPC code is rtune-core's). Only libtorch's CPU library is linked: CUDA is opened at run time by the
//! processes given a GPU (src/cuda.rs). The libtorch version itself is checked earlier, by rtune-libtorch-check.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without these cargo reruns this script, and so rebuilds rtune, whenever any file of the
    // package changes (a test, an example, the README, a benchmark script).
    println!("cargo::rerun-if-changed=build.rs");
    // torch-sys (links = "tch") passes its lib folder on as DEP_TCH_LIBTORCH_LIB.
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")?;
    println!("cargo::rustc-link-arg=-Wl,-rpath,{lib}");
    Ok(())
}
