//! Recovery: the engine rebuilt after a restart from the page versions the
//! driver found on the cache device (and, in log mode, the log's position).

use super::*;

impl Engine {
    /// Rebuild the cache after a restart from the page versions found on the
    /// cache device. The newest version of each page becomes current if its
    /// record is dirty (clean copies are dropped); older versions are freed through
    /// `FreeSlots` (the first commands polled), and the newer version is not
    /// destaged before they are. Every slot not found is free.
    pub fn recover(
        config: EngineConfig,
        volume_sizes_bytes: &[u64],
        found: Vec<RecoveredSlot>,
    ) -> Result<Engine, RecoveryError> {
        Engine::recover_at(config, volume_sizes_bytes, found, None)
    }

    /// `recover` in log mode (`EngineConfig::log`): `at` says where the log
    /// found on the device stands; the versions found lie between its tail
    /// and head.
    pub fn recover_log_mode(
        config: EngineConfig,
        volume_sizes_bytes: &[u64],
        found: Vec<RecoveredSlot>,
        at: LogPosition,
    ) -> Result<Engine, RecoveryError> {
        Engine::recover_at(config, volume_sizes_bytes, found, Some(at))
    }

    /// `recover` or `recover_log_mode`, as the cache device's format says
    /// (`at`: the log's position, for log mode only).
    pub fn recover_at(
        config: EngineConfig,
        volume_sizes_bytes: &[u64],
        found: Vec<RecoveredSlot>,
        at: Option<LogPosition>,
    ) -> Result<Engine, RecoveryError> {
        if !config.persistent {
            return Err(RecoveryError::NotPersistent);
        }
        if config.log != at.is_some() {
            return Err(RecoveryError::LogPositionMissing);
        }
        let mut engine = Engine::new(config)?;
        for &size in volume_sizes_bytes {
            engine.add_volume(size)?;
        }
        engine.check_found(&found)?;
        let used: Vec<SlotIndex> = found.iter().map(|f| f.slot).collect();
        engine.slots.exclude_from_pool(&used);
        if let Some(at) = at {
            engine.recover_log(at)?;
            engine.log_found(&found);
        }
        let kept = engine.recover_versions(found);
        engine.emit_frees(Nanos::MAX);
        if engine.ordered.is_some() {
            engine.recover_order(kept);
        } else if engine.journal.is_some() {
            engine.journal_recovered(kept);
            engine.start_destages();
        }
        if engine.must_drain_dirty() {
            // The write policy keeps no dirty data: its promise holds once these are destaged.
            engine.start_destages();
        }
        engine.log_step();
        // As at every step where debug assertions are on (`step_done`): at
        // 3.3 M recovered pages the check took a fifth of recovery.
        if cfg!(debug_assertions) {
            engine.check_invariants();
        }
        Ok(engine)
    }

    /// Every version found names a slot of the cache (once) and a page of
    /// a volume given.
    fn check_found(&self, found: &[RecoveredSlot]) -> Result<(), RecoveryError> {
        let engine = self;
        let slots = engine.slots.len() as u64;
        let mut seen = vec![false; slots as usize];
        for f in found {
            let (slot, key) = (f.slot.0, f.record.key);
            if slot as u64 >= slots {
                return Err(RecoveryError::SlotOutOfRange { slot, slots });
            }
            if std::mem::replace(&mut seen[slot as usize], true) {
                return Err(RecoveryError::DuplicateSlot(slot));
            }
            let (volume, page) = (key.volume().0, key.page().0);
            let Some(vol) = engine.volumes.get(volume as usize) else {
                return Err(RecoveryError::UnknownVolume {
                    slot,
                    volume,
                    page,
                    volumes: engine.volumes.len(),
                });
            };
            if page >= engine.geometry.pages_in(vol.size_bytes) {
                return Err(RecoveryError::BeyondVolume {
                    slot,
                    volume,
                    page,
                    size_bytes: vol.size_bytes,
                });
            }
        }
        Ok(())
    }

    /// The versions found in place: the newest dirty version of each page
    /// current, the others freed (ordered write-back keeps older dirty
    /// ones). Returns the versions kept with their order (version number,
    /// or place in the log), for the policy's own recovery.
    fn recover_versions(&mut self, found: Vec<RecoveredSlot>) -> Vec<(u64, SlotIndex)> {
        let engine = self;
        // Each page's versions, oldest first: by version number, or in log
        // mode by place in the log (the versions come in the replay's
        // order, and a checkpoint's carry no version number).
        let in_log = engine.log.is_some();
        let mut found: Vec<(u64, RecoveredSlot)> = found
            .into_iter()
            .enumerate()
            .map(|(i, f)| (if in_log { i as u64 } else { f.record.seq }, f))
            .collect();
        found.sort_by_key(|&(order, f)| (f.record.key, order));
        let ordered = engine.ordered.is_some();
        let mut kept = Vec::new();
        for (i, &(order, f)) in found.iter().enumerate() {
            // The index's buckets are cache misses: fetch them ahead.
            if let Some((_, ahead)) = found.get(i + 16) {
                engine.slots.prefetch_home(ahead.record.key);
            }
            engine.next_seq = engine.next_seq.max(f.record.seq + 1);
            let (slot, key) = (f.slot, f.record.key);
            let newest = found.get(i + 1).is_none_or(|(_, n)| n.record.key != key);
            engine.slots.set_key(slot, key);
            if newest && f.record.dirty {
                engine.slots.map(slot, key);
                engine.slots.set_state(slot, SlotState::Dirty);
                engine.mark_dirty(key);
                kept.push((order, slot));
            } else if ordered && f.record.dirty {
                // Ordered write-back destages every version, in order.
                engine.slots.set_state(slot, SlotState::OldDirty);
                engine.push_old(slot);
                kept.push((order, slot));
            } else {
                // An older version, or a clean copy: free it for good, oldest
                // first. Clean copies are not trusted after a crash: one
                // dropped just before (a write-around, say) could come back.
                engine.slots.set_state(slot, SlotState::Stale);
                engine.push_old(slot);
                engine.free_slot(slot);
            }
        }
        kept
    }
}
