//! The wire types and gRPC services generated from `proto/rtune/v1/` (`worker`, `cluster`,
//! `watch`) by build.rs, and nothing else: prost types stay at the gRPC edges (the hub, the
//! worker link, the head and its clients, the watch stream) and are turned into rtune's own
//! types there.

tonic::include_proto!("rtune.v1");

/// The Open Inference Protocol's gRPC service (`proto/inference/`), which `rtune serve`
/// answers.
pub mod inference {
    tonic::include_proto!("inference");
}
