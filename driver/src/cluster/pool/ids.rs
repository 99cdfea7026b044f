//! The plain names everything else in the pool refers to: node and placement-group ids and
//! the placement strategies. The bottom of the pool: it imports nothing of it, so errors,
//! requests and nodes can all name these without importing each other.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Identifies a node for the lifetime of the pool (a dead node keeps its id and may rejoin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u64);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies a placement group. Ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PgId(pub u64);

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How the bundles of a group may be laid out over nodes (Ray's placement strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Strategy {
    /// As few nodes as possible, best effort: one node when some node holds everything,
    /// otherwise spill over onto more nodes.
    Pack,
    /// Distinct nodes, best effort: one bundle per node when enough nodes have room, otherwise
    /// nodes are shared as evenly as possible.
    Spread,
    /// All bundles on one node, or not at all.
    StrictPack,
    /// Every bundle on a different node, or not at all.
    StrictSpread,
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Pack => "PACK",
            Strategy::Spread => "SPREAD",
            Strategy::StrictPack => "STRICT_PACK",
            Strategy::StrictSpread => "STRICT_SPREAD",
        })
    }
}
