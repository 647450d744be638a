//! Destage ORDER: which dirty write group to destage next (WOW paper, Fig. 4).
//!
//! The engine keeps the set of *candidate* groups (groups with dirty pages not
//! already being destaged) and reports every change of it to the policy; the
//! policy only orders. Groups are named by a dense id and carry a sort key
//! (volume, group number) packed into a u64, so that ascending keys are
//! ascending addresses.

mod cscan;
mod lrw;
mod wow;

pub use cscan::Cscan;
pub use lrw::Lrw;
pub use wow::Wow;

use thiserror::Error;

/// Dense id of a write group inside the engine (an index into its group table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(pub u32);

/// What one request did to one candidate group it wrote (Fig. 4 lines 1-9):
/// the group was already a candidate (a write-group hit), and some page it
/// wrote was already dirty (`page_hit`). `sequential` is the engine's
/// sequential-access detection for this write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupHit {
    pub page_hit: bool,
    pub sequential: bool,
}

/// A destage order. Every method is O(log n) or better.
pub trait DestageOrder: Send {
    fn name(&self) -> &'static str;
    /// `group` becomes a candidate (Fig. 4 lines 11-17: sorted insert, recency 0).
    fn insert(&mut self, group: GroupId, key: u64);
    /// A request wrote to candidate `group` (Fig. 4 lines 1-9).
    fn hit(&mut self, group: GroupId, key: u64, hit: GroupHit);
    /// `group` stops being a candidate without being picked (e.g. trimmed).
    fn remove(&mut self, group: GroupId, key: u64);
    /// Choose the next victim and remove it from the candidates (lines 20-26).
    fn pick(&mut self) -> Option<GroupId>;
    /// The candidate the destage pointer rests on now, without moving it.
    fn peek(&self) -> Option<GroupId>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Heap bytes of the policy's metadata.
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
