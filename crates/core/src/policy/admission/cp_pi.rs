//! CP+PI: CP, where an issuer is also critical while it has inherited
//! criticality (process criticality inheritance, §4.2.1: a critical waiter
//! made it critical until the cause ends; counted by the engine,
//! `Engine::inherit_criticality` and `end_inherited_criticality`).

use super::{cp, Admission, Admit, WriteInfo};

pub struct CpPi;

impl Admission for CpPi {
    fn name(&self) -> &'static str {
        "cp-pi"
    }
    fn admit_write(&mut self, w: &WriteInfo) -> Admit {
        cp::admit(w, w.issuer_hinted || w.issuer_inherited)
    }
}
