//! SYNC: admit the writes an application waits for (sync or FUA), bypass the
//! rest (the paper's simplest request-oriented baseline: it caches every
//! synchronous write, critical or not, such as a checkpoint's fsyncs).

use super::{Admission, Admit, WriteInfo};

pub struct Sync;

impl Admission for Sync {
    fn name(&self) -> &'static str {
        "sync"
    }
    fn admit_write(&mut self, w: &WriteInfo) -> Admit {
        if w.is_sync() {
            Admit::Cache
        } else {
            Admit::Bypass
        }
    }
}
