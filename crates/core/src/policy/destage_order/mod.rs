//! Destage ORDER: which dirty write group to destage next (WOW paper, Fig. 4).
//!
//! The engine keeps the set of *candidate* groups (groups with dirty pages not
//! already being destaged), sorted by key, with a recency bit each, and
//! reports every change of it to the policy; the policy only orders. A group
//! is named by its `GroupKey` (volume, group number), whose order is address
//! order. CSCAN and WOW walk the candidate set itself and keep only their
//! destage pointer; LRW keeps its own list.

mod cscan;
mod lrw;
mod wow;

pub use cscan::Cscan;
pub use lrw::Lrw;
pub use wow::Wow;

pub use super::registry::UnknownPolicy;
use super::registry::{Entry, Registry};
pub use crate::types::GroupKey;

/// What one request did to one candidate group it wrote (Fig. 4 lines 1-9):
/// the group was already a candidate (a write-group hit), and some page it
/// wrote was already dirty (`page_hit`). `sequential` is the engine's
/// sequential-access detection for this write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupHit {
    pub page_hit: bool,
    pub sequential: bool,
}

/// The candidate groups as the engine keeps them, sorted by key, each with
/// a recency bit (WOW's; cleared when a group becomes a candidate).
pub trait Candidates {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The lowest candidate above `after`, or the lowest of all if None.
    fn next(&self, after: Option<GroupKey>) -> Option<GroupKey>;
    fn recent(&self, key: GroupKey) -> bool;
    fn set_recent(&mut self, key: GroupKey, on: bool);
}

/// A destage order. Every method is O(log n) or better (amortized for the
/// sweep over groups whose pages are all being destaged).
pub trait DestageOrder: Send {
    fn name(&self) -> &'static str;
    /// `key` has become a candidate and is in `c` (Fig. 4 lines 11-17:
    /// sorted insert, recency 0).
    fn insert(&mut self, c: &mut dyn Candidates, key: GroupKey);
    /// A request wrote to candidate `key` (Fig. 4 lines 1-9).
    fn hit(&mut self, c: &mut dyn Candidates, key: GroupKey, hit: GroupHit);
    /// `key` stopped being a candidate without being picked (e.g. trimmed)
    /// and is gone from `c`.
    fn remove(&mut self, c: &mut dyn Candidates, key: GroupKey);
    /// Choose the next victim (lines 20-26); the caller then takes it out of
    /// the candidates without calling `remove`.
    fn pick(&mut self, c: &mut dyn Candidates) -> Option<GroupKey>;
    /// The candidate the destage pointer rests on now, without moving it.
    fn peek(&self, c: &dyn Candidates) -> Option<GroupKey>;
    /// Heap bytes of the policy's own metadata.
    fn metadata_bytes(&self) -> usize;
    /// Ordered write-back destages versions in the order they became
    /// ready (LRW's own order) rather than by the order's sweep.
    fn in_readiness_order(&self) -> bool {
        false
    }
}

/// The destage orders; a new one adds its line here.
pub static DESTAGE_ORDERS: Registry<dyn DestageOrder, ()> = Registry {
    family: "destage order",
    entries: &[
        Entry {
            name: "lrw",
            aliases: &[],
            help: "least recently written group first",
            build: |()| Box::new(Lrw::default()),
        },
        Entry {
            name: "cscan",
            aliases: &[],
            help: "ascending addresses, wrapping around",
            build: |()| Box::new(Cscan::default()),
        },
        Entry {
            name: "wow",
            aliases: &[],
            help: "CSCAN skipping groups written since the pointer passed (WOW, Fig. 4)",
            build: |()| Box::new(Wow::default()),
        },
    ],
};

pub fn build_destage_order(name: &str) -> Result<Box<dyn DestageOrder>, UnknownPolicy> {
    DESTAGE_ORDERS.build(name, ())
}

#[cfg(test)]
mod reference;
