//! Journaled write-back (Koller et al., FAST'13 §3.2): acknowledged once the
//! cache device holds the write, like write-back; writes are grouped into
//! transactions (overwrites inside one coalesce) that are committed by
//! size, age or an application's consistency point and checkpointed to the
//! backing atomically, one after another, so the backing alone moves from
//! one transaction boundary to the next. The engine keeps the transactions
//! (`engine/journal.rs`).

use super::{FlushAction, WritePolicy, WriteRoute};
use crate::config::ConsistencyPoints;

pub struct JournaledWriteBack;

impl WritePolicy for JournaledWriteBack {
    fn name(&self) -> &'static str {
        "write-back-journaled"
    }
    fn route(&self, _: &mut dyn FnMut() -> bool) -> WriteRoute {
        WriteRoute::Cache
    }
    fn keeps_dirty(&self) -> bool {
        true
    }
    fn journaled(&self) -> bool {
        true
    }
    fn flush(&self, points: ConsistencyPoints) -> FlushAction {
        match points {
            ConsistencyPoints::Flush => FlushAction::ConsistencyPoint,
            ConsistencyPoints::Size | ConsistencyPoints::Hint => FlushAction::Answer,
        }
    }
}
