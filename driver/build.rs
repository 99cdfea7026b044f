//! rtune-driver's build script: gRPC code from the repository's proto/ (protoc comes from the
//! protoc-bin-vendored crate, nothing to install).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=../proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; tonic-prost-build reads PROTOC from the env.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let protos = [
        "../proto/rtune/v1/worker.proto",
        "../proto/rtune/v1/cluster.proto",
        "../proto/rtune/v1/watch.proto",
        "../proto/inference/grpc_service.proto",
    ];
    tonic_prost_build::configure().compile_protos(&protos, &["../proto"])?;
    Ok(())
}
