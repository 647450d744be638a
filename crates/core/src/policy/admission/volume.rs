//! VOLUME: admit every write to a volume marked critical, bypass the others
//! (the paper's WAL policy: the log volume is the one requests wait on).
//! Which volumes are critical is engine state (`critical_volumes` in the
//! config, `Engine::set_critical_volume` online), seen here per write.

use super::{Admission, Admit, WriteInfo};

pub struct Volume;

impl Admission for Volume {
    fn name(&self) -> &'static str {
        "volume"
    }
    fn admit_write(&mut self, w: &WriteInfo) -> Admit {
        if w.volume_critical {
            Admit::Cache
        } else {
            Admit::Bypass
        }
    }
}
