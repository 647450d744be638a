//! CP: admit the sync writes of critical issuers, bypass the rest (the
//! paper's critical-process policy, §3). An issuer is critical by the hint
//! (`Engine::set_critical_issuer`); a write the front end marks critical
//! itself (`RequestFlags::critical`) counts as a critical issuer's. Inherited
//! criticality is CP+PI's, not this policy's.

use super::{Admission, Admit, WriteInfo};

pub struct Cp;

/// CP's rule, shared with CP+PI: a sync write of a critical issuer.
pub(super) fn admit(w: &WriteInfo, issuer_critical: bool) -> Admit {
    if w.is_sync() && (issuer_critical || w.flags.critical) {
        Admit::Cache
    } else {
        Admit::Bypass
    }
}

impl Admission for Cp {
    fn name(&self) -> &'static str {
        "cp"
    }
    fn admit_write(&mut self, w: &WriteInfo) -> Admit {
        admit(w, w.issuer_hinted)
    }
}
