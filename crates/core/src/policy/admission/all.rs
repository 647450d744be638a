//! ALL: every write is admitted (the baseline of the admission paper, and
//! what a plain write cache does).

use super::{Admission, Admit, WriteInfo};

pub struct All;

impl Admission for All {
    fn name(&self) -> &'static str {
        "all"
    }
    fn admit_write(&mut self, _: &WriteInfo) -> Admit {
        Admit::Cache
    }
    fn admits_every_write(&self) -> bool {
        true
    }
}
