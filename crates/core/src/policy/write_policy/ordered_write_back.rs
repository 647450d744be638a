//! Ordered write-back (Koller et al., FAST'13 §3.1): acknowledged once the
//! cache device holds the write, like write-back, but every version of a
//! page is kept and destaged in an order that respects the writes'
//! completion-issue dependencies, so the backing alone is always a
//! point-in-time consistent state. The engine keeps the order
//! (`engine/ordered.rs`).

use super::{WritePolicy, WriteRoute};

pub struct OrderedWriteBack;

impl WritePolicy for OrderedWriteBack {
    fn name(&self) -> &'static str {
        "write-back-ordered"
    }
    fn route(&self, _: &mut dyn FnMut() -> bool) -> WriteRoute {
        WriteRoute::Cache
    }
    fn keeps_dirty(&self) -> bool {
        true
    }
    fn ordered(&self) -> bool {
        true
    }
}
