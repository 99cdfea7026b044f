//! rtune's build script: gRPC code from proto/ (protoc comes from the protoc-bin-vendored crate,
//! nothing to install) and an rpath to libtorch so binaries, tests and examples run without
//! LD_LIBRARY_PATH. Only libtorch's CPU library is linked: CUDA is opened at run time by the
//! processes given a GPU (src/cuda.rs). The libtorch version itself is checked earlier, by rtune-libtorch-check.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without these cargo reruns this script, and so rebuilds rtune, whenever any file of the
    // package changes (a test, an example, the README, a benchmark script).
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; tonic-prost-build reads PROTOC from the env.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let protos = [
        "proto/rtune/v1/worker.proto",
        "proto/rtune/v1/cluster.proto",
        "proto/rtune/v1/watch.proto",
    ];
    tonic_prost_build::configure().compile_protos(&protos, &["proto"])?;

    // torch-sys (links = "tch") passes its lib folder on as DEP_TCH_LIBTORCH_LIB.
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")?;
    println!("cargo::rustc-link-arg=-Wl,-rpath,{lib}");
    Ok(())
}
