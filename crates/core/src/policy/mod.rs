//! Policy families, one algorithm per file, each chosen by name from a registry.

pub mod destage_order;
pub mod destage_rate;
pub(crate) mod links;
pub mod replacement;
