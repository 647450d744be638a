//! Write-through: every write goes to the cache and the backing at once and
//! is acknowledged when both hold it, so the backing is never behind an
//! acknowledged write; the cached copy serves later reads.

use super::{WritePolicy, WriteRoute};

pub struct WriteThrough;

impl WritePolicy for WriteThrough {
    fn name(&self) -> &'static str {
        "write-through"
    }
    fn route(&self, _: &mut dyn FnMut() -> bool) -> WriteRoute {
        WriteRoute::CacheAndBacking
    }
}
