//! Destage ORDER: which dirty write group to destage next (WOW paper, Fig. 4).
//!
//! The engine keeps the set of *candidate* groups (groups with dirty pages not
//! already being destaged), sorted by key, with a recency bit each, and
//! reports every change of it to the policy; the policy only orders. A group
//! is named by its sort key (volume, group number) packed into a u64, so
//! that ascending keys are ascending addresses. CSCAN and WOW walk the
//! candidate set itself and keep only their destage pointer; LRW keeps its
//! own list.

mod cscan;
mod lrw;
mod wow;

pub use cscan::Cscan;
pub use lrw::Lrw;
pub use wow::Wow;

use thiserror::Error;

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
    fn next(&self, after: Option<u64>) -> Option<u64>;
    fn recent(&self, key: u64) -> bool;
    fn set_recent(&mut self, key: u64, on: bool);
}

/// A destage order. Every method is O(log n) or better (amortized for the
/// sweep over groups whose pages are all being destaged).
pub trait DestageOrder: Send {
    fn name(&self) -> &'static str;
    /// `key` has become a candidate and is in `c` (Fig. 4 lines 11-17:
    /// sorted insert, recency 0).
    fn insert(&mut self, c: &mut dyn Candidates, key: u64);
    /// A request wrote to candidate `key` (Fig. 4 lines 1-9).
    fn hit(&mut self, c: &mut dyn Candidates, key: u64, hit: GroupHit);
    /// `key` stopped being a candidate without being picked (e.g. trimmed)
    /// and is gone from `c`.
    fn remove(&mut self, c: &mut dyn Candidates, key: u64);
    /// Choose the next victim (lines 20-26); the caller then takes it out of
    /// the candidates without calling `remove`.
    fn pick(&mut self, c: &mut dyn Candidates) -> Option<u64>;
    /// The candidate the destage pointer rests on now, without moving it.
    fn peek(&self, c: &dyn Candidates) -> Option<u64>;
    /// Heap bytes of the policy's own metadata.
    fn metadata_bytes(&self) -> usize;
}

pub const DESTAGE_ORDER_NAMES: &[&str] = &["lrw", "cscan", "wow"];

#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown destage order {name:?}; valid: lrw, cscan, wow")]
pub struct UnknownDestageOrder {
    pub name: String,
}

pub fn build_destage_order(name: &str) -> Result<Box<dyn DestageOrder>, UnknownDestageOrder> {
    match name.to_ascii_lowercase().as_str() {
        "lrw" => Ok(Box::new(Lrw::default())),
        "cscan" => Ok(Box::new(Cscan::default())),
        "wow" => Ok(Box::new(Wow::default())),
        _ => Err(UnknownDestageOrder {
            name: name.to_string(),
        }),
    }
}

#[cfg(test)]
mod reference;
