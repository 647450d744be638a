//! A cache replicated to a peer host (`CacheConfig::replicate`): its
//! device mirrored before the first write, and the thread that takes writes
//! through to the backing while the peer is away (`--on-peer-lost
//! write-through`). Wiring only: the mirror is `crate::replica`.

use super::*;
use crate::replica::{MirrorError, MirrorOptions, OnPeerLost};

/// A cache device's mirror (where replicated) and the device the driver uses.
type Mirrored = (Option<Arc<Mirror>>, Arc<dyn BlockDevice>);

/// The cache device as the driver will use it: `device` itself, or its
/// mirror (connected, the peer's copy made whole) where replicated.
pub(super) fn mirror(
    config: &CacheConfig,
    device: Arc<dyn BlockDevice>,
) -> Result<Mirrored, CacheError> {
    let Some(options) = &config.replicate else {
        return Ok((None, device));
    };
    check_degraded_policy(options, config.engine.write_policy)?;
    let mirror = Mirror::start(device, options.clone())?;
    Ok((Some(Arc::clone(&mirror)), mirror as Arc<dyn BlockDevice>))
}

/// The policy keeper of `--on-peer-lost write-through`, where replicated.
pub(super) fn keeper(config: &CacheConfig, cache: &Cache) -> Option<PolicyKeeper> {
    let (mirror, options) = (cache.mirror.as_ref()?, config.replicate.as_ref()?);
    (options.on_peer_lost == OnPeerLost::WriteThrough).then(|| {
        PolicyKeeper::start(
            cache.operator.clone(),
            Arc::clone(mirror),
            config.engine.write_policy,
        )
    })
}

/// `--on-peer-lost write-through` changes write-back to write-through and
/// back online: other policies cannot (ordered and journaled write-back
/// keep their order on the log), so they go on alone by configuration.
fn check_degraded_policy(
    options: &MirrorOptions,
    policy: WritePolicyKind,
) -> Result<(), MirrorError> {
    let switchable = matches!(
        policy,
        WritePolicyKind::WriteBack | WritePolicyKind::WriteThrough
    );
    if options.on_peer_lost == OnPeerLost::WriteThrough && !switchable {
        return Err(MirrorError::CannotDegrade {
            policy: policy.name(),
        });
    }
    Ok(())
}
