//! The way a write request goes (into the cache, or around it as
//! admission said) and where its backing write stands, as one value with
//! only the legal combinations, so that what six flags of a request said
//! is stated by a type and checked in one place (`WritePath::check`).

use crate::types::IoId;

/// What a write's backing write is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BackingKind {
    /// The write policy's own (write-through): the cache copy is final
    /// once it lands.
    Through,
    /// Around the cache, as admission or the write policy (write-around)
    /// said: nothing of it is in the cache. I/O criticality inheritance
    /// may promote it.
    Around,
    /// Admission bypassed the write, but a cached version of its pages
    /// could not be bypassed: it went through the cache. An outstanding
    /// non-critical backing write too, which may be promoted (its cache
    /// copy is there or on its way; only its answer waits for the backing).
    BypassThrough,
}

/// A backing write in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct InFlight {
    pub kind: BackingKind,
    pub io: IoId,
    /// Reissued to the cache while in flight (a bypass only).
    pub promoted: bool,
    /// Its pages are in `held_pages` until it lands (promoted, or a cache
    /// version of a write through failed while it was in flight).
    pub holds: bool,
}

/// Which way a write goes and where its backing write stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum WritePath {
    /// Into the cache, no backing write in flight (write-back, or not
    /// issued yet, or landed). Every request that is not a write too.
    #[default]
    Cached,
    /// Admission sent it around the cache, its backing write not issued
    /// yet; or its backing write around the cache landed.
    Bypass,
    /// Its backing write is in flight.
    Backing(InFlight),
}

impl WritePath {
    /// As admission decided.
    #[inline]
    pub(super) fn admitted(bypass: bool) -> WritePath {
        if bypass {
            WritePath::Bypass
        } else {
            WritePath::Cached
        }
    }

    /// Admission sent it around the cache (whichever way it then went).
    #[inline]
    pub(super) fn bypass(&self) -> bool {
        match self {
            WritePath::Cached => false,
            WritePath::Bypass => true,
            WritePath::Backing(b) => b.kind != BackingKind::Through,
        }
    }

    #[inline]
    pub(super) fn in_flight(&self) -> Option<InFlight> {
        match self {
            WritePath::Backing(b) => Some(*b),
            _ => None,
        }
    }

    /// Its backing write in flight of this kind, if it is one.
    #[inline]
    pub(super) fn io_of(&self, kind: BackingKind) -> Option<IoId> {
        self.in_flight().filter(|b| b.kind == kind).map(|b| b.io)
    }

    #[inline]
    pub(super) fn promoted(&self) -> bool {
        self.in_flight().is_some_and(|b| b.promoted)
    }

    /// Its backing write `io` goes out: around the cache (`around`), or
    /// through it (a bypass that could not be, or write-through).
    pub(super) fn issue(&mut self, io: IoId, around: bool) {
        let kind = match (*self, around) {
            (WritePath::Bypass | WritePath::Cached, true) => BackingKind::Around,
            (WritePath::Bypass, false) => BackingKind::BypassThrough,
            (WritePath::Cached, false) => BackingKind::Through,
            (path, _) => unreachable!("a backing write (around: {around}) issued on {path:?}"),
        };
        *self = WritePath::Backing(InFlight {
            kind,
            io,
            promoted: false,
            holds: false,
        });
    }

    /// Reissued to the cache while its bypass is in flight.
    pub(super) fn promote(&mut self) {
        match self {
            WritePath::Backing(b) if b.kind != BackingKind::Through && !b.promoted => {
                b.promoted = true;
            }
            path => unreachable!("promoting {path:?}"),
        }
    }

    /// Its pages are held from destage until the backing write lands.
    /// Returns whether they were held already.
    pub(super) fn hold(&mut self) -> bool {
        match self {
            WritePath::Backing(b) => std::mem::replace(&mut b.holds, true),
            path => unreachable!("holding pages of {path:?}: no backing write in flight"),
        }
    }

    /// The backing write landed: what it was.
    pub(super) fn land(&mut self) -> InFlight {
        let b = self.in_flight().expect("a backing write in flight lands");
        *self = WritePath::admitted(b.kind != BackingKind::Through);
        b
    }

    /// Its invariants: only a bypass is promoted, and a promoted write
    /// holds its pages; a bypass around the cache holds them only then.
    pub(super) fn check(&self) {
        if let WritePath::Backing(b) = self {
            assert!(
                !b.promoted || b.kind != BackingKind::Through,
                "a write-through promoted: {b:?}"
            );
            assert!(
                !b.promoted || b.holds,
                "promoted without holding its pages: {b:?}"
            );
            if b.kind == BackingKind::Around {
                assert_eq!(
                    b.holds, b.promoted,
                    "a bypass holds pages unpromoted: {b:?}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bypass_goes_around_is_promoted_holds_and_lands_a_bypass_again() {
        let mut p = WritePath::admitted(true);
        assert!(p.bypass() && p.in_flight().is_none());
        p.issue(IoId(7), true);
        assert_eq!(p.io_of(BackingKind::Around), Some(IoId(7)));
        assert_eq!(p.io_of(BackingKind::BypassThrough), None);
        p.promote();
        assert!(!p.hold(), "not held before");
        assert!(p.hold(), "held the second time");
        p.check();
        assert!(p.promoted() && p.in_flight().is_some_and(|b| b.holds));
        let landed = p.land();
        assert!(landed.promoted && landed.kind == BackingKind::Around);
        assert_eq!(p, WritePath::Bypass);
    }

    #[test]
    fn a_write_through_lands_cached_and_may_hold_but_not_be_promoted() {
        let mut p = WritePath::admitted(false);
        p.issue(IoId(1), false);
        assert!(!p.bypass());
        assert_eq!(p.io_of(BackingKind::Through), Some(IoId(1)));
        assert!(!p.hold());
        p.check();
        assert!(p.land().holds);
        assert_eq!(p, WritePath::Cached);
        let mut b = WritePath::admitted(true);
        b.issue(IoId(2), false);
        assert!(b.bypass() && b.io_of(BackingKind::BypassThrough).is_some());
    }

    #[test]
    #[should_panic(expected = "promoting")]
    fn a_write_through_cannot_be_promoted() {
        let mut p = WritePath::admitted(false);
        p.issue(IoId(1), false);
        p.promote();
    }

    #[test]
    #[should_panic(expected = "a bypass holds pages unpromoted")]
    fn the_check_catches_a_bypass_holding_pages_unpromoted() {
        let mut p = WritePath::admitted(true);
        p.issue(IoId(3), true);
        p.hold();
        p.check();
    }
}
