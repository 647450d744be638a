//! Engine configuration: every knob named, with the papers' defaults, and
//! validation that names the field that is wrong.

use crate::geometry::{Geometry, GeometryError};
use crate::policy::admission::{admits_every_write, ADMISSIONS};
use crate::policy::destage_order::DESTAGE_ORDERS;
use crate::policy::destage_rate::{RateConfig, RateConfigError, DESTAGE_RATES};
use crate::policy::registry::UnknownPolicy;
use crate::policy::replacement::REPLACEMENTS;
pub use crate::policy::write_policy::WritePolicyKind;
use thiserror::Error;

/// Most cache slots an engine takes (2 TiB of 4 KiB pages): a slot index
/// shares a 32-bit dirty-set entry with three flag bits.
pub const CACHE_SLOTS_MAX: u64 = 1 << 29;
/// The longest duration a configuration takes (a maximum dirty age, an
/// idle time, a commit age): a day.
pub const DURATION_NS_MAX: u64 = 86_400 * 1_000_000_000;
/// Fewest slots a log-mode cache takes (`EngineConfig::log`).
pub const LOG_SLOTS_MIN: u64 = 64;

#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    pub page_size_bytes: u64,
    /// Write group (WOW's unit): a RAID strip or stripe.
    pub group_size_bytes: u64,
    /// Pages the cache device holds.
    pub cache_slots: u64,
    pub write_policy: WritePolicyKind,
    /// Admission policy by name (`policy::admission::ADMISSIONS`).
    pub admission: String,
    /// Volumes (by id, in `add_volume` order) whose writes the VOLUME
    /// admission policy admits; `Engine::set_critical_volume` changes them online.
    pub critical_volumes: Vec<u16>,
    /// Admission policies of single volumes (by id), by name, in place of
    /// `admission` for their writes (`wcache serve --export-admission`).
    pub volume_admissions: Vec<(u16, String)>,
    /// Writes continuing a sequential stream of at least this many bytes
    /// bypass the cache (0: no cutoff).
    pub sequential_cutoff_bytes: u64,
    pub destage_order: String,
    pub destage_rate: String,
    pub rate: RateConfig,
    /// Bounds on how long dirty data waits for the backing.
    pub staleness: StalenessConfig,
    /// Journaled write-back's transactions and checkpoints.
    pub journal: JournalConfig,
    /// Clean-page replacement.
    pub replacement: String,
    /// Insert read misses into the cache as clean pages.
    pub read_insert: bool,
    /// Keep destaged pages as clean cached pages (false: free their slots at once,
    /// as the WOW paper's write cache does).
    pub keep_clean: bool,
    /// Requests in flight at once (including stalled ones).
    pub requests_max: u32,
    /// The cache device keeps a record per slot so that a restart finds every
    /// dirty page: page writes carry a `SlotRecord` to persist, and slots are
    /// reused only after `FreeSlots` has durably freed them. Needed for
    /// write-back across crashes; off in the simulator.
    pub persistent: bool,
    /// The driver keeps a write's buffer readable until every command that
    /// names it has completed, even after the write is answered (the
    /// simulator and the engine model do). Then a bypass write promoted by
    /// I/O criticality inheritance (`engine/promote.rs`) is answered once
    /// its cache copy is written, before its backing write lands; else (the
    /// real driver, which lends the client's buffer to the I/O) it is
    /// answered when both are done.
    pub buffers_outlive_answers: bool,
    /// Log mode (format 3, `docs/format-v3.md`): the slots are a ring
    /// written in order as a log of batches (`IoCommand::WriteBatch`), room
    /// is made at the log's tail, and slots are reused only after
    /// `IoCommand::AdvanceLog`. Needs `persistent`.
    pub log: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            page_size_bytes: 4096,
            group_size_bytes: 64 * 1024,
            cache_slots: 65536,
            write_policy: WritePolicyKind::WriteBack,
            admission: "all".into(),
            critical_volumes: Vec::new(),
            volume_admissions: Vec::new(),
            sequential_cutoff_bytes: 0,
            destage_order: "wow".into(),
            destage_rate: "adaptive".into(),
            rate: RateConfig::default(),
            staleness: StalenessConfig::default(),
            journal: JournalConfig::default(),
            replacement: "lru".into(),
            read_insert: true,
            keep_clean: true,
            requests_max: 4096,
            persistent: false,
            buffers_outlive_answers: false,
            log: false,
        }
    }
}

/// Bounds on staleness, the time acknowledged writes wait for the backing
/// (`docs/consistency.md`). All off by default, as in the papers'
/// experiments; `wcache serve` turns them on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StalenessConfig {
    /// A page dirty this long has its group destaged whatever the destage
    /// rate says (0: no bound).
    pub max_dirty_age_ns: u64,
    /// With no request for this long the cache is idle...
    pub idle_after_ns: u64,
    /// ...and keeps at least this many destages outstanding until a request
    /// comes (0: no idle drain).
    pub idle_destages: u32,
}

impl Default for StalenessConfig {
    fn default() -> Self {
        StalenessConfig {
            max_dirty_age_ns: 0,
            idle_after_ns: 1_000_000_000,
            idle_destages: 0,
        }
    }
}

/// Where journaled write-back commits its transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsistencyPoints {
    /// By size (`commit_pages`) and age (`commit_age_ns`): the backing
    /// alone is point-in-time consistent.
    Size,
    /// At every FLUSH and every hint (`Engine::consistency_point`): the
    /// backing alone holds the state at one of them (application-consistent).
    Flush,
    /// At every hint only.
    Hint,
}

impl ConsistencyPoints {
    pub const NAMES: &'static str = "size, flush, hint";

    pub fn from_name(name: &str) -> Option<ConsistencyPoints> {
        match name.to_ascii_lowercase().as_str() {
            "size" => Some(ConsistencyPoints::Size),
            "flush" => Some(ConsistencyPoints::Flush),
            "hint" => Some(ConsistencyPoints::Hint),
            _ => None,
        }
    }

    /// `from_name`, or the error that names the option and what it takes.
    pub fn from_option(name: &str) -> Result<ConsistencyPoints, String> {
        Self::from_name(name).ok_or_else(|| {
            format!(
                "--consistency-points {name:?}: valid: {}",
                ConsistencyPoints::NAMES
            )
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ConsistencyPoints::Size => "size",
            ConsistencyPoints::Flush => "flush",
            ConsistencyPoints::Hint => "hint",
        }
    }
}

/// How a committed transaction reaches the backing atomically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointMode {
    /// A journal region on the backing of this many pages per volume:
    /// pages staged there, a commit record, then in place, then retired
    /// (`docs/on-disk-format.md`, "Backing journal").
    BackingJournal { pages: u64 },
    /// The paper's storage-side NVRAM journal: staged pages cost their
    /// in-place writes only (a simulator model; no real backing has one).
    Nvram,
}

/// Journaled write-back's knobs (`docs/consistency.md`). Used only under
/// `write-back-journaled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalConfig {
    /// The host journal: most page versions not yet checkpointed (dirty,
    /// current and kept older ones); writes wait beyond it. 0: the whole cache.
    pub journal_pages: u64,
    /// The open transaction commits once it holds this many pages
    /// (0: an eighth of the journal).
    pub commit_pages: u64,
    /// ... or this long after its first write (0: no age).
    pub commit_age_ns: u64,
    pub points: ConsistencyPoints,
    pub checkpoint: CheckpointMode,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            journal_pages: 0,
            commit_pages: 0,
            commit_age_ns: 1_000_000_000,
            points: ConsistencyPoints::Size,
            checkpoint: CheckpointMode::Nvram,
        }
    }
}

impl JournalConfig {
    /// The journal's size in pages for a cache of `cache_slots`.
    pub fn journal_pages(&self, cache_slots: u64) -> u64 {
        match self.journal_pages {
            0 => cache_slots,
            n => n.min(cache_slots),
        }
    }
    /// Pages at which the open transaction commits (by size).
    pub fn commit_pages(&self, cache_slots: u64) -> u64 {
        let journal = self.journal_pages(cache_slots);
        let limit = match self.checkpoint {
            CheckpointMode::BackingJournal { pages } => pages,
            CheckpointMode::Nvram => u64::MAX,
        };
        match self.commit_pages {
            0 => (journal / 8).max(1),
            n => n,
        }
        .min(journal)
        .min(limit)
    }
}

/// The shortest maximum dirty age (a shorter one would turn the age periods
/// over faster than the dirty set can be walked).
pub const MAX_DIRTY_AGE_NS_MIN: u64 = 10_000_000;

#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("geometry: {0}")]
    Geometry(#[from] GeometryError),
    #[error(
        "cache_slots = {slots}: the cache must hold at least one write group ({group_pages} pages)"
    )]
    CacheSmallerThanGroup { slots: u64, group_pages: u32 },
    #[error("cache_slots = {0}: at most {max} slots", max = CACHE_SLOTS_MAX)]
    CacheTooLarge(u64),
    /// A policy name no policy of its family answers to (the message names the family).
    #[error("{0}")]
    Policy(#[from] UnknownPolicy),
    #[error("rate: {0}")]
    Rate(#[from] RateConfigError),
    #[error("requests_max = 0: at least one request must be allowed")]
    NoRequests,
    #[error(
        "max_dirty_age = {0} ns: at least {MAX_DIRTY_AGE_NS_MIN} ns (10 ms), or 0 for no bound"
    )]
    MaxDirtyAgeTooShort(u64),
    #[error("{field} = {ns} ns: at most a day ({DURATION_NS_MAX} ns)")]
    DurationTooLong { field: &'static str, ns: u64 },
    #[error("idle_destages = {idle} exceeds destages_max = {max}")]
    IdleDestages { idle: u32, max: u32 },
    #[error("write policy write-back-ordered: {0}")]
    Ordered(&'static str),
    #[error("write policy write-back-journaled: {0}")]
    Journaled(String),
    #[error("log mode: {0}")]
    Log(&'static str),
}

impl EngineConfig {
    pub fn validate(&self) -> Result<Geometry, ConfigError> {
        let geometry = self.validate_settings()?;
        if self.cache_slots < geometry.group_pages() as u64 {
            return Err(ConfigError::CacheSmallerThanGroup {
                slots: self.cache_slots,
                group_pages: geometry.group_pages(),
            });
        }
        if self.cache_slots > CACHE_SLOTS_MAX {
            return Err(ConfigError::CacheTooLarge(self.cache_slots));
        }
        if self.log && self.cache_slots < LOG_SLOTS_MIN {
            return Err(ConfigError::Log(
                "the cache needs at least 64 slots (room for batches and their headers)",
            ));
        }
        Ok(geometry)
    }

    /// Everything but the cache size: a front end checks this before it
    /// creates or formats a cache device, whose size it learns later.
    pub fn validate_settings(&self) -> Result<Geometry, ConfigError> {
        let geometry = Geometry::new(self.page_size_bytes, self.group_size_bytes)?;
        // Names are checked against the registries; nothing is built here.
        DESTAGE_ORDERS.find(&self.destage_order)?;
        DESTAGE_RATES.find(&self.destage_rate)?;
        REPLACEMENTS.find(&self.replacement)?;
        ADMISSIONS.find(&self.admission)?;
        for (_, name) in &self.volume_admissions {
            ADMISSIONS.find(name)?;
        }
        self.rate.validate()?;
        if self.requests_max == 0 {
            return Err(ConfigError::NoRequests);
        }
        if self.write_policy == WritePolicyKind::OrderedWriteBack {
            self.check_ordered()?;
        }
        if self.write_policy == WritePolicyKind::JournaledWriteBack {
            self.check_journaled()?;
        }
        if self.log && !self.persistent {
            return Err(ConfigError::Log(
                "format 3 needs a cache file or device (a cache in memory has no format)",
            ));
        }
        let s = &self.staleness;
        if s.max_dirty_age_ns != 0 && s.max_dirty_age_ns < MAX_DIRTY_AGE_NS_MIN {
            return Err(ConfigError::MaxDirtyAgeTooShort(s.max_dirty_age_ns));
        }
        for (field, ns) in [
            ("max_dirty_age", s.max_dirty_age_ns),
            ("idle_after", s.idle_after_ns),
            ("commit_age", self.journal.commit_age_ns),
        ] {
            if ns > DURATION_NS_MAX {
                return Err(ConfigError::DurationTooLong { field, ns });
            }
        }
        if s.idle_destages > self.rate.destages_max {
            return Err(ConfigError::IdleDestages {
                idle: s.idle_destages,
                max: self.rate.destages_max,
            });
        }
        Ok(geometry)
    }
}

/// Why ordered and journaled write-back admit every write (configuration and online changes).
pub(crate) const ORDERED_ADMITS_ALL: &str =
    "every write must enter the cache (admission all, no sequential cutoff): a write around it would reach the backing out of order";

impl EngineConfig {
    /// What journaled write-back needs: every write in the cache, and a
    /// backing journal that holds the whole host journal (recovery
    /// checkpoints every recovered page as one transaction).
    fn check_journaled(&self) -> Result<(), ConfigError> {
        if !self.admits_all() {
            return Err(ConfigError::Journaled(ORDERED_ADMITS_ALL.into()));
        }
        let j = &self.journal;
        if let CheckpointMode::BackingJournal { pages } = j.checkpoint {
            let journal = j.journal_pages(self.cache_slots);
            if pages < journal {
                return Err(ConfigError::Journaled(format!(
                    "the backing journal ({pages} pages) must hold the host journal ({journal} pages): recovery checkpoints every recovered page at once"
                )));
            }
        }
        if j.commit_age_ns != 0 && j.commit_age_ns < MAX_DIRTY_AGE_NS_MIN {
            return Err(ConfigError::Journaled(format!(
                "commit age {} ns: at least {MAX_DIRTY_AGE_NS_MIN} ns (10 ms), or 0 for none",
                j.commit_age_ns
            )));
        }
        Ok(())
    }

    /// Every write of every volume enters the cache.
    pub(crate) fn admits_all(&self) -> bool {
        let all = |name: &str| admits_every_write(name).unwrap_or(false);
        self.sequential_cutoff_bytes == 0
            && all(&self.admission)
            && self.volume_admissions.iter().all(|(_, n)| all(n))
    }

    /// What ordered write-back cannot be combined with (yet).
    fn check_ordered(&self) -> Result<(), ConfigError> {
        if !self.admits_all() {
            return Err(ConfigError::Ordered(ORDERED_ADMITS_ALL));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_count_has_a_named_limit() {
        let mut c = EngineConfig {
            cache_slots: CACHE_SLOTS_MAX,
            ..EngineConfig::default()
        };
        assert!(c.validate().is_ok());
        c.cache_slots = CACHE_SLOTS_MAX + 1;
        let e = c.validate().unwrap_err().to_string();
        assert_eq!(e, "cache_slots = 536870913: at most 536870912 slots");
    }
}
