//! Where a run's workers go: the local machine's shared pool (reserved once for the run; an
//! elastic group grows there by a reservation per rank, and gives them back as it shrinks) or
//! a head's cluster (reserved per attempt, so a group that lost a node is placed again on the
//! nodes left; an elastic group takes as many ranks as are free then, up to its max).
//! `Elastic` carries out an elastic group's resizes at its checkpoints as its scaling policy
//! decides them: room to take, or room to give back to a run that waits.

use crate::cluster::client::{self, Client, ReserveOptions};
use crate::cluster::pool::{PgId, PlacementRequest};
use crate::config::ScalingConfig;
use crate::error::{Error, Result};
use crate::group::{Launcher, RankPlacement};
use crate::runtime::{Driver, LocalReservation};
use tokio::sync::oneshot;

use super::policy::{Resize, ResizeDecision, ScalingPolicy};

/// Each rank's `CUDA_VISIBLE_DEVICES` from its bundle's GPU ids, named through `names` (the
/// local driver's own `CUDA_VISIBLE_DEVICES`, see `cluster::local_devices`) when given.
fn devices_of(
    reservation: &crate::cluster::pool::Reservation,
    names: Option<&[String]>,
) -> Vec<Option<String>> {
    reservation.bundles.iter().map(|b| device_of(b, names)).collect()
}

/// One bundle's `CUDA_VISIBLE_DEVICES` (see `devices_of`).
fn device_of(
    bundle: &crate::cluster::pool::BundlePlacement,
    names: Option<&[String]>,
) -> Option<String> {
    let ids = (!bundle.gpu_ids.is_empty()).then(|| bundle.cuda_visible_devices())?;
    Some(match names {
        Some(names) => crate::cluster::map_devices(&ids, names),
        None => ids,
    })
}

/// Where `fit` was told to run: the local machine (already placed, held until the run ends) or
/// a head's cluster.
pub(super) enum Target {
    /// The group's reservation and the seconds it took (waiting included).
    Local(LocalReservation, f64),
    Cluster {
        address: String,
        token: Option<String>,
    },
}

/// Where a run's workers go: the embedded one-machine cluster, or a head's cluster (reserved
/// per attempt, so a group that lost a node is placed again on the nodes left).
pub(super) enum Placement {
    Local {
        /// The group's reservation, then one per rank an elastic group grew by; released in
        /// the shared local pool when dropped (the run's end, or a shrink).
        held: Vec<LocalReservation>,
        /// Local mode: the one rank runs on a thread of this process.
        in_process: bool,
    },
    Cluster {
        address: String,
        client: Box<Client>,
        /// Everything reserved under it is released by the head if this driver dies.
        _lease: client::Lease,
        /// The group at its size (an elastic group's min).
        request: PlacementRequest,
        options: ReserveOptions,
        /// The most ranks it takes when they are free (an elastic group's max).
        most: usize,
        held: Option<(PgId, Vec<RankPlacement>)>,
        /// The ranks of the held group still running (fewer than it holds once an elastic
        /// group lost some in place).
        world: usize,
        /// Room an elastic group was given to grow into (see `Elastic::grow`): released with
        /// the group, which is then reserved anew at its new size.
        room: Option<PgId>,
    },
}

impl Placement {
    /// The driver's address as its workers reach it: the interface that reaches the head
    /// (found on the blocking pool, so no runtime thread waits for the connection).
    pub(super) async fn hub_ip(&self) -> Result<std::net::IpAddr> {
        match self {
            Placement::Local { .. } => Ok([127, 0, 0, 1].into()),
            Placement::Cluster { address, .. } => {
                let head = address.clone();
                tokio::task::spawn_blocking(move || client::address_toward(&head))
                    .await
                    .map_err(|e| Error::Protocol(format!("cannot reach the head: {e}")))?
            }
        }
    }

    /// The ranks of attempt `attempt` and how they start. On a cluster a group that may `grow`
    /// takes the most ranks free now, up to its max, else waits for its size.
    pub(super) async fn for_attempt(
        &mut self,
        attempt: u32,
        grow: bool,
    ) -> Result<(Vec<RankPlacement>, Launcher)> {
        match self {
            Placement::Local { held, in_process } => {
                let launcher = if *in_process { Launcher::InProcess } else { Launcher::Local };
                Ok((local_ranks(held), launcher))
            }
            Placement::Cluster { client, request, options, most, held, world, .. } => {
                if held.is_none() {
                    // A group larger than the cluster is a config error at the start; after a
                    // failure the cluster may have shrunk (a node died): wait for it to grow.
                    options.wait_for_capacity = attempt > 0;
                    let larger = if grow { *most } else { 0 };
                    let sizes = request.bundles.len() + 1..=larger;
                    let r = match client::reserve_most_free(client, request, sizes, options).await?
                    {
                        Some((_, r)) => r,
                        None => client::reserve(client, request, options).await?,
                    };
                    let nodes: Vec<u64> = r.reservation.bundles.iter().map(|b| b.node.0).collect();
                    let hosts: Vec<String> = nodes
                        .iter()
                        .map(|n| r.node_addresses.get(n).cloned().unwrap_or_default())
                        .collect();
                    // Each node agent maps the pool's device indices to its own devices.
                    let devices = devices_of(&r.reservation, None);
                    let ranks = RankPlacement::from_nodes(&nodes, &hosts, &devices);
                    *world = ranks.len();
                    *held = Some((r.pg(), ranks));
                }
                let (pg, ranks) = held.as_ref().expect("reserved above");
                Ok((ranks.clone(), Launcher::Cluster { client: client.clone(), pg: *pg }))
            }
        }
    }

    /// Gives a cluster reservation back (the next attempt reserves anew). A release that does
    /// not reach the head is logged: the head still frees the group when this driver's lease
    /// ends.
    pub(super) async fn release(&mut self) {
        let Placement::Cluster { client, held, room, .. } = self else { return };
        for pg in held.take().map(|(pg, _)| pg).into_iter().chain(room.take()) {
            if let Err(e) = client::release(client, pg).await {
                tracing::warn!("releasing placement group {pg}: {e}");
            }
        }
    }
}

impl Placement {
    /// The places of a local group's ranks from rank `from` on (those it just grew by).
    pub(super) fn local_ranks_from(&self, from: usize) -> Vec<RankPlacement> {
        match self {
            Placement::Local { held, .. } => local_ranks(held).split_off(from),
            Placement::Cluster { .. } => Vec::new(),
        }
    }

    /// How many ranks the local group holds (None on a cluster, reserved per attempt).
    pub(super) fn local_world(&self) -> Option<usize> {
        match self {
            Placement::Local { held, .. } => Some(held.iter().map(bundles).sum()),
            Placement::Cluster { .. } => None,
        }
    }

    /// How many ranks the group holds now (on a cluster: those of its held group still
    /// running; none before it is placed).
    pub(super) fn world(&self) -> usize {
        match self {
            Placement::Local { .. } => self.local_world().unwrap_or(0),
            Placement::Cluster { world, .. } => *world,
        }
    }

    /// Grows a local elastic group by up to `want` ranks where the pool has room and no run
    /// waits for it; how many it got.
    pub(super) fn grow(
        &mut self,
        driver: &'static Driver,
        scaling: &ScalingConfig,
        label: &str,
        want: usize,
    ) -> usize {
        let Placement::Local { held, .. } = self else { return 0 };
        let more = driver.grow_local(scaling, label, want);
        let got = more.len();
        held.extend(more);
        got
    }

    /// Gives `by` ranks of a local elastic group back to the pool: those it grew by, the last
    /// first (on one machine every bundle of a kind is as good as another once the attempt's
    /// processes are gone). Never below its first reservation. On a cluster the group holds
    /// its bundles until it is released (its lost ranks' died with their node).
    pub(super) fn shrink(&mut self, by: usize) {
        match self {
            Placement::Local { held, .. } => {
                for _ in 0..by.min(held.len().saturating_sub(1)) {
                    held.pop();
                }
            }
            Placement::Cluster { world, .. } => *world = world.saturating_sub(by),
        }
    }

    /// On a cluster, asks the head in the background for room for up to `want` more ranks,
    /// now (none while another group waits for room): the most that fit, the answer.
    fn ask_for_room(&self, want: usize) -> Option<oneshot::Receiver<Option<(usize, PgId)>>> {
        let Placement::Cluster { client, request, options, .. } = self else { return None };
        let (mut client, request, options) = ((**client).clone(), request.clone(), options.clone());
        let (tell, answer) = oneshot::channel();
        tokio::spawn(async move {
            let got = client::reserve_most_free(&mut client, &request, 1..=want, &options)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!("asking the head for room to grow: {e}");
                    None
                })
                .map(|(more, r)| (more, r.pg()));
            // The run went on without waiting for it: the room is given back.
            if let Err(Some((_, pg))) = tell.send(got) {
                let _ = client::release(&mut client, pg).await;
            }
        });
        Some(answer)
    }
}

/// How many ranks a local reservation holds.
fn bundles(held: &LocalReservation) -> usize {
    held.reservation().bundles.len()
}

/// The ranks of a local group, rank by rank in the order its reservations were made.
pub(super) fn local_ranks(held: &[LocalReservation]) -> Vec<RankPlacement> {
    let bundles: Vec<&crate::cluster::pool::BundlePlacement> =
        held.iter().flat_map(|h| &h.reservation().bundles).collect();
    let nodes: Vec<u64> = bundles.iter().map(|b| b.node.0).collect();
    let hosts = vec!["127.0.0.1".to_owned(); nodes.len()];
    let names = crate::cluster::local_devices();
    let devices: Vec<Option<String>> =
        bundles.iter().map(|b| device_of(b, names.as_deref())).collect();
    RankPlacement::from_nodes(&nodes, &hosts, &devices)
}

/// An elastic group's resizes (`ScalingConfig::elastic`), carried out: its scaling policy
/// decides, this takes the room or asks for it.
pub(super) struct Elastic<'s> {
    pub(super) driver: &'static Driver,
    pub(super) scaling: &'s ScalingConfig,
    pub(super) label: &'s str,
    pub(super) policy: ScalingPolicy,
    /// The resize the attempt in flight ended for.
    pub(super) resize: Option<Resize>,
    /// On a cluster: the head's answer to an ask for room to grow (see `grow`).
    pub(super) asked: Option<oneshot::Receiver<Option<(usize, PgId)>>>,
}

impl Elastic<'_> {
    /// At a report that carries a checkpoint: the resize the policy decided, once there is
    /// room for it (`may_grow`: the run is the one to grow now).
    pub(super) fn at_checkpoint(
        &mut self,
        placement: &mut Placement,
        may_grow: impl FnOnce() -> bool,
    ) -> Option<Resize> {
        let (world, gives_back) = match placement.local_world() {
            Some(world) => (world, true),
            None => (placement.world(), false),
        };
        let driver = self.driver;
        match self.policy.at_checkpoint((world, gives_back), || driver.local_waiting(), may_grow) {
            ResizeDecision::Nothing => None,
            ResizeDecision::Shrink(resize) => Some(resize),
            ResizeDecision::Grow(by) => self.grow(placement, by),
        }
    }

    /// Takes room for up to `by` more ranks; the resize, when it grew. On a cluster the head
    /// is asked in the background, and room it gave is taken at the next call (the next
    /// checkpoint).
    pub(super) fn grow(&mut self, placement: &mut Placement, by: usize) -> Option<Resize> {
        if let Placement::Cluster { world, room, held, .. } = placement {
            // A group not placed yet takes the room there is when it is (`for_attempt`).
            if held.is_none() {
                return None;
            }
            let world = *world;
            if let Some(answer) = &mut self.asked {
                match answer.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => return None,
                    Ok(Some((more, pg))) => {
                        self.asked = None;
                        *room = Some(pg);
                        return Some(Resize::new(
                            world,
                            world + more,
                            "room appeared on the cluster",
                        ));
                    }
                    Ok(None) | Err(_) => self.asked = None,
                }
            }
            self.asked = (by > 0).then(|| placement.ask_for_room(by)).flatten();
            return None;
        }
        let world = placement.local_world()?;
        let got = placement.grow(self.driver, self.scaling, self.label, by);
        (got > 0).then(|| Resize::new(world, world + got, "room appeared in the pool"))
    }
}
