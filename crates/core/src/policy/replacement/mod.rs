//! Clean-page replacement: which clean cached page gives up its slot when a
//! free slot is needed. Dirty pages are never here; they leave by destage.
//!
//! Policies index their state by slot (arrays sized at start, O(1) per call).
//! Each policy lives in its own file and is built by name through
//! [`REPLACEMENTS`]; `docs/replacement.md` compares them.
//!
//! Constructor convention: every policy has `Policy::new(slots: usize)`, which
//! sizes all its metadata for slot indices `0..slots`, and `Policy::NAME`.

mod arc;
mod clock;

mod lru;

pub use arc::Arc;
pub use clock::Clock;
pub use lru::Lru;

pub use super::registry::UnknownPolicy;
use super::registry::{Entry, Registry};
use crate::types::{PageKey, SlotIndex};

/// A clean-page replacement policy. The engine calls, for each clean page:
/// `insert` once when it becomes clean and resident, `hit` on every read hit,
/// and either `remove` (it became dirty or was trimmed) or `evict` (chosen as
/// victim) once to end its stay.
pub trait Replacement: Send {
    fn name(&self) -> &'static str;
    /// `slot` now holds clean page `key`. `slot` must not be present.
    fn insert(&mut self, slot: SlotIndex, key: PageKey);
    /// A read hit on the clean page in `slot`.
    fn hit(&mut self, slot: SlotIndex);
    /// `slot` stops being a clean page without being a victim (no history kept).
    fn remove(&mut self, slot: SlotIndex);
    /// Choose a victim, forget it (keeping history if the policy does), return its slot.
    fn evict(&mut self) -> Option<SlotIndex>;
    /// Choose a victim to make room for `incoming`, a page not resident that
    /// the caller inserts next (a miss). Policies that learn from history (ARC)
    /// need the incoming key before choosing; the others just `evict`.
    fn evict_for(&mut self, incoming: PageKey) -> Option<SlotIndex> {
        let _ = incoming;
        self.evict()
    }
    /// Clean pages currently held.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Heap bytes of the policy's metadata (for the memory report).
    fn metadata_bytes(&self) -> usize;
}

/// The clean-page replacement policies; a new one adds its line here.
pub static REPLACEMENTS: Registry<dyn Replacement, usize> = Registry {
    family: "replacement policy",
    entries: &[
        Entry {
            name: Lru::NAME,
            aliases: &[],
            help: "least recently used clean page first",
            build: |slots| Box::new(Lru::new(slots)),
        },
        Entry {
            name: Clock::NAME,
            aliases: &[],
            help: "CLOCK: second chance by a reference bit",
            build: |slots| Box::new(Clock::new(slots)),
        },
        Entry {
            name: Arc::NAME,
            aliases: &[],
            help: "ARC: adaptive between recency and frequency, with ghost history",
            build: |slots| Box::new(Arc::new(slots)),
        },
    ],
};

/// Build the policy called `name` (ASCII case ignored) for `slots` slots.
pub fn build_replacement(name: &str, slots: usize) -> Result<Box<dyn Replacement>, UnknownPolicy> {
    REPLACEMENTS.build(name, slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_builds_every_name() {
        for name in REPLACEMENTS.names() {
            let policy = build_replacement(name, 8).expect("listed name builds");
            assert_eq!(policy.name(), name);
            assert!(policy.is_empty());
            assert!(policy.metadata_bytes() > 0);
        }
        assert_eq!(build_replacement("ARC", 8).map(|p| p.name()), Ok("arc"));
    }

    #[test]
    fn registry_names_bad_name_and_valid_ones() {
        let Err(error) = build_replacement("lfu", 8) else {
            panic!("lfu is not a replacement policy here");
        };
        assert_eq!(error.name, "lfu");
        assert_eq!(
            error.to_string(),
            "unknown replacement policy \"lfu\"; valid: lru, clock, arc"
        );
    }
}
