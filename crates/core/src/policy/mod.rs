//! Policy families, one algorithm per file, each chosen by name from a registry.

pub mod replacement;
