//! CP+PI+IOI: CP+PI, with I/O criticality inheritance (§4.2.2): a bypass
//! write in flight that a critical request waits on is reissued to the
//! cache, so the waiter need not wait for the backing (the engine does the
//! reissue: `engine/promote.rs`).

use super::{cp, Admission, Admit, WriteInfo};

pub struct CpPiIoi;

impl Admission for CpPiIoi {
    fn name(&self) -> &'static str {
        "cp-pi-ioi"
    }
    fn admit_write(&mut self, w: &WriteInfo) -> Admit {
        cp::admit(w, w.issuer_hinted || w.issuer_inherited)
    }
    fn inherits_io(&self, waiter: &WriteInfo) -> bool {
        cp::admit(waiter, waiter.issuer_hinted || waiter.issuer_inherited) == Admit::Cache
    }
}
