//! The pool's one error type. Every variant is something a caller can cause (a bad request, an
//! unknown id, a request the cluster can never hold) and says what was wrong and what would be right.

use super::ids::{NodeId, PgId, Strategy};

/// Result alias of the resource pool.
pub(crate) type Result<T, E = PoolError> = std::result::Result<T, E>;

/// Everything that can go wrong when talking to the [`Pool`](super::Pool).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoolError {
    /// An amount is negative, not a number, infinite or absurdly large.
    #[error("{at}: {resource} = {value} is invalid: {reason}")]
    InvalidAmount {
        /// Where the amount was found: `"bundle 2"` or `"node spec"`.
        at: String,
        /// `"CPU"`, `"GPU"`, `"memory"` or a custom resource name.
        resource: String,
        /// The offending value.
        value: f64,
        /// What would be right.
        reason: &'static str,
    },

    /// A GPU amount of 1 or more that is not a whole number (devices are not split across bundles
    /// beyond one device), or a node with a fractional GPU count.
    #[error(
        "{at}: GPU = {gpu} is invalid: amounts of 1 GPU or more must be whole numbers of devices (use < 1 to share one device)"
    )]
    FractionalGpus {
        /// `"bundle 2"` or `"node spec"`.
        at: String,
        /// The offending GPU amount.
        gpu: f64,
    },

    /// A custom resource used one of the well-known names, or the empty name.
    #[error(
        "custom resource name {name:?} is reserved or empty; use the cpu/gpu/memory_bytes fields for CPU, GPU and memory"
    )]
    ReservedName {
        /// The rejected name.
        name: String,
    },

    /// A placement request without bundles.
    #[error("a placement group needs at least one bundle (one per worker)")]
    NoBundles,

    /// A bundle that asks for nothing at all.
    #[error(
        "bundle {bundle} asks for no resources; give every worker at least some CPU, GPU, memory or custom resource"
    )]
    EmptyBundle {
        /// Index of the bundle in the request.
        bundle: usize,
    },

    /// The cluster has no alive node, so no request can ever fit it.
    #[error("the cluster has no alive node; add a node before requesting resources")]
    NoAliveNodes,

    /// One bundle asks for more of a resource than any alive node has in total.
    #[error(
        "bundle {bundle} asks for {requested} {resource} but the largest alive node has {largest} in total"
    )]
    ExceedsEveryNode {
        /// Index of the bundle in the request.
        bundle: usize,
        /// `"CPU"`, `"GPU"`, `"memory"` or a custom resource name.
        resource: String,
        /// What the bundle asks for.
        requested: f64,
        /// The largest total of this resource on one alive node (for fractional GPUs: 1 device).
        largest: f64,
    },

    /// Each resource of the bundle exists on some node, but no single alive node has all of them.
    #[error("bundle {bundle} fits no single alive node: no node has all of its resources together")]
    NoNodeFitsBundle {
        /// Index of the bundle in the request.
        bundle: usize,
    },

    /// The whole group asks for more of a resource than the cluster has in total.
    #[error(
        "the placement group asks for {requested} {resource} in total but the whole cluster has {available}"
    )]
    ExceedsCluster {
        /// `"CPU"`, `"GPU"`, `"memory"` or a custom resource name.
        resource: String,
        /// Sum over the bundles.
        requested: f64,
        /// Sum over the alive nodes.
        available: f64,
    },

    /// A STRICT_PACK group asks for more of a resource than the largest alive node has.
    #[error(
        "STRICT_PACK puts all bundles on one node, but together they ask for {requested} {resource} and the largest alive node has {largest}; use PACK to allow several nodes"
    )]
    StrictPackTooLarge {
        /// `"CPU"`, `"GPU"`, `"memory"` or a custom resource name.
        resource: String,
        /// Sum over the bundles.
        requested: f64,
        /// The largest total of this resource on one alive node.
        largest: f64,
    },

    /// A STRICT_SPREAD group has more bundles than there are distinct nodes able to hold them.
    #[error(
        "STRICT_SPREAD needs {bundles} distinct nodes, each holding one bundle, but at most {nodes} alive nodes can; use SPREAD to allow sharing a node"
    )]
    TooFewNodes {
        /// Number of bundles in the request.
        bundles: usize,
        /// The most bundles that can be put on distinct alive nodes.
        nodes: usize,
    },

    /// The request passes every per-resource check but the placement heuristic finds no way to
    /// lay it out even on an empty cluster (for example GPU devices too fragmented by the shape
    /// of the bundles).
    #[error("the {strategy} placement group cannot be laid out even on an empty cluster")]
    CannotPlace {
        /// The request's strategy.
        strategy: Strategy,
    },

    /// No node has this id.
    #[error("unknown node {node}")]
    UnknownNode {
        /// The id asked for.
        node: NodeId,
    },

    /// A node with this id is already in the pool.
    #[error("node {node} is already in the pool; use rejoin_node to bring a dead node back")]
    DuplicateNode {
        /// The id asked for.
        node: NodeId,
    },

    /// No placement group has ever had this id.
    #[error("unknown placement group {pg}")]
    UnknownGroup {
        /// The id asked for.
        pg: PgId,
    },

    /// The placement group existed but has already been released or cancelled (possibly by
    /// [`Pool::mark_node_dead`](super::Pool::mark_node_dead)).
    #[error("placement group {pg} was already released or cancelled")]
    GroupEnded {
        /// The id asked for.
        pg: PgId,
    },

    /// `release` of a group that is still pending.
    #[error("placement group {pg} is still pending, nothing to release; use cancel to withdraw it")]
    NotReserved {
        /// The id asked for.
        pg: PgId,
    },
}

impl PoolError {
    /// Whether the request is well formed but the alive cluster is too small for it now: nodes
    /// that join (or come back) can make it fit, unlike a malformed request.
    pub(crate) fn is_capacity(&self) -> bool {
        matches!(
            self,
            PoolError::NoAliveNodes
                | PoolError::ExceedsEveryNode { .. }
                | PoolError::NoNodeFitsBundle { .. }
                | PoolError::ExceedsCluster { .. }
                | PoolError::StrictPackTooLarge { .. }
                | PoolError::TooFewNodes { .. }
                | PoolError::CannotPlace { .. }
        )
    }
}
