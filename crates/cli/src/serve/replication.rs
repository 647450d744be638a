//! `wcache serve`'s replication options: the peer a cache is mirrored to,
//! its state file, and `--takeover` (a replica's copy becoming the primary,
//! its epoch raised). Parsing and the state file's check only: the mirror
//! itself is `wcache_io::replica`.

use std::path::PathBuf;
use std::time::Duration;

use wcache_io::replica::{state, LinkTls, MirrorOptions, OnPeerLost, ReplicaState, Role};
use wcache_io::{CacheConfig, CacheDeviceSpec};

use super::ServeArgs;
use crate::args::duration_ns_arg;

type AnyError = Box<dyn std::error::Error>;

/// Why the replication options cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplicationArgError {
    #[error("--on-peer-lost {0:?}: expected write-through or write-back")]
    OnPeerLost(String),
    #[error("--replicate-to and --takeover need a cache file or device (--cache), not memory")]
    Memory,
    #[error(
        "--peer-timeout {0:?}: at least 10ms (a peer is lost when it does not answer within it)"
    )]
    PeerTimeout(String),
    #[error("--replicate-to {0:?}: expected HOST:PORT")]
    Peer(String),
    #[error("--takeover: no replication state at {0}: this cache is not a replica's copy")]
    NoState(String),
    #[error("--takeover: {state}: the copy is not consistent (a resync was running when its primary was lost): serving it could lose acknowledged writes. Its primary's cache, if it can be started, holds them all")]
    Inconsistent { state: String },
}

/// The shortest `--peer-timeout`: a link is given at least this long.
const PEER_TIMEOUT_MIN: Duration = Duration::from_millis(10);

/// `--peer-timeout` (of `serve` and `replica`): a duration of 10 ms or more.
pub(crate) fn peer_timeout_arg(text: &str) -> Result<Duration, AnyError> {
    let timeout = Duration::from_nanos(duration_ns_arg("peer-timeout", text)?);
    if timeout < PEER_TIMEOUT_MIN {
        return Err(ReplicationArgError::PeerTimeout(text.to_string()).into());
    }
    Ok(timeout)
}

pub(crate) fn on_peer_lost_arg(text: &str) -> Result<OnPeerLost, ReplicationArgError> {
    match text.trim() {
        "write-through" => Ok(OnPeerLost::WriteThrough),
        "write-back" => Ok(OnPeerLost::WriteBack),
        _ => Err(ReplicationArgError::OnPeerLost(text.to_string())),
    }
}

/// The cache file's replication state path (`--replica-state`, or beside it).
fn state_path(args: &ServeArgs, config: &CacheConfig) -> Option<PathBuf> {
    match &config.cache {
        CacheDeviceSpec::File { path, .. } => Some(
            args.replica_state
                .clone()
                .unwrap_or_else(|| state::default_path(path)),
        ),
        CacheDeviceSpec::Memory { .. } => None,
    }
}

/// The mirror's options from the arguments (parsing only).
pub(super) fn mirror_options(
    args: &ServeArgs,
    config: &CacheConfig,
) -> Result<Option<MirrorOptions>, AnyError> {
    let on_peer_lost = on_peer_lost_arg(&args.on_peer_lost)?;
    let timeout = peer_timeout_arg(&args.peer_timeout)?;
    let Some(peer) = &args.replicate_to else {
        return Ok(None);
    };
    if !peer.contains(':') {
        return Err(ReplicationArgError::Peer(peer.clone()).into());
    }
    let state_path = state_path(args, config).ok_or(ReplicationArgError::Memory)?;
    let tls = match &args.replicate_tls_certificates {
        Some(dir) => LinkTls::client(dir)
            .map_err(|e| format!("--replicate-tls-certificates {}: {e}", dir.display()))?,
        None => LinkTls::Off,
    };
    Ok(Some(MirrorOptions {
        peer: peer.clone(),
        state_path,
        timeout,
        start_without_peer: args.start_without_peer,
        on_peer_lost,
        tls,
    }))
}

/// Before the cache is opened: a replica's copy is served only with
/// `--takeover`, which makes it the primary at the next epoch (written
/// durably first). Touches only the state file.
pub(super) fn check_or_take_over(args: &ServeArgs, config: &CacheConfig) -> Result<(), AnyError> {
    let Some(path) = state_path(args, config) else {
        if args.takeover {
            return Err(ReplicationArgError::Memory.into());
        }
        return Ok(());
    };
    let shown = path.display().to_string();
    let state = ReplicaState::load(&path)?;
    match state {
        Some(mut s) if args.takeover && s.role == Role::Replica => {
            if !s.consistent {
                return Err(ReplicationArgError::Inconsistent { state: shown }.into());
            }
            s.role = Role::Primary;
            s.epoch += 1;
            s.store(&path)?;
            tracing::warn!(cache = %s.cache_id, epoch = s.epoch, "replication: took over the cache from its primary");
            say!(
                "wcache: took over cache {} at epoch {} ({shown})",
                s.cache_id,
                s.epoch
            );
        }
        Some(s) if args.takeover => {
            say!(
                "wcache: cache {} was taken over already (epoch {})",
                s.cache_id,
                s.epoch
            );
        }
        Some(s) if s.role == Role::Replica => {
            return Err(wcache_io::replica::MirrorError::IsReplica { state: shown }.into());
        }
        None if args.takeover => return Err(ReplicationArgError::NoState(shown).into()),
        _ => {}
    }
    Ok(())
}
