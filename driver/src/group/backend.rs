//! A Backend per framework (Ray Train's `Backend` with its `BackendConfig`): what a worker
//! group sets up around its train function on top of what every group has, rtune's rendezvous
//! and CPU ring (each rank's place, the barrier, `TrainContext::all_reduce`, and what a
//! backend bootstraps over).
//!
//! This is the driver's half: what the ranks are told to set up, decided from where they are
//! once every rank has joined (and again when an elastic group re-forms in place), and whether
//! the backend's process group can re-form in place at all. The worker's half
//! (`rtune::worker::backend`, by the same name) sets it up in each rank before the train
//! function runs and tears it down after it.
//!
//! The Torch backend ([`TorchConfig`]) is the first: a model on the CPU averages its gradients
//! through the ring; a model on a GPU through NCCL on the device, unless two ranks of the group
//! share a physical GPU (NCCL refuses two ranks on one device) or the config asks for the ring:
//! then through the ring as well, each bucket copied to the host and back.
//!
//! The tree libraries' backends ([`TreeBackend`]: XGBoost's, LightGBM's) are the next: each rank
//! joins the library's own collective, bootstrapped over the ring (XGBoost's tracker on rank 0,
//! whose worker arguments rank 0 broadcasts; LightGBM's machine list, each rank's port gathered
//! by every rank). It does not re-form in place.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Seat;

/// The driver's half of a framework's backend (see the module docs).
pub trait Backend: fmt::Debug + Send + Sync {
    /// The name its worker half goes by.
    fn name(&self) -> &'static str;

    /// What every rank of the group whose ranks sit at `seats` (in rank order) sets up, the
    /// same for each: JSON its worker half reads. Asked once every rank of an attempt has
    /// joined, and again for the group as it is when an elastic group re-forms in place.
    fn setup(&self, group: &str, seats: &[Seat]) -> String;

    /// Whether its process group re-forms in place at another size, between two steps (an
    /// elastic group going on without a lost rank, or taking new ones in); else a resize
    /// starts the group again from its latest checkpoint.
    fn resizes_in_place(&self) -> bool;
}

/// The Torch backend's settings (Ray's `TorchConfig`): what a model on a GPU averages its
/// gradients through. A model on the CPU always goes through rtune's ring.
///
/// ```
/// use rtune_driver::train::TorchConfig;
/// // GPU gradients through the host ring even where every rank has a GPU of its own (Ray's
/// // `TorchConfig(backend="gloo")`), e.g. to rule NCCL out.
/// let config = TorchConfig::new().host_ring();
/// # let _ = config;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorchConfig {
    gpu: GpuCollective,
}

/// What a rank's models on a GPU average through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuCollective {
    /// NCCL on the device (where no two ranks share one).
    #[default]
    Nccl,
    /// rtune's ring, each bucket copied to the host and back.
    HostRing,
}

/// What the Torch backend tells each rank (its worker half's input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorchSetup {
    pub gpu: GpuCollective,
}

impl TorchConfig {
    /// The name the Torch backend's halves go by.
    pub const NAME: &'static str = "torch";

    /// NCCL for models on GPUs of their own, the ring for the rest.
    pub fn new() -> Self {
        TorchConfig::default()
    }

    /// Models on a GPU average through the host ring too, even where NCCL could be used.
    pub fn host_ring(mut self) -> Self {
        self.gpu = GpuCollective::HostRing;
        self
    }

    /// What a rank of the group at `seats` is told.
    fn decide(&self, group: &str, seats: &[Seat]) -> TorchSetup {
        if self.gpu == GpuCollective::HostRing {
            return TorchSetup { gpu: GpuCollective::HostRing };
        }
        let shared = shared_gpus(seats);
        for (node, device, ranks) in &shared {
            tracing::info!(
                group,
                "ranks {ranks:?} share GPU {device} on {node}: the group averages its gradients \
                 through the CPU ring (NCCL refuses two ranks on one device)"
            );
        }
        let gpu = if shared.is_empty() { GpuCollective::Nccl } else { GpuCollective::HostRing };
        TorchSetup { gpu }
    }
}

impl Backend for TorchConfig {
    fn name(&self) -> &'static str {
        TorchConfig::NAME
    }

    fn setup(&self, group: &str, seats: &[Seat]) -> String {
        serde_json::to_string(&self.decide(group, seats)).expect("the setup serialises")
    }

    fn resizes_in_place(&self) -> bool {
        true
    }
}

/// The backend of a tree library's trainer (Ray's `XGBoostConfig`, `LightGBMConfig`): every
/// rank of a group of more than one joins the library's collective (module docs). Each rank
/// decides where it listens itself, so the driver tells it nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TreeBackend {
    XGBoost,
    LightGBM,
}

impl TreeBackend {
    /// The names its halves go by.
    pub const XGBOOST: &'static str = "xgboost";
    pub const LIGHTGBM: &'static str = "lightgbm";
}

impl Backend for TreeBackend {
    fn name(&self) -> &'static str {
        match self {
            TreeBackend::XGBoost => TreeBackend::XGBOOST,
            TreeBackend::LightGBM => TreeBackend::LIGHTGBM,
        }
    }

    fn setup(&self, _group: &str, _seats: &[Seat]) -> String {
        "{}".into()
    }

    /// The libraries' collectives have a fixed size once made: a resize starts the group
    /// again from its latest checkpoint (and elastic groups are refused).
    fn resizes_in_place(&self) -> bool {
        false
    }
}

/// The physical device a GPU rank's CUDA work goes to (its first visible one, `cuda:0`), on
/// its node.
fn device_of(seat: &Seat) -> Option<(&str, &str)> {
    let first = seat.gpus.as_deref()?.split(',').next()?.trim();
    (!first.is_empty()).then_some((seat.node.as_str(), first))
}

/// The physical GPUs that two or more ranks share: (node, device, ranks), in rank order,
/// decided from where the ranks are, before any collective is tried.
fn shared_gpus(seats: &[Seat]) -> Vec<(String, String, Vec<usize>)> {
    let mut by_device: Vec<((&str, &str), Vec<usize>)> = Vec::new();
    for (rank, seat) in seats.iter().enumerate() {
        let Some(device) = device_of(seat) else { continue };
        match by_device.iter_mut().find(|(d, _)| *d == device) {
            Some((_, ranks)) => ranks.push(rank),
            None => by_device.push((device, vec![rank])),
        }
    }
    by_device
        .into_iter()
        .filter(|(_, ranks)| ranks.len() > 1)
        .map(|((node, device), ranks)| (node.to_owned(), device.to_owned(), ranks))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(node: &str, gpus: Option<&str>) -> Seat {
        Seat { node: node.into(), address: node.into(), gpus: gpus.map(Into::into), pid: 1 }
    }

    #[test]
    fn ranks_on_one_physical_gpu_are_found_from_their_seats() {
        // Two halves of GPU 0 on one node: shared. The same device name on another node, a
        // rank whose first GPU differs, and CPU ranks: not.
        let seats = [
            seat("a", Some("0")),
            seat("a", Some("0")),
            seat("b", Some("0")),
            seat("a", Some("1,0")),
            seat("a", None),
            seat("a", None),
        ];
        assert_eq!(shared_gpus(&seats), vec![("a".into(), "0".into(), vec![0, 1])]);
        assert!(shared_gpus(&seats[1..]).is_empty());
        // Devices named by a node agent's mapping (Slurm gives `2,5`) or by UUID compare as
        // named.
        let uuids = [seat("a", Some("GPU-1f2e")), seat("a", Some("GPU-1f2e"))];
        assert_eq!(shared_gpus(&uuids)[0].2, vec![0, 1]);
    }

    /// NCCL where every GPU rank has a device of its own; the host ring where two share one,
    /// or where the config asks for it; the setup as the worker half reads it.
    #[test]
    fn the_torch_backend_picks_the_gpu_collective_from_the_seats() {
        let own = [seat("a", Some("0")), seat("a", Some("1"))];
        let shared = [seat("a", Some("0")), seat("a", Some("0"))];
        let torch = TorchConfig::new();
        assert_eq!(torch.decide("g", &own).gpu, GpuCollective::Nccl);
        assert_eq!(torch.decide("g", &shared).gpu, GpuCollective::HostRing);
        assert_eq!(TorchConfig::new().host_ring().decide("g", &own).gpu, GpuCollective::HostRing);
        let told: TorchSetup = serde_json::from_str(&torch.setup("g", &shared)).unwrap();
        assert_eq!(told.gpu, GpuCollective::HostRing);
        assert_eq!(torch.setup("g", &own), r#"{"gpu":"nccl"}"#);
        assert!(torch.resizes_in_place());
    }
}
