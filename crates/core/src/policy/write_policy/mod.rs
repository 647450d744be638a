//! Write POLICY: what an admitted write does (Koller et al., FAST'13): keep
//! it in the cache only and destage it later, send it to the backing at once
//! beside the cached copy, or send it around the cache. The engine asks the
//! policy for each write's route and keeps the mechanism (versions, dirty
//! set, ordering of backing writes) itself; a policy never touches engine
//! state.
//!
//! Each policy lives in its own file and is built by name from
//! [`WRITE_POLICIES`]; `docs/consistency.md` states what each one promises.

mod journaled_write_back;
mod ordered_write_back;
mod write_around;
mod write_back;
mod write_through;

pub use journaled_write_back::JournaledWriteBack;
pub use ordered_write_back::OrderedWriteBack;
pub use write_around::WriteAround;
pub use write_back::WriteBack;
pub use write_through::WriteThrough;

pub use super::registry::UnknownPolicy;
use super::registry::{Entry, Registry};
use crate::config::ConsistencyPoints;

/// Where a write's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteRoute {
    /// New page versions in the cache, dirty: acknowledged once they are
    /// durable there, destaged later.
    Cache,
    /// New page versions in the cache and the write to the backing at once:
    /// acknowledged when both are done; the versions are clean once the
    /// backing holds the bytes (dirty if the backing write failed).
    CacheAndBacking,
    /// The backing only; cached clean copies of its pages are dropped.
    Backing,
}

/// What a FLUSH does beyond its answer (by the command contract every
/// acknowledged write is durable already when it comes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushAction {
    /// Nothing more: answered at once.
    Answer,
    /// An application consistency point: the open transaction commits, so
    /// the backing alone will pass through the state of every write
    /// answered before it.
    ConsistencyPoint,
}

/// A write policy. `route` is asked when a write is admitted (and, while it
/// stalls, each time room is checked); it must be a pure function of its
/// inputs.
pub trait WritePolicy: Send {
    fn name(&self) -> &'static str;
    /// The route of one write. `bypass_would_lose` tells whether the cache
    /// holds a version of one of its pages that a backing-only write would
    /// lose or race (a dirty or in-flight version, or an older one being
    /// destaged); call it only when the answer matters (it walks the pages).
    fn route(&self, bypass_would_lose: &mut dyn FnMut() -> bool) -> WriteRoute;
    /// Whether writes may go around the cache, so that one larger than the
    /// cache is accepted rather than refused.
    fn may_bypass(&self) -> bool {
        false
    }
    /// Whether dirty data may wait in the cache (write-back). A policy that
    /// keeps none has any dirty page it finds (recovered after a crash, or
    /// left by a failed backing write) destaged at once, at full rate.
    fn keeps_dirty(&self) -> bool {
        false
    }
    /// Whether every version of a page is kept and destaged in dependency
    /// order (ordered write-back): no overwrite in the cache replaces a
    /// version the backing has not had yet.
    fn ordered(&self) -> bool {
        false
    }
    /// Whether writes are grouped into transactions checkpointed to the
    /// backing atomically (journaled write-back): an overwrite coalesces
    /// inside the open transaction and keeps the version of a committed one.
    fn journaled(&self) -> bool {
        false
    }
    /// What a FLUSH does, given where the configuration puts consistency
    /// points (`--consistency-points`).
    fn flush(&self, _points: ConsistencyPoints) -> FlushAction {
        FlushAction::Answer
    }
}

/// The write policies; a new one adds its file and its line here.
pub static WRITE_POLICIES: Registry<dyn WritePolicy, ()> = Registry {
    family: "write policy",
    entries: &[
        Entry {
            name: "write-back",
            aliases: &["wb"],
            help: "acknowledged once the cache device holds the write; destaged later",
            build: |()| Box::new(WriteBack),
        },
        Entry {
            name: "write-through",
            aliases: &["wt"],
            help: "acknowledged once cache and backing hold the write; the cached copy is clean",
            build: |()| Box::new(WriteThrough),
        },
        Entry {
            name: "write-back-ordered",
            aliases: &["wb-o"],
            help: "write-back that keeps every version and destages in the writes' order: the backing alone is always consistent",
            build: |()| Box::new(OrderedWriteBack),
        },
        Entry {
            name: "write-back-journaled",
            aliases: &["wb-j"],
            help: "write-back in transactions checkpointed atomically through a journal: the backing alone is always consistent, overwrites coalesce",
            build: |()| Box::new(JournaledWriteBack),
        },
        Entry {
            name: "write-around",
            aliases: &["wa"],
            help: "written to the backing only, dropping cached copies",
            build: |()| Box::new(WriteAround),
        },
    ],
};

/// The typed choice of a write policy in a configuration (the registry's
/// names as an enum, so configurations compare and copy cheaply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritePolicyKind {
    WriteBack,
    WriteThrough,
    OrderedWriteBack,
    JournaledWriteBack,
    WriteAround,
}

impl WritePolicyKind {
    pub const ALL: [WritePolicyKind; 5] = [
        WritePolicyKind::WriteBack,
        WritePolicyKind::WriteThrough,
        WritePolicyKind::OrderedWriteBack,
        WritePolicyKind::JournaledWriteBack,
        WritePolicyKind::WriteAround,
    ];

    /// The registry name.
    pub fn name(self) -> &'static str {
        WRITE_POLICIES.entries[self as usize].name
    }

    /// The policy called `name` or an alias (ASCII case ignored).
    pub fn from_name(name: &str) -> Result<WritePolicyKind, UnknownPolicy> {
        let entry = WRITE_POLICIES.find(name)?;
        let kind = Self::ALL.into_iter().find(|k| k.name() == entry.name);
        Ok(kind.expect("every registered write policy has a kind"))
    }

    pub fn build(self) -> Box<dyn WritePolicy> {
        (WRITE_POLICIES.entries[self as usize].build)(())
    }

    /// The policy's own answers, for callers that hold only the kind (the
    /// simulator's checks, the front ends): never re-derived from names.
    pub fn keeps_dirty(self) -> bool {
        self.build().keeps_dirty()
    }

    /// Ordered or journaled write-back: the backing alone is consistent at
    /// every moment.
    pub fn keeps_backing_consistent(self) -> bool {
        let p = self.build();
        p.ordered() || p.journaled()
    }

    pub fn journaled(self) -> bool {
        self.build().journaled()
    }

    /// Every write goes around the cache (one device write each).
    pub fn goes_around(self) -> bool {
        self.build().route(&mut || false) == WriteRoute::Backing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_registry_agree() {
        assert_eq!(WritePolicyKind::ALL.len(), WRITE_POLICIES.entries.len());
        for kind in WritePolicyKind::ALL {
            assert_eq!(kind.build().name(), kind.name());
            assert_eq!(WritePolicyKind::from_name(kind.name()), Ok(kind));
        }
        assert_eq!(
            WritePolicyKind::from_name("WT"),
            Ok(WritePolicyKind::WriteThrough)
        );
        assert_eq!(
            WritePolicyKind::from_name("write-sideways")
                .unwrap_err()
                .to_string(),
            "unknown write policy \"write-sideways\"; valid: write-back, write-through, write-back-ordered, write-back-journaled, write-around"
        );
    }

    #[test]
    fn routes() {
        let mut lose = || true;
        let mut keep = || false;
        let wb = WritePolicyKind::WriteBack.build();
        assert_eq!(wb.route(&mut lose), WriteRoute::Cache);
        let wt = WritePolicyKind::WriteThrough.build();
        assert_eq!(wt.route(&mut lose), WriteRoute::CacheAndBacking);
        let wa = WritePolicyKind::WriteAround.build();
        assert_eq!(wa.route(&mut keep), WriteRoute::Backing);
        assert_eq!(wa.route(&mut lose), WriteRoute::CacheAndBacking);
        assert!(wa.may_bypass() && !wb.may_bypass() && !wt.may_bypass());
    }

    #[test]
    fn a_flush_is_a_consistency_point_only_where_journaled_write_back_puts_one() {
        for kind in WritePolicyKind::ALL {
            for points in [
                ConsistencyPoints::Size,
                ConsistencyPoints::Flush,
                ConsistencyPoints::Hint,
            ] {
                let point = kind == WritePolicyKind::JournaledWriteBack
                    && points == ConsistencyPoints::Flush;
                let want = if point {
                    FlushAction::ConsistencyPoint
                } else {
                    FlushAction::Answer
                };
                assert_eq!(kind.build().flush(points), want, "{kind:?} {points:?}");
            }
        }
    }
}
