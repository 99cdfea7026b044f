//! The cluster: every worker group of every trial draws its resources from one pool. The pool
//! (`pool`) is a pure state machine; this module also holds the embedded default, where the
//! driver's machine is the whole cluster. Head and node agents over gRPC build on the same pool
//! (`head`, `node`, `client`).

pub(crate) mod binary;
pub mod client;
pub mod head;
pub mod node;
pub mod pool;
pub mod slurm;

use pool::{NodeSpec, PlacementRequest, Pool, PoolStatus, Resources, Strategy};

use crate::config::{PlacementStrategy, ScalingConfig};
use crate::error::{Error, Result};
pub use crate::rpc::new_token;
use crate::setting::Setting;

impl From<PlacementStrategy> for Strategy {
    fn from(s: PlacementStrategy) -> Self {
        match s {
            PlacementStrategy::Pack => Strategy::Pack,
            PlacementStrategy::Spread => Strategy::Spread,
            PlacementStrategy::StrictPack => Strategy::StrictPack,
            PlacementStrategy::StrictSpread => Strategy::StrictSpread,
        }
    }
}

pub use crate::config::{ADDRESS_ENV, TOKEN_ENV};

/// The local machine as a one-node cluster: CPUs and GPUs detected, overridable with
/// `RTUNE_NUM_CPUS` and `RTUNE_NUM_GPUS` (like `ray.init(num_cpus=..., num_gpus=...)`). A driver
/// run under `CUDA_VISIBLE_DEVICES` offers the devices it lists (see [`local_devices`]).
pub fn local_node() -> Result<NodeSpec> {
    let mut node = NodeSpec::detect_local();
    if let Some(devices) = local_devices() {
        node = node.gpus(devices.len() as u32);
    }
    for (var, is_gpu) in [("RTUNE_NUM_CPUS", false), ("RTUNE_NUM_GPUS", true)] {
        let Ok(text) = std::env::var(var) else { continue };
        let n: f64 =
            text.trim().parse().ok().filter(|n: &f64| n.is_finite() && *n >= 0.0).ok_or_else(
                || {
                    Error::config(
                        "environment",
                        format!("{var}={text:?} is not a count; use e.g. {var}=4"),
                    )
                },
            )?;
        node = if is_gpu { node.gpus(n as u32) } else { node.cpus(n) };
    }
    Ok(node)
}

/// The devices a driver run under `CUDA_VISIBLE_DEVICES` may give its local workers, by name;
/// None when it is not set (every device of the machine). The pool's device indices `0..n` map
/// to these names (as a node agent maps them: `map_devices`), so a worker gets the physical
/// device the user meant and never one outside the list.
pub fn local_devices() -> Option<Vec<String>> {
    std::env::var("CUDA_VISIBLE_DEVICES").ok().map(|list| device_list(&list))
}

pub(crate) use crate::sys::device_list;

/// The pool's device indices (`0,1`) as the names of the node's own devices (`2,3`). An index
/// beyond the list is kept as it is (the pool never hands one out).
pub(crate) fn map_devices(indices: &str, devices: &[String]) -> String {
    let name = |index: &str| -> String {
        let i: Option<usize> = index.trim().parse().ok();
        i.and_then(|i| devices.get(i)).cloned().unwrap_or_else(|| index.to_owned())
    };
    indices.split(',').map(name).collect::<Vec<_>>().join(",")
}

/// For a request that asks for GPUs: the alive nodes of `status` whose GPUs are not offered
/// because their workers could not use them, and why (`; node 3 (10.0.0.7:0) has GPUs its
/// workers cannot use: <cause>`); empty otherwise. Added to a refusal that would else only say
/// the cluster has too few GPUs.
pub(crate) fn unusable_gpus_note(status: &PoolStatus, request: &PlacementRequest) -> String {
    if !request.bundles.iter().any(|b| b.gpu > 0.0) {
        return String::new();
    }
    status
        .nodes
        .iter()
        .filter(|n| n.alive)
        .filter_map(|n| {
            let error = n.gpu_error.as_ref()?;
            Some(format!(
                "; node {} ({}) has GPUs its workers cannot use: {error}",
                n.id, n.address
            ))
        })
        .collect()
}

/// Fails, with a config error naming the cause, when a group of `scaling` could never be
/// placed on the alive nodes of a cluster whose status is `status`: what the head would refuse
/// its first reservation for, said before any trial starts.
pub(crate) fn check_fits_cluster(status: &PoolStatus, scaling: &ScalingConfig) -> Result<()> {
    let request = worker_request(scaling, "fit check");
    let mut pool = Pool::new();
    for n in status.nodes.iter().filter(|n| n.alive) {
        // The head accepted these nodes, so this pool does too.
        let _ = pool.add_node(NodeSpec::new(n.address.clone(), n.total.clone()));
    }
    match pool.request(request.clone()) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::config(
            Setting::Scaling,
            format!("{e}{}", unusable_gpus_note(status, &request)),
        )),
    }
}

/// The bundle one worker of `scaling` holds.
pub(crate) fn worker_bundle(scaling: &ScalingConfig) -> Resources {
    let mut bundle = Resources::new().cpu(scaling.cpus_per_worker()).gpu(scaling.gpus_per_worker());
    for (name, &amount) in &scaling.resources_per_worker {
        if name != "CPU" && name != "GPU" {
            bundle = bundle.custom(name.clone(), amount);
        }
    }
    bundle
}

/// The placement request of a run's worker group: one bundle per worker.
pub(crate) fn worker_request(scaling: &ScalingConfig, label: &str) -> PlacementRequest {
    PlacementRequest::uniform(
        scaling.placement_strategy.into(),
        scaling.ranks(),
        worker_bundle(scaling),
    )
    .label(label)
}

/// A pool of this one machine (the embedded default).
pub(crate) fn local_pool(node: NodeSpec) -> Result<Pool> {
    let mut pool = Pool::new();
    pool.add_node(node).map_err(|e| {
        Error::config(
            Setting::Scaling,
            format!(
                "this machine's resources cannot be pooled: {e}; set RTUNE_NUM_CPUS / \
                 RTUNE_NUM_GPUS if detection is wrong"
            ),
        )
    })?;
    Ok(pool)
}

/// A worker group the local machine can never hold, as a config error saying what to change.
pub(crate) fn local_fit_error(e: pool::PoolError) -> Error {
    Error::config(
        Setting::Scaling,
        format!(
            "does not fit this machine: {e}; lower num_workers or resources_per_worker, or set \
             RTUNE_NUM_CPUS / RTUNE_NUM_GPUS if detection is wrong"
        ),
    )
}

/// Reserves a placement group for `scaling` on a fresh one-node pool of `node`. A group that can
/// never fit is a config error naming the resource, instead of a run that waits forever.
#[cfg(test)]
fn reserve_local(
    node: NodeSpec,
    scaling: &ScalingConfig,
    label: &str,
) -> Result<pool::Reservation> {
    let mut pool = local_pool(node)?;
    pool.request(worker_request(scaling, label)).map_err(local_fit_error)?;
    pool.schedule().into_iter().next().ok_or_else(|| {
        Error::config(Setting::Scaling, "the placement group does not fit the local machine")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_workers_for_the_machine_is_a_clear_error() {
        let err = reserve_local(NodeSpec::local(2.0, 0), &ScalingConfig::workers(3), "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("CPU") && err.contains("RTUNE_NUM_CPUS"), "{err}");
    }

    #[test]
    fn pool_device_indices_map_to_the_nodes_devices() {
        let devices = ["2".to_owned(), "5".to_owned()];
        assert_eq!(map_devices("0", &devices), "2");
        assert_eq!(map_devices("1,0", &devices), "5,2");
        assert_eq!(device_list("2, 5,"), devices);
        assert_eq!(device_list("1,-1,3"), ["1"]);
        assert!(device_list("NoDevFiles").is_empty() && device_list("").is_empty());
    }

    #[test]
    fn fractional_gpus_share_a_device() {
        let scaling = ScalingConfig::workers(2)
            .use_gpu(true)
            .resources_per_worker([("GPU".to_string(), 0.5)].into());
        let r = reserve_local(NodeSpec::local(4.0, 1), &scaling, "t").unwrap();
        let devices: Vec<String> = r.bundles.iter().map(|b| b.cuda_visible_devices()).collect();
        assert_eq!(devices, vec!["0".to_string(), "0".to_string()]);
    }
}
