//! Write-back: a write is acknowledged once its page versions (and, on a
//! persistent cache, their records) are durable on the cache device; the
//! destage order and rate move it to the backing later.

use super::{WritePolicy, WriteRoute};

pub struct WriteBack;

impl WritePolicy for WriteBack {
    fn name(&self) -> &'static str {
        "write-back"
    }
    fn route(&self, _: &mut dyn FnMut() -> bool) -> WriteRoute {
        WriteRoute::Cache
    }
    fn keeps_dirty(&self) -> bool {
        true
    }
}
