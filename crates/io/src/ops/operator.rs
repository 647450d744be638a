//! What an operator may do to a running cache, for every front end that
//! offers it (the control socket today): read its status and statistics,
//! drain it online with progress while it serves, and change its policies.
//! It exists so that these rules live beside the lifecycle and not in a
//! protocol: only one online drain runs at a time; leaving write-back
//! drains first and switches only once no page is dirty; write-back is
//! refused on a cache in process memory unless the server allowed it.
//! It must never make a cache decision (the engine does) or move bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wcache_core::engine::NotJournaled;
use wcache_core::policy::admission::ADMISSIONS;
use wcache_core::policy::destage_order::DESTAGE_ORDERS;
use wcache_core::policy::destage_rate::DESTAGE_RATES;
use wcache_core::{ChangeError, CriticalityError, WritePolicyKind};

use crate::cache::{drain_driver, CacheError};
use crate::driver::Driver;
use crate::ops::eta::{DrainMeter, DrainSample};
use crate::ops::latency::{RequestClass, VolumeLatency};
use crate::ops::snapshot::{Collect, ExportCounts, RequestStats, Snapshot};

/// Every setting `set` changes online; each is also a `wcache serve` option
/// and config key of the same name (a test checks it). `destage-order` and
/// `destage-rate` are accepted for `order` and `rate`.
pub const SET_KEYS: &[&str] = &[
    "write-policy",
    "admission",
    "order",
    "rate",
    "low-threshold",
    "high-threshold",
    "destages-max",
    "sequential-cutoff",
    "max-dirty-age",
    "idle-after",
    "idle-destages",
];

/// Times a drain that must precede a switch away from write-back is
/// retried when writes dirty pages again between the drain and the switch.
const LEAVE_WRITE_BACK_TRIES_MAX: u32 = 20;

/// Why an operation was refused or failed; each names what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("unknown setting {key:?}; valid: {}", SET_KEYS.join(", "))]
    UnknownKey { key: String },
    #[error("{key} {value:?}: {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error(transparent)]
    Change(#[from] ChangeError),
    #[error(
        "write-back is refused on a cache in process memory (--cache mem): it would acknowledge \
         writes that any exit loses (the server was not started with \
         --volatile-write-back-for-benchmarks)"
    )]
    VolatileWriteBack,
    #[error("unknown export {name:?}; the exports are: {valid}")]
    UnknownExport { name: String, valid: String },
    #[error(
        "a flush is already running on this cache; wait for it or watch it with `wcache status`"
    )]
    FlushRunning,
    #[error(
        "writes kept dirtying pages: still {dirty_pages} dirty after {tries} drains; {to} not set"
    )]
    NotQuiet {
        to: &'static str,
        dirty_pages: u64,
        tries: u32,
    },
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Criticality(#[from] CriticalityError),
    #[error(transparent)]
    NotJournaled(#[from] NotJournaled),
    #[error("this front end cannot be stopped through its control socket")]
    NoStop,
    #[error(
        "this front end does not know which process sent a request (NBD); critical callers \
         are wcache mount's (by issuer: critical-issuer)"
    )]
    NoCallers,
    #[error("critical-caller: {0}")]
    CriticalCaller(String),
}

/// One volume as the operator sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExportStatus {
    pub name: String,
    pub backing: String,
    pub size_bytes: u64,
    /// How the backing is doing, where that can change (an NBD backing's
    /// connections: connected or reconnecting, since when, losses).
    #[serde(default)]
    pub backing_health: Option<String>,
    /// Its pages newer in the cache than on the backing.
    #[serde(default)]
    pub dirty_pages: u64,
    /// Pages read found in the cache, of all read since start (0 with none).
    #[serde(default)]
    pub read_hit_ratio: f64,
    /// Pages written over a dirty page, of all written since start.
    #[serde(default)]
    pub write_hit_ratio: f64,
    /// Pages destaged to its backing since start.
    #[serde(default)]
    pub destaged_pages: u64,
}

/// The state of a running cache (`wcache status`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// `serving`, or `flushing` while an online drain runs.
    pub state: String,
    pub pid: u32,
    pub uptime_s: f64,
    pub cache_device: String,
    pub page_size_bytes: u64,
    pub capacity_pages: u64,
    pub dirty_pages: u64,
    /// Staleness: an upper bound on the age of the oldest dirty page, i.e.
    /// how far the backing lags the acknowledged writes (0: nothing dirty).
    #[serde(default)]
    pub dirty_age_ms: u64,
    pub clean_pages: u64,
    /// Slots holding a page version (dirty, clean, or old and not yet freed), of all.
    pub occupancy_ratio: f64,
    pub dirty_ratio: f64,
    pub destages_in_flight: u64,
    pub requests_in_flight: u64,
    pub write_policy: String,
    pub admission: String,
    pub destage_order: String,
    pub destage_rate: String,
    pub exports: Vec<ExportStatus>,
    /// The front end's clients connected now (empty where it lists none).
    #[serde(default)]
    pub clients: Vec<ClientStatus>,
    /// The link to the replication peer, where the cache is replicated.
    #[serde(default)]
    pub replication: Option<crate::replica::ReplicationStatus>,
}

/// How an online drain is going.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlushProgress {
    pub dirty_pages: u64,
    /// Write groups holding them (a destage each, about).
    pub dirty_groups: u64,
    /// Dirty pages when the drain started.
    pub dirty_pages_start: u64,
    /// Pages destaged since the drain started.
    pub destaged_pages: u64,
    /// Net decrease of dirty pages per second over the last few seconds
    /// (writes arriving meanwhile slow it down).
    pub rate_pages_per_s: f64,
    /// Seconds to go: the dirty groups left, at the destages a second and
    /// the new dirty groups the writes make meanwhile, over the last 30 s
    /// (`ops::eta`); none while nothing drains or the writes outrun it.
    pub eta_s: Option<f64>,
    pub elapsed_s: f64,
}

/// What `set` changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetDone {
    pub key: String,
    pub old: String,
    pub new: String,
}

/// What `consistency-point` did: the transactions committed so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConsistencyPointDone {
    pub journal_commits: u64,
}

/// What `critical-issuer` changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CriticalIssuerDone {
    pub issuer: u32,
    pub critical: bool,
    /// Its hint before.
    pub was: bool,
    /// The admission policy in force (only `cp` and `cp-pi` read the hint).
    pub admission: String,
}

/// What `stop` did before it asked the front end to stop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StopDone {
    /// Every dirty page was destaged first (writes refused meanwhile).
    pub flushed: bool,
    /// Pages destaged by the stop's drain.
    pub destaged_pages: u64,
    /// Dirty pages left in the cache (they stay for the next start).
    pub dirty_pages: u64,
}

/// How a front end stops itself when asked (`Operator::on_stop`).
pub type StopHook = Box<dyn Fn() + Send + Sync>;

/// How a front end changes its rules for critical callers
/// (`Operator::on_critical_callers`): `(by, value, critical)` to the rules
/// now in force, or why not.
pub type CriticalCallersHook =
    Box<dyn Fn(&str, &str, bool) -> Result<serde_json::Value, String> + Send + Sync>;

/// A front end's own counters and gauges, for `stats` and the metrics
/// (`Operator::on_front_metrics`).
pub type FrontMetricsHook = Box<dyn Fn() -> Vec<crate::ops::snapshot::Metric> + Send + Sync>;

/// One client of a front end, as `status` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientStatus {
    /// `tcp ADDR`, `unix pid N`.
    pub peer: String,
    pub export: String,
    pub connected_s: f64,
}

/// How a front end lists its clients (`Operator::on_clients`).
pub type ClientsHook = Box<dyn Fn() -> Vec<ClientStatus> + Send + Sync>;

/// A handle on a running cache for operations; cheap to clone.
#[derive(Clone)]
pub struct Operator {
    inner: Arc<Inner>,
}

struct Inner {
    driver: Arc<Driver>,
    exports: Vec<ExportStatus>,
    latency: Vec<Arc<VolumeLatency>>,
    cache_device: String,
    started: Instant,
    write_back_allowed: bool,
    flush: Mutex<()>,
    flushing: AtomicBool,
    stop: Mutex<Option<StopHook>>,
    clients: Mutex<Option<ClientsHook>>,
    front_metrics: Mutex<Option<FrontMetricsHook>>,
    critical_callers: Mutex<Option<CriticalCallersHook>>,
    /// The cache device's mirror on a peer host, where replicated.
    replication: Option<Arc<crate::replica::Mirror>>,
}

impl Operator {
    pub(crate) fn new(
        driver: Arc<Driver>,
        exports: Vec<ExportStatus>,
        latency: Vec<Arc<VolumeLatency>>,
        cache_device: String,
        write_back_allowed: bool,
        replication: Option<Arc<crate::replica::Mirror>>,
    ) -> Operator {
        Operator {
            inner: Arc::new(Inner {
                driver,
                exports,
                latency,
                cache_device,
                started: Instant::now(),
                write_back_allowed,
                flush: Mutex::new(()),
                flushing: AtomicBool::new(false),
                stop: Mutex::new(None),
                clients: Mutex::new(None),
                front_metrics: Mutex::new(None),
                critical_callers: Mutex::new(None),
                replication,
            }),
        }
    }

    pub fn exports(&self) -> &[ExportStatus] {
        &self.inner.exports
    }

    /// Every counter, gauge and latency histogram, of one moment.
    pub fn snapshot(&self) -> Snapshot {
        let inner = &self.inner;
        let mut engine = Collect::default();
        inner.driver.visit_metrics(&mut engine);
        let mut requests = Vec::new();
        for (export, latency) in inner.exports.iter().zip(&inner.latency) {
            let merged = latency.merged();
            for (class, h) in RequestClass::ALL.iter().zip(&merged) {
                requests.push(RequestStats::new(&export.name, *class, h));
            }
        }
        let counts = inner.driver.volume_counts();
        let exports = inner
            .exports
            .iter()
            .zip(&counts)
            .map(|(e, c)| ExportCounts::new(&e.name, c))
            .collect();
        Snapshot {
            uptime_s: inner.started.elapsed().as_secs_f64(),
            engine: engine.0,
            driver: inner.driver.stats(),
            requests,
            exports,
            front: self.front_metrics(),
        }
    }

    pub fn status(&self) -> Status {
        let inner = &self.inner;
        let mut m = Collect::default();
        inner.driver.visit_metrics(&mut m);
        let get = |name: &str| m.0.iter().find(|x| x.name == name).map_or(0, |x| x.value);
        let capacity = get("capacity_pages");
        let ratio = |n: u64| {
            if capacity == 0 {
                0.0
            } else {
                n as f64 / capacity as f64
            }
        };
        let [write_policy, admission, order, rate] = inner.driver.policy_names();
        Status {
            state: if inner.flushing.load(Ordering::Relaxed) {
                "flushing"
            } else {
                "serving"
            }
            .to_string(),
            pid: std::process::id(),
            uptime_s: inner.started.elapsed().as_secs_f64(),
            cache_device: inner.cache_device.clone(),
            page_size_bytes: inner.driver.page_size_bytes(),
            capacity_pages: capacity,
            dirty_pages: get("dirty_pages"),
            dirty_age_ms: get("dirty_age_ms"),
            clean_pages: get("clean_pages"),
            occupancy_ratio: ratio(capacity.saturating_sub(get("free_slots"))),
            dirty_ratio: ratio(get("dirty_pages")),
            destages_in_flight: get("destages_in_flight"),
            requests_in_flight: get("requests_in_flight"),
            write_policy: write_policy.to_string(),
            admission: admission.to_string(),
            destage_order: order.to_string(),
            destage_rate: rate.to_string(),
            exports: self.export_statuses(),
            clients: self.clients(),
            replication: self.replication(),
        }
    }

    /// The replication link now, where the cache is replicated.
    pub fn replication(&self) -> Option<crate::replica::ReplicationStatus> {
        self.inner.replication.as_ref().map(|m| m.status())
    }

    /// The replication link's mirror, where the cache is replicated.
    pub fn mirror(&self) -> Option<Arc<crate::replica::Mirror>> {
        self.inner.replication.clone()
    }

    /// Every export with its backing's health, dirty pages and hit ratios now.
    fn export_statuses(&self) -> Vec<ExportStatus> {
        let inner = &self.inner;
        let ratio = |hits: u64, of: u64| {
            if of == 0 {
                0.0
            } else {
                hits as f64 / of as f64
            }
        };
        let counts = inner.driver.volume_counts();
        inner
            .exports
            .iter()
            .zip(inner.driver.backing_devices().map(|b| b.health()))
            .zip(counts)
            .map(|((e, health), c)| ExportStatus {
                backing_health: health,
                dirty_pages: c.dirty_pages,
                read_hit_ratio: ratio(c.read_page_hits, c.read_pages),
                write_hit_ratio: ratio(c.write_page_hits, c.write_pages),
                destaged_pages: c.destaged_pages,
                ..e.clone()
            })
            .collect()
    }

    /// Checks an export name given to `flush`. The drain covers every
    /// export of the cache (the engine drains the cache as a whole).
    pub fn check_export(&self, name: &str) -> Result<(), OpError> {
        if self.inner.exports.iter().any(|e| e.name == name) {
            return Ok(());
        }
        let valid: Vec<&str> = self.inner.exports.iter().map(|e| e.name.as_str()).collect();
        Err(OpError::UnknownExport {
            name: name.to_string(),
            valid: valid.join(", "),
        })
    }

    /// Destages every dirty page while the cache goes on serving; `progress`
    /// hears about five times a second and returns false to stop the drain
    /// (the pages left stay dirty and are destaged at the usual pace).
    /// Gives up after `stall_timeout` without progress.
    pub fn flush(
        &self,
        stall_timeout: Duration,
        progress: &mut dyn FnMut(&FlushProgress) -> bool,
    ) -> Result<FlushProgress, OpError> {
        let _one = match self.inner.flush.try_lock() {
            Ok(guard) => guard,
            // A drain that panicked left nothing to protect: the engine has its own lock.
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(OpError::FlushRunning),
        };
        self.inner.flushing.store(true, Ordering::Relaxed);
        let result = self.drain_once(stall_timeout, progress);
        self.inner.flushing.store(false, Ordering::Relaxed);
        result
    }

    /// How the front end lists its clients for `status`.
    pub fn on_clients(&self, hook: ClientsHook) {
        *self.inner.clients.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// How the front end reports its own counters and gauges.
    pub fn on_front_metrics(&self, hook: FrontMetricsHook) {
        *self
            .inner
            .front_metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    fn front_metrics(&self) -> Vec<crate::ops::snapshot::Metric> {
        let hook = self
            .inner
            .front_metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        hook.as_ref().map(|list| list()).unwrap_or_default()
    }

    fn clients(&self) -> Vec<ClientStatus> {
        let hook = self.inner.clients.lock().unwrap_or_else(|p| p.into_inner());
        hook.as_ref().map(|list| list()).unwrap_or_default()
    }

    /// How the front end changes its rules for critical callers.
    pub fn on_critical_callers(&self, hook: CriticalCallersHook) {
        *self
            .inner
            .critical_callers
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// `critical-caller`: a rule added or removed by the front end.
    pub fn critical_caller(
        &self,
        by: &str,
        value: &str,
        critical: bool,
    ) -> Result<serde_json::Value, OpError> {
        let hook = self
            .inner
            .critical_callers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(change) = hook.as_ref() else {
            return Err(OpError::NoCallers);
        };
        change(by, value, critical).map_err(OpError::CriticalCaller)
    }

    /// How the front end stops when `stop` is asked (as at SIGTERM).
    pub fn on_stop(&self, hook: StopHook) {
        *self.inner.stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// Stops the front end (its stop hook); with `flush`, first refuses
    /// writes and drains every dirty page (with `progress`, as `flush`):
    /// if the drain fails, writes are accepted again and nothing stops.
    pub fn stop(
        &self,
        flush: bool,
        stall_timeout: Duration,
        progress: &mut dyn FnMut(&FlushProgress) -> bool,
    ) -> Result<StopDone, OpError> {
        let hook = self.inner.stop.lock().unwrap_or_else(|p| p.into_inner());
        let Some(stop) = hook.as_ref() else {
            return Err(OpError::NoStop);
        };
        let driver = &self.inner.driver;
        let mut destaged_pages = 0;
        if flush {
            driver.refuse_writes(true);
            match self.flush(stall_timeout, progress) {
                Ok(done) => destaged_pages = done.destaged_pages,
                Err(e) => {
                    driver.refuse_writes(false);
                    return Err(e);
                }
            }
        }
        stop();
        Ok(StopDone {
            flushed: flush,
            destaged_pages,
            dirty_pages: driver.dirty_pages(),
        })
    }

    fn drain_once(
        &self,
        stall_timeout: Duration,
        progress: &mut dyn FnMut(&FlushProgress) -> bool,
    ) -> Result<FlushProgress, OpError> {
        let driver = &self.inner.driver;
        let sample = || driver.inspect_engine(DrainSample::of);
        let mut meter = DrainMeter::new(Instant::now(), sample());
        drain_driver(driver, stall_timeout, |_| {
            progress(&meter.sample(Instant::now(), sample()))
        })?;
        let end = DrainSample {
            dirty_pages: 0,
            dirty_groups: 0,
            ..sample()
        };
        Ok(meter.sample(Instant::now(), end))
    }

    /// Changes one policy online: `write-policy`, `admission`,
    /// `destage-order` (or `order`), `destage-rate` (or `rate`). Leaving
    /// write-back drains first, reporting through `progress`.
    pub fn set(
        &self,
        key: &str,
        value: &str,
        progress: &mut dyn FnMut(&FlushProgress) -> bool,
    ) -> Result<SetDone, OpError> {
        let driver = &self.inner.driver;
        let done = |old: &str, new: &str| SetDone {
            key: key.to_string(),
            old: old.to_string(),
            new: new.to_string(),
        };
        match key {
            "write-policy" => self.set_write_policy(value, progress),
            "admission" => {
                let new = ADMISSIONS.find(value).map_err(ChangeError::from)?.name;
                let old = driver.change_engine(|e| e.set_admission(new))?;
                Ok(done(old, new))
            }
            "destage-order" | "order" => {
                let new = DESTAGE_ORDERS.find(value).map_err(ChangeError::from)?.name;
                let old = driver.change_engine(|e| e.set_destage_order(new))?;
                Ok(done(old, new))
            }
            "destage-rate" | "rate" => {
                let new = DESTAGE_RATES.find(value).map_err(ChangeError::from)?.name;
                let old = driver.change_engine(|e| e.set_destage_rate(new))?;
                Ok(done(old, new))
            }
            _ => self.set_tunable(key, value),
        }
    }

    /// `set` of a tunable: parsed as its `wcache serve` option is, checked
    /// as at start (`Engine::retune`), then in force at once.
    fn set_tunable(&self, key: &str, value: &str) -> Result<SetDone, OpError> {
        let edit = tunable_edit(key, value)?;
        let (before, after) = self.inner.driver.retune(edit)?;
        let (old, new) = (tunable_text(&before, key), tunable_text(&after, key));
        Ok(SetDone {
            key: key.to_string(),
            old,
            new,
        })
    }

    /// Sets or clears the criticality hint of `issuer` (the paper's hint;
    /// it lasts until cleared or the server stops).
    pub fn set_critical_issuer(
        &self,
        issuer: u32,
        critical: bool,
    ) -> Result<CriticalIssuerDone, OpError> {
        let driver = &self.inner.driver;
        let was = driver.change_engine(|e| e.set_critical_issuer(issuer, critical))?;
        Ok(CriticalIssuerDone {
            issuer,
            critical,
            was,
            admission: driver.policy_names()[1].to_string(),
        })
    }

    /// Commit the open transaction (journaled write-back): the backing
    /// alone will pass through the state of every write answered before now.
    pub fn consistency_point(&self) -> Result<ConsistencyPointDone, OpError> {
        let journal_commits = self.inner.driver.consistency_point()?;
        Ok(ConsistencyPointDone { journal_commits })
    }

    fn set_write_policy(
        &self,
        value: &str,
        progress: &mut dyn FnMut(&FlushProgress) -> bool,
    ) -> Result<SetDone, OpError> {
        let kind = WritePolicyKind::from_name(value).map_err(ChangeError::from)?;
        if kind == WritePolicyKind::WriteBack && !self.inner.write_back_allowed {
            return Err(OpError::VolatileWriteBack);
        }
        let driver = &self.inner.driver;
        let mut dirty_pages = 0;
        for _ in 0..LEAVE_WRITE_BACK_TRIES_MAX {
            match driver.change_engine(|e| e.set_write_policy(kind)) {
                Ok(old) => {
                    return Ok(SetDone {
                        key: "write-policy".into(),
                        old: old.name().into(),
                        new: kind.name().into(),
                    })
                }
                Err(ChangeError::NotDrained { dirty_pages: d, .. }) => dirty_pages = d,
                Err(e) => return Err(e.into()),
            }
            self.flush(Duration::from_secs(60), progress)?;
        }
        Err(OpError::NotQuiet {
            to: kind.name(),
            dirty_pages,
            tries: LEAVE_WRITE_BACK_TRIES_MAX,
        })
    }
}

/// A change to the engine's configuration (`Engine::retune`).
type ConfigEdit = Box<dyn FnOnce(&mut wcache_core::EngineConfig)>;

/// The change `set KEY VALUE` makes, the value parsed as its `wcache
/// serve` option parses it.
fn tunable_edit(key: &str, value: &str) -> Result<ConfigEdit, OpError> {
    let bad = |expected| OpError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        expected,
    };
    let text = value.trim();
    let pct = || {
        let n: f64 = text
            .trim_end_matches('%')
            .trim()
            .parse()
            .map_err(|_| bad("a percentage, e.g. 80"))?;
        Ok::<f64, OpError>(n)
    };
    let count = || {
        text.parse::<u32>()
            .map_err(|_| bad("a whole number, e.g. 20"))
    };
    let size =
        || crate::device::parse_size_bytes(text).ok_or_else(|| bad("a size, e.g. 0, 1M, 4M"));
    let ns = || {
        humantime::parse_duration(text)
            .ok()
            .and_then(|d| u64::try_from(d.as_nanos()).ok())
            .ok_or_else(|| bad("a duration, e.g. 0, 500ms, 30s"))
    };
    Ok(match key {
        "low-threshold" => {
            let v = pct()?;
            Box::new(move |c| c.rate.low_threshold_pct = v)
        }
        "high-threshold" => {
            let v = pct()?;
            Box::new(move |c| c.rate.high_threshold_pct = v)
        }
        "destages-max" => {
            let v = count()?;
            Box::new(move |c| c.rate.destages_max = v)
        }
        "sequential-cutoff" => {
            let v = size()?;
            Box::new(move |c| c.sequential_cutoff_bytes = v)
        }
        "max-dirty-age" => {
            let v = ns()?;
            Box::new(move |c| c.staleness.max_dirty_age_ns = v)
        }
        "idle-after" => {
            let v = ns()?;
            Box::new(move |c| c.staleness.idle_after_ns = v)
        }
        "idle-destages" => {
            let v = count()?;
            Box::new(move |c| c.staleness.idle_destages = v)
        }
        _ => {
            return Err(OpError::UnknownKey {
                key: key.to_string(),
            })
        }
    })
}

/// A tunable's value in `config`, as `set` shows it.
fn tunable_text(c: &wcache_core::EngineConfig, key: &str) -> String {
    let age = |ns: u64| humantime::format_duration(Duration::from_nanos(ns)).to_string();
    match key {
        "low-threshold" => format!("{}%", c.rate.low_threshold_pct),
        "high-threshold" => format!("{}%", c.rate.high_threshold_pct),
        "destages-max" => c.rate.destages_max.to_string(),
        "sequential-cutoff" => c.sequential_cutoff_bytes.to_string(),
        "max-dirty-age" => age(c.staleness.max_dirty_age_ns),
        "idle-after" => age(c.staleness.idle_after_ns),
        "idle-destages" => c.staleness.idle_destages.to_string(),
        _ => String::new(),
    }
}
