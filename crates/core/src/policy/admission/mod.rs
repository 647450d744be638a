//! ADMISSION: whether a write enters the cache at all (Kim et al., ATC'15).
//! A write that is not admitted *bypasses* the cache: it goes to the backing
//! like a write-around, and the engine drops cached clean copies of its
//! pages. A bypass never loses a cached version: when the cache holds a
//! dirty, in-flight or destaging version of one of its pages, the engine
//! sends the write through the cache instead (cache and backing at once), so
//! no older version can later come back over it.
//!
//! Policies decide once per write, when it arrives, from the request and
//! their own state; they never touch engine state. Each lives in its own
//! file, built by name from [`ADMISSIONS`]; the sequential cutoff wraps any
//! of them (`build_admission`).

mod all;
mod sequential_cutoff;

pub use all::All;
pub use sequential_cutoff::SequentialCutoff;

pub use super::registry::UnknownPolicy;
use super::registry::{Entry, Registry};
use crate::command::RequestFlags;
use crate::metrics::MetricsVisitor;
use crate::types::VolumeId;

/// A write as admission sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteInfo {
    pub volume: VolumeId,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub flags: RequestFlags,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// The write policy decides what the write does.
    Cache,
    /// To the backing only (unless that would lose a cached version).
    Bypass,
}

pub trait Admission: Send {
    fn name(&self) -> &'static str;
    /// Decide for one write (called once, when it arrives).
    fn admit_write(&mut self, write: &WriteInfo) -> Admit;
    /// Heap bytes of the policy's own state.
    fn metadata_bytes(&self) -> usize {
        0
    }
    /// Report the policy's own metrics (names prefixed `admission_`).
    fn report(&self, _: &mut dyn MetricsVisitor) {}
}

/// The admission policies; a new one adds its file and its line here.
pub static ADMISSIONS: Registry<dyn Admission, ()> = Registry {
    family: "admission policy",
    entries: &[Entry {
        name: "all",
        aliases: &[],
        help: "admit every write",
        build: |()| Box::new(All),
    }],
};

/// The admission policy called `name`, behind a sequential cutoff of
/// `sequential_cutoff_bytes` when that is not 0.
pub fn build_admission(
    name: &str,
    sequential_cutoff_bytes: u64,
) -> Result<Box<dyn Admission>, UnknownPolicy> {
    let inner = ADMISSIONS.build(name, ())?;
    Ok(if sequential_cutoff_bytes == 0 {
        inner
    } else {
        Box::new(SequentialCutoff::new(inner, sequential_cutoff_bytes))
    })
}
