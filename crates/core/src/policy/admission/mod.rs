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
mod cp;
mod cp_pi;
mod cp_pi_ioi;
mod sequential_cutoff;
mod sync;
mod volume;

pub use all::All;
pub use cp::Cp;
pub use cp_pi::CpPi;
pub use cp_pi_ioi::CpPiIoi;
pub use sequential_cutoff::SequentialCutoff;
pub use sync::Sync;
pub use volume::Volume;

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
    /// The volume is marked critical (config `critical_volumes`, or online).
    pub volume_critical: bool,
    /// The issuer is critical by a hint (`Engine::set_critical_issuer`).
    pub issuer_hinted: bool,
    /// The issuer is critical by inheritance (a cause still in force).
    pub issuer_inherited: bool,
}

impl WriteInfo {
    /// The application waits for this write: sync, or force unit access.
    pub fn is_sync(&self) -> bool {
        self.flags.sync || self.flags.fua
    }
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
    /// I/O criticality inheritance: whether a bypass write in flight that
    /// `waiter` must wait for is reissued to the cache (promoted) so the
    /// waiter goes on at once. `waiter` is the request that waits (a write,
    /// or a FLUSH or an issuer that inherits criticality, asked as a sync
    /// write of its issuer). No policy but CP+PI+IOI promotes.
    fn inherits_io(&self, _waiter: &WriteInfo) -> bool {
        false
    }
    /// Whatever the write, it is admitted (ordered and journaled write-back
    /// need every write in the cache).
    fn admits_every_write(&self) -> bool {
        false
    }
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
    entries: &[
        Entry {
            name: "all",
            aliases: &[],
            help: "admit every write",
            build: |()| Box::new(All),
        },
        Entry {
            name: "sync",
            aliases: &[],
            help: "admit sync and FUA writes, bypass the others",
            build: |()| Box::new(Sync),
        },
        Entry {
            name: "volume",
            aliases: &["wal"],
            help: "admit writes to volumes marked critical (the paper's WAL policy)",
            build: |()| Box::new(Volume),
        },
        Entry {
            name: "cp",
            aliases: &[],
            help: "admit sync writes of critical issuers (hinted)",
            build: |()| Box::new(Cp),
        },
        Entry {
            name: "cp-pi",
            aliases: &["cp+pi"],
            help: "cp, with issuers also critical while they inherit criticality",
            build: |()| Box::new(CpPi),
        },
        Entry {
            name: "cp-pi-ioi",
            aliases: &["cp+pi+ioi"],
            help: "cp-pi, and a bypass write a critical request waits on is reissued to the cache",
            build: |()| Box::new(CpPiIoi),
        },
    ],
};

/// Whether the admission policy called `name` admits every write.
pub fn admits_every_write(name: &str) -> Result<bool, UnknownPolicy> {
    Ok((ADMISSIONS.find(name)?.build)(()).admits_every_write())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(sync: bool, fua: bool, critical: bool) -> WriteInfo {
        WriteInfo {
            volume: VolumeId(0),
            offset_bytes: 0,
            len_bytes: 4096,
            flags: RequestFlags {
                fua,
                sync,
                critical,
                issuer: 1,
            },
            volume_critical: false,
            issuer_hinted: false,
            issuer_inherited: false,
        }
    }

    fn decide(name: &str, w: WriteInfo) -> Admit {
        ADMISSIONS.build(name, ()).unwrap().admit_write(&w)
    }

    #[test]
    fn sync_admits_sync_and_fua_writes_only() {
        use Admit::*;
        assert_eq!(decide("sync", write(true, false, false)), Cache);
        assert_eq!(decide("sync", write(false, true, false)), Cache);
        assert_eq!(decide("sync", write(false, false, true)), Bypass);
    }

    #[test]
    fn volume_admits_writes_to_critical_volumes_only() {
        let mut w = write(true, true, true);
        assert_eq!(decide("volume", w), Admit::Bypass);
        w.volume_critical = true;
        w.flags = RequestFlags::default();
        assert_eq!(decide("wal", w), Admit::Cache);
    }

    #[test]
    fn cp_admits_sync_writes_of_critical_issuers_and_cp_pi_counts_inheritance() {
        use Admit::*;
        let mut w = write(true, false, false);
        assert_eq!(decide("cp", w), Bypass, "sync, but not critical");
        w.issuer_inherited = true;
        assert_eq!(decide("cp", w), Bypass, "cp ignores inheritance");
        assert_eq!(decide("cp-pi", w), Cache);
        w.issuer_inherited = false;
        w.issuer_hinted = true;
        assert_eq!(decide("cp", w), Cache);
        assert_eq!(decide("cp+pi", w), Cache);
        w.flags.sync = false;
        assert_eq!(decide("cp", w), Bypass, "critical, but not sync");
        assert_eq!(
            decide("cp", write(false, true, true)),
            Cache,
            "FUA of a write marked critical"
        );
    }

    #[test]
    fn only_all_admits_every_write_of_the_registry() {
        for e in ADMISSIONS.entries {
            let every = admits_every_write(e.name).expect("registered");
            assert_eq!(every, e.name == "all", "{}", e.name);
            let mut p = (e.build)(());
            // A bypassed write of any kind says it does not.
            let bypasses = [false, true].into_iter().any(|sync| {
                [false, true]
                    .into_iter()
                    .any(|critical| p.admit_write(&write(sync, false, critical)) == Admit::Bypass)
            });
            assert_eq!(every, !bypasses, "{}", e.name);
        }
        assert!(admits_every_write("nope").is_err());
    }

    #[test]
    fn an_unknown_name_lists_the_valid_ones() {
        let e = build_admission("cpx", 0)
            .err()
            .expect("unknown")
            .to_string();
        for name in ["all", "sync", "volume", "cp", "cp-pi"] {
            assert!(e.contains(name), "{e}");
        }
    }
}
