//! Replicated write-back: every byte a primary writes to its cache device
//! is written to a peer host's copy too, and a flush of the cache device
//! returns only once both hold it durably (DRBD's protocol C, at the cache
//! device: format 3's self-describing batches, its tail's moves and its
//! checkpoints all travel as the device writes they are). The peer's copy
//! is then a cache like any other: a takeover (`wcache serve --takeover`)
//! recovers it as after a crash of the primary and destages it to the
//! shared backing. `docs/replication.md` is the reference.
//!
//! `mirror`: the primary's side (a `BlockDevice` around its cache device);
//! `peer`: the peer's (`wcache replica`); `state`: each copy's state file
//! (cache id, epoch, role, consistent); `wire`: the link's bytes; `link`:
//! the connection (TCP, or TLS with certificates both ways). Nothing here
//! makes a cache decision.

pub mod keeper;
pub mod link;
pub mod mirror;
pub mod peer;
pub mod state;
pub mod wire;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use link::LinkTls;
pub use mirror::{LinkState, Mirror};
pub use peer::{Peer, PeerError, PeerOptions};
pub use state::{ReplicaState, Role, StateError};

/// What a primary does while its peer is away (`--on-peer-lost`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnPeerLost {
    /// Drain the dirty pages and take writes through to the backing until
    /// the peer is back and in sync (write-back's policy only).
    #[default]
    WriteThrough,
    /// Go on with the policy in force, on this host alone.
    WriteBack,
}

impl OnPeerLost {
    pub fn name(self) -> &'static str {
        match self {
            OnPeerLost::WriteThrough => "write-through",
            OnPeerLost::WriteBack => "write-back",
        }
    }
}

/// A primary's replication settings.
#[derive(Clone, Debug)]
pub struct MirrorOptions {
    /// The peer, `HOST:PORT`.
    pub peer: String,
    /// This cache's replication state (`state::default_path`).
    pub state_path: PathBuf,
    /// Connecting, a hello's answer, a flush's answer: a peer slower than
    /// this is lost.
    pub timeout: Duration,
    /// Start (degraded) when the peer cannot be reached: the operator
    /// asserts it did not take this cache over.
    pub start_without_peer: bool,
    pub on_peer_lost: OnPeerLost,
    pub tls: LinkTls,
}

/// Why a primary cannot mirror its cache.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("replication peer {peer}: cannot reach it: {why}. A primary does not start without its peer, which may have taken this cache over; if it has not, --start-without-peer starts alone (degraded)")]
    Unreachable { peer: String, why: String },
    #[error("replication peer {peer} refused this primary ({answer}): {why} (ours: {ours}; the peer's: {theirs})")]
    Refused {
        peer: String,
        answer: String,
        why: String,
        ours: String,
        theirs: String,
    },
    #[error("replication peer {peer}: the first copy of the cache failed: {why}")]
    Resync { peer: String, why: String },
    #[error("--on-peer-lost write-through cannot be kept with --write-policy {policy} (it changes write-back to write-through and back online); use --on-peer-lost write-back, which goes on alone with the unprotected amount shown")]
    CannotDegrade { policy: &'static str },
    #[error("{state}: this cache is a replica's copy; serve it only by taking it over (wcache serve --takeover), once its primary is stopped or fenced")]
    IsReplica { state: String },
}

/// The link as operators see it (`wcache status`, stats, metrics).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicationStatus {
    pub peer: String,
    /// `connected`, `resyncing` or `degraded`.
    pub state: String,
    pub cache_id: String,
    pub epoch: u64,
    /// Bytes of the cache device the peer may lack (whole regions):
    /// acknowledged writes that a loss of this host would lose.
    pub unprotected_bytes: u64,
    /// Bytes copied by resyncs since start.
    pub resynced_bytes: u64,
    pub links_lost: u64,
    /// Seconds since the link was lost (None: connected).
    pub away_s: Option<f64>,
    /// Why it was lost, or why connecting fails.
    pub last_error: Option<String>,
}
