//! Policy families, one algorithm per file, each chosen by name from its
//! family's registry (`registry.rs`): admission decides whether a write
//! enters the cache, the write policy what an admitted write does, the
//! destage order and rate which dirty groups go to the backing and how fast,
//! and replacement which clean page gives up its slot.

pub mod admission;
pub mod destage_order;
pub mod destage_rate;
pub(crate) mod links;
pub mod registry;
pub mod replacement;
pub mod write_policy;
