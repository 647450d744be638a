//! Criticality (Kim et al., ATC'15 §3–§4): which issuers and volumes the
//! request-oriented admission policies treat as critical. The engine owns
//! these tables, not the admission policy, so an online change of policy
//! keeps them; a policy sees only the answer for each write (`WriteInfo`).
//! An issuer is critical by a hint (set and cleared at run time) or by
//! inheritance (counted: each cause that made it critical ends its own share,
//! so an inherited criticality ends when its last cause ends). Nothing here
//! decides admission.

use super::*;

/// Issuers with criticality at once (a hint or an inheritance): the table is
/// bounded like every engine table; the paper's servers have tens of processes.
pub const ISSUERS_MAX: usize = 4096;

/// The issuer of requests that name none (`RequestFlags::issuer` default).
pub const ISSUER_UNTAGGED: u32 = 0;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CriticalityError {
    #[error("issuer 0 is the untagged issuer (requests that name no issuer); criticality is set for a named issuer (1 and up)")]
    UntaggedIssuer,
    #[error("issuer {issuer}: the issuer table is full ({ISSUERS_MAX} issuers have criticality); clear one first")]
    TooManyIssuers { issuer: u32 },
    #[error("issuer {0} has no inherited criticality to end")]
    NotInherited(u32),
    #[error("issuer {0} already inherits criticality from {max} causes", max = u32::MAX)]
    TooManyCauses(u32),
    #[error("unknown volume {volume} (the engine has {volumes} volumes)")]
    UnknownVolume { volume: u16, volumes: usize },
}

/// One issuer's criticality; an issuer with neither leaves the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct IssuerState {
    hinted: bool,
    /// Causes of inherited criticality still in force.
    inherited: u32,
}

/// The issuer table.
#[derive(Debug, Default)]
pub(super) struct Issuers {
    table: HashMap<u32, IssuerState>,
}

impl Issuers {
    fn entry(&mut self, issuer: u32) -> Result<&mut IssuerState, CriticalityError> {
        if issuer == ISSUER_UNTAGGED {
            return Err(CriticalityError::UntaggedIssuer);
        }
        if !self.table.contains_key(&issuer) && self.table.len() >= ISSUERS_MAX {
            return Err(CriticalityError::TooManyIssuers { issuer });
        }
        Ok(self.table.entry(issuer).or_default())
    }

    fn forget_if_plain(&mut self, issuer: u32) {
        if self.table.get(&issuer) == Some(&IssuerState::default()) {
            self.table.remove(&issuer);
        }
        debug_assert!(self.table.len() <= ISSUERS_MAX);
    }

    /// Set or clear the hint; returns whether it was set before.
    fn set_hint(&mut self, issuer: u32, on: bool) -> Result<bool, CriticalityError> {
        if !on && !self.table.contains_key(&issuer) && issuer != ISSUER_UNTAGGED {
            return Ok(false); // nothing to clear, nothing to store
        }
        let state = self.entry(issuer)?;
        let was = std::mem::replace(&mut state.hinted, on);
        self.forget_if_plain(issuer);
        Ok(was)
    }

    fn inherit(&mut self, issuer: u32) -> Result<u32, CriticalityError> {
        let state = self.entry(issuer)?;
        state.inherited = state
            .inherited
            .checked_add(1)
            .ok_or(CriticalityError::TooManyCauses(issuer))?;
        Ok(state.inherited)
    }

    fn end_inherit(&mut self, issuer: u32) -> Result<u32, CriticalityError> {
        let state = self
            .table
            .get_mut(&issuer)
            .filter(|s| s.inherited > 0)
            .ok_or(CriticalityError::NotInherited(issuer))?;
        state.inherited -= 1;
        let left = state.inherited;
        self.forget_if_plain(issuer);
        Ok(left)
    }

    /// (hinted, inherited) for one issuer.
    pub(super) fn of(&self, issuer: u32) -> (bool, bool) {
        self.table
            .get(&issuer)
            .map_or((false, false), |s| (s.hinted, s.inherited > 0))
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    pub(super) fn metadata_bytes(&self) -> usize {
        self.table.capacity() * (std::mem::size_of::<(u32, IssuerState)>() + 1)
    }
}

impl Engine {
    /// The paper's hint: make `issuer` critical (`on`) or not from now on;
    /// returns whether its hint was set before. Inherited criticality is
    /// counted apart and not changed by this.
    pub fn set_critical_issuer(&mut self, issuer: u32, on: bool) -> Result<bool, CriticalityError> {
        let was = self.issuers.set_hint(issuer, on)?;
        if on {
            self.promote_for_issuer(issuer);
        }
        Ok(was)
    }

    /// `issuer` inherits criticality from one cause (a critical waiter on
    /// something it holds: CP+PI); returns the causes now in force.
    pub fn inherit_criticality(&mut self, issuer: u32) -> Result<u32, CriticalityError> {
        let causes = self.issuers.inherit(issuer)?;
        self.promote_for_issuer(issuer);
        Ok(causes)
    }

    /// One cause of `issuer`'s inherited criticality ended; returns the
    /// causes left (at 0 the inheritance is over).
    pub fn end_inherited_criticality(&mut self, issuer: u32) -> Result<u32, CriticalityError> {
        self.issuers.end_inherit(issuer)
    }

    /// Whether `issuer` is critical now: (by hint, by inheritance).
    pub fn issuer_criticality(&self, issuer: u32) -> (bool, bool) {
        self.issuers.of(issuer)
    }

    /// Mark volume `volume` critical (the VOLUME policy admits its writes)
    /// or not; returns whether it was before.
    pub fn set_critical_volume(
        &mut self,
        volume: VolumeId,
        on: bool,
    ) -> Result<bool, CriticalityError> {
        let volumes = self.volumes.len();
        let vol =
            self.volumes
                .get_mut(volume.0 as usize)
                .ok_or(CriticalityError::UnknownVolume {
                    volume: volume.0,
                    volumes,
                })?;
        Ok(std::mem::replace(&mut vol.critical, on))
    }

    /// The admission policy of `volume`'s writes: its own, or the engine's.
    pub(super) fn admission_of(&self, volume: VolumeId) -> &dyn Admission {
        match self
            .volumes
            .get(volume.0 as usize)
            .and_then(|v| v.admission.as_deref())
        {
            Some(a) => a,
            None => &*self.admission,
        }
    }

    pub(super) fn admission_of_mut(&mut self, volume: VolumeId) -> &mut dyn Admission {
        match self
            .volumes
            .get_mut(volume.0 as usize)
            .and_then(|v| v.admission.as_deref_mut())
        {
            Some(a) => a,
            None => &mut *self.admission,
        }
    }

    /// What admission learns about write request `req` besides its tags.
    pub(super) fn write_info(&self, req: &Request) -> WriteInfo {
        let (issuer_hinted, issuer_inherited) = self.issuers.of(req.flags.issuer);
        WriteInfo {
            volume: req.volume,
            offset_bytes: req.offset_bytes,
            len_bytes: req.len_bytes,
            flags: req.flags,
            volume_critical: self.volumes[req.volume.0 as usize].critical,
            issuer_hinted,
            issuer_inherited,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::EngineConfig;

    fn engine(admission: &str, critical_volumes: Vec<u16>) -> Engine {
        let config = EngineConfig {
            cache_slots: 256,
            admission: admission.into(),
            critical_volumes,
            ..EngineConfig::default()
        };
        let mut e = Engine::new(config).expect("config");
        e.add_volume(1 << 20).expect("volume");
        e.add_volume(1 << 20).expect("volume");
        e
    }

    /// Submit one page write; true if it went to the cache, false if it bypassed.
    fn cached(e: &mut Engine, volume: u16, sync: bool, issuer: u32) -> bool {
        let req = Request {
            id: RequestId(e.stats().writes),
            volume: VolumeId(volume),
            kind: RequestKind::Write,
            offset_bytes: 4096 * (e.stats().writes % 200),
            len_bytes: 4096,
            flags: RequestFlags {
                sync,
                issuer,
                ..RequestFlags::default()
            },
        };
        e.handle_request(Nanos(0), req).expect("submit");
        let cmds: Vec<IoCommand> = std::iter::from_fn(|| e.poll_command()).collect();
        assert_eq!(cmds.len(), 1, "{cmds:?}");
        let to_cache = matches!(cmds[0], IoCommand::WritePage { .. });
        e.handle_completion(Nanos(0), cmds[0].io(), Ok(()))
            .expect("io");
        while e.poll_response().is_some() {}
        to_cache
    }

    #[test]
    fn cp_caches_sync_writes_of_hinted_issuers_and_keeps_them_across_a_policy_change() {
        let mut e = engine("cp", vec![]);
        assert_eq!(e.set_critical_issuer(5, true), Ok(false));
        assert!(cached(&mut e, 0, true, 5));
        assert!(!cached(&mut e, 0, false, 5), "not sync");
        assert!(!cached(&mut e, 0, true, 6), "not critical");
        assert_eq!(e.stats().write_bypasses, 2);
        let page_bytes = e.config().page_size_bytes;
        assert_eq!(
            e.stats().write_bypassed_pages * page_bytes,
            2 * 4096,
            "two 4 KiB writes"
        );
        // Inheritance counts for cp-pi only, and ends with its cause.
        assert_eq!(e.inherit_criticality(6), Ok(1));
        assert!(!cached(&mut e, 0, true, 6), "cp ignores inheritance");
        assert_eq!(e.set_admission("cp-pi"), Ok("cp"));
        assert!(cached(&mut e, 0, true, 6));
        assert!(cached(&mut e, 0, true, 5), "the hint survived the change");
        // Cached pages by cause (Table 3): two of a hinted issuer, one inherited.
        let s = e.stats();
        assert_eq!(
            (s.admitted_pages_hinted, s.admitted_pages_inherited),
            (2, 1)
        );
        assert_eq!(e.end_inherited_criticality(6), Ok(0));
        assert!(!cached(&mut e, 0, true, 6));
        assert_eq!(e.set_critical_issuer(5, false), Ok(true));
        assert!(!cached(&mut e, 0, true, 5));
    }

    #[test]
    fn volume_caches_writes_to_volumes_marked_in_the_config_or_online() {
        let mut e = engine("volume", vec![1]);
        assert!(cached(&mut e, 1, false, 0));
        assert!(!cached(&mut e, 0, true, 0));
        assert_eq!(e.set_critical_volume(VolumeId(0), true), Ok(false));
        assert!(cached(&mut e, 0, false, 0));
        assert_eq!(e.set_critical_volume(VolumeId(1), false), Ok(true));
        assert!(!cached(&mut e, 1, true, 0));
        let err = e.set_critical_volume(VolumeId(9), true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown volume 9 (the engine has 2 volumes)"
        );
    }

    #[test]
    fn a_volume_with_its_own_admission_policy_uses_it() {
        let config = EngineConfig {
            cache_slots: 256,
            admission: "all".into(),
            volume_admissions: vec![(1, "cp".into())],
            ..EngineConfig::default()
        };
        let mut e = Engine::new(config).expect("config");
        e.add_volume(1 << 20).expect("volume");
        e.add_volume(1 << 20).expect("volume");
        e.set_critical_issuer(5, true).expect("hint");
        assert!(cached(&mut e, 0, false, 0), "volume 0: all");
        assert!(!cached(&mut e, 1, false, 0), "volume 1: cp bypasses");
        assert!(
            cached(&mut e, 1, true, 5),
            "volume 1: cp caches a critical sync write"
        );
        let bad = EngineConfig {
            volume_admissions: vec![(0, "cpx".into())],
            ..EngineConfig::default()
        };
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("cpx"), "{err}");
        let ordered = EngineConfig {
            write_policy: crate::config::WritePolicyKind::OrderedWriteBack,
            volume_admissions: vec![(0, "sync".into())],
            ..EngineConfig::default()
        };
        let err = ordered.validate().unwrap_err().to_string();
        assert!(err.contains("every write must enter the cache"), "{err}");
    }

    #[test]
    fn a_hint_is_set_and_cleared() {
        let mut t = Issuers::default();
        assert_eq!(t.set_hint(7, true), Ok(false));
        assert_eq!(t.of(7), (true, false));
        assert_eq!(t.set_hint(7, true), Ok(true));
        assert_eq!(t.set_hint(7, false), Ok(true));
        assert_eq!(t.of(7), (false, false));
        assert_eq!(t.len(), 0, "a plain issuer leaves the table");
        assert_eq!(t.set_hint(8, false), Ok(false));
        assert_eq!(t.len(), 0, "clearing an absent hint stores nothing");
    }

    #[test]
    fn an_inheritance_ends_with_its_last_cause_and_keeps_the_hint_apart() {
        let mut t = Issuers::default();
        assert_eq!(t.inherit(3), Ok(1));
        assert_eq!(t.inherit(3), Ok(2));
        assert_eq!(t.set_hint(3, true), Ok(false));
        assert_eq!(t.end_inherit(3), Ok(1));
        assert_eq!(t.of(3), (true, true));
        assert_eq!(t.end_inherit(3), Ok(0));
        assert_eq!(t.of(3), (true, false));
        assert_eq!(t.end_inherit(3), Err(CriticalityError::NotInherited(3)));
        assert_eq!(t.set_hint(3, false), Ok(true));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn bad_issuers_are_refused_by_name() {
        let mut t = Issuers::default();
        let e = t.set_hint(ISSUER_UNTAGGED, true).unwrap_err();
        assert_eq!(e, CriticalityError::UntaggedIssuer);
        assert!(e.to_string().contains("issuer 0"), "{e}");
        assert_eq!(
            t.end_inherit(5).unwrap_err().to_string(),
            "issuer 5 has no inherited criticality to end"
        );
        for i in 1..=ISSUERS_MAX as u32 {
            t.set_hint(i, true).unwrap();
        }
        let full = ISSUERS_MAX as u32 + 1;
        let e = t.inherit(full).unwrap_err();
        assert_eq!(e, CriticalityError::TooManyIssuers { issuer: full });
        assert!(e.to_string().starts_with(&format!("issuer {full}:")), "{e}");
        // An issuer already in the table is still served.
        assert_eq!(t.inherit(1), Ok(1));
        t.table.get_mut(&1).expect("in the table").inherited = u32::MAX;
        assert_eq!(t.inherit(1), Err(CriticalityError::TooManyCauses(1)));
        assert_eq!(t.end_inherit(1), Ok(u32::MAX - 1));
    }
}
