//! The options of the cache every front end has (`wcache serve`, `wcache
//! mount`): the cache device, its write, destage and admission policies,
//! the driver, the stop and the operator's endpoints. Declarations only, as
//! `serve::args`; `serve::settings` makes a `CacheConfig` of them.

use std::path::PathBuf;

use clap::Args;

use crate::limits;

/// The cache device and its policies.
#[derive(Args, Debug, Clone)]
pub struct CacheArgs {
    /// Control socket for `wcache status`, `stats`, `flush`, `set`
    /// (owner-only; default: the NBD socket's path with extension .ctl,
    /// DATA_DIR/wcache.ctl for the default socket or with --listen only).
    #[arg(long)]
    pub(crate) control: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9187
    /// (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics: Option<String>,
    /// Cache device: a file or block device (created sparse with --cache-size
    /// if missing), or `mem` (process memory). Default: DATA_DIR/cache.img.
    #[arg(long)]
    pub(crate) cache: Option<String>,
    /// Size of a cache file created because it does not exist (default
    /// 1G). An existing cache keeps its size: one of another size given
    /// here is refused (a cache is not resized).
    #[arg(long)]
    pub(crate) cache_size: Option<String>,
    /// How cache writes become durable: fdatasync, dsync (RWF_DSYNC per
    /// write), nvram (no syncs; for pmem or tmpfs standing in for NV-DRAM),
    /// or auto (measured at start on the device: RWF_DSYNC on O_DIRECT or
    /// fdatasync, whichever makes one 64 KiB write durable sooner; printed;
    /// fdatasync under --persist-on-flush. Not the default: one write's
    /// latency does not foresee format 2's group commit, and O_DIRECT takes
    /// cached reads out of the page cache, docs/io.md).
    #[arg(long, default_value = "fdatasync")]
    pub(crate) cache_sync: String,
    /// Open the cache device with O_DIRECT.
    #[arg(long)]
    pub(crate) direct: bool,
    /// Format of a new cache device: 3 (the default), a log of
    /// self-describing batches (one device write per batch of writes:
    /// docs/format-v3.md), or 2 (records beside the pages). An existing
    /// cache keeps its format; asking a cache of the other format is
    /// refused unless --force (which formats it anew: drain it first).
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=3))]
    pub(crate) cache_format: Option<u32>,
    /// Persist-on-flush (the NBD minimum): a write without FUA is
    /// acknowledged once written to the cache device, before the device
    /// flush; FLUSH and FUA make it durable. A crash of this process loses
    /// nothing acknowledged; a power loss may lose writes not yet flushed.
    /// Default: persist-on-write (every acknowledged write is durable).
    #[arg(long)]
    pub(crate) persist_on_flush: bool,
    /// With --persist-on-flush: flush the cache device every this many
    /// seconds while writes arrive, so that an acknowledged write is durable
    /// within about this long even without FLUSH or FUA (0.001 to 3600);
    /// 0: only at FLUSH and FUA.
    #[arg(long, default_value_t = 1.0, value_parser = limits::flush_interval)]
    pub(crate) flush_interval: f64,
    /// write-back (default with a cache file or device: acknowledged once
    /// data and record are durable on the cache; recovered after a crash),
    /// write-back-ordered (wb-o) or write-back-journaled (wb-j: the backing
    /// alone always consistent), write-through (default with --cache mem),
    /// or write-around.
    #[arg(long)]
    pub(crate) write_policy: Option<String>,
    /// Start even over a cache device holding dirty pages of another
    /// configuration (other exports, sizes, backings or page size) or an
    /// unreadable superblock: those pages are DISCARDED (the message says which).
    #[arg(long)]
    pub(crate) force: bool,
    /// Destage order: lrw, cscan, wow.
    #[arg(long, default_value = "wow")]
    pub(crate) order: String,
    /// Destage rate: linear, adaptive.
    #[arg(long, default_value = "adaptive")]
    pub(crate) rate: String,
    /// Below this occupancy (percent of the cache, of the host journal
    /// under write-back-journaled) destaging rests (WOW's low threshold).
    #[arg(long, default_value_t = 80.0)]
    pub(crate) low_threshold: f64,
    /// At or above this occupancy destaging runs at full rate (the
    /// adaptive rate moves it down from here as the backing keeps up).
    #[arg(long, default_value_t = 90.0)]
    pub(crate) high_threshold: f64,
    /// Most destages outstanding at once (the destage concurrency; 1 to 65536).
    #[arg(long, default_value_t = 20, value_parser = limits::destages)]
    pub(crate) destages_max: u32,
    /// Admission: all (every write enters the cache), sync (FUA writes
    /// only: NBD writes name no issuer), volume (writes to --critical
    /// exports), cp, cp-pi, cp-pi-ioi (docs/experiments/admission.md).
    #[arg(long, default_value = "all")]
    pub(crate) admission: String,
    /// Writes continuing a sequential stream of this many bytes go around
    /// the cache to the backing (e.g. 4M; 0: no cutoff).
    #[arg(long, default_value = "0")]
    pub(crate) sequential_cutoff: String,
    /// Maximum dirty age: a page dirty this long is destaged whatever the
    /// destage thresholds say, so the backing lags the acknowledged writes
    /// by at most this plus the time to destage (e.g. 30s, 500ms; 0: no bound).
    #[arg(long, default_value = "30s")]
    pub(crate) max_dirty_age: String,
    /// With no request for this long the cache is idle...
    #[arg(long, default_value = "1s")]
    pub(crate) idle_after: String,
    /// ...and keeps this many destages outstanding until a request comes
    /// (0: dirty pages wait for the thresholds or their maximum age).
    #[arg(long, default_value_t = 4)]
    pub(crate) idle_destages: u32,
    /// write-back-journaled: the host journal, most page versions not yet
    /// checkpointed (writes wait beyond it); each backing has a journal of
    /// the same size (plus its header and entry table), where --journal says (e.g. 64M).
    #[arg(long, default_value = "64M")]
    pub(crate) journal_size: String,
    /// write-back-journaled: the open transaction commits at this size
    /// (0: an eighth of the journal)...
    #[arg(long, default_value = "0")]
    pub(crate) commit_size: String,
    /// ...or this long after its first write (0: no age).
    #[arg(long, default_value = "1s")]
    pub(crate) commit_age: String,
    /// write-back-journaled: commit by size (and age), or only at
    /// consistency points: flush (every NBD FLUSH, and hints) or hint
    /// (`wcache consistency-point` only). Then the backing alone always
    /// holds the state of one declared point.
    #[arg(long, default_value = "size")]
    pub(crate) consistency_points: String,
    #[arg(long, default_value_t = 4096)]
    pub(crate) page_size: u64,
    /// Write group (destage unit) in bytes (wcache mount: 1 MiB unless
    /// given).
    #[arg(long, default_value_t = 64 * 1024)]
    pub(crate) group_size: u64,
    /// Driver I/O threads (destages, extra commands of large requests; 1 to 1024).
    #[arg(long, default_value_t = 4, value_parser = limits::threads)]
    pub(crate) io_threads: usize,
    /// Write pages with the threads even where io_uring is available (the
    /// event-driven data path is chosen at start when the cache is a file
    /// or block device in `fdatasync` or `dsync` mode and the kernel
    /// allows it; the start lines say which).
    #[arg(long)]
    pub(crate) no_io_uring: bool,
    /// Grace period of a stop, in seconds: on SIGTERM or SIGINT in-flight
    /// requests may finish for this long; then writes still waiting for room
    /// are answered with an error (none was acknowledged), the clean
    /// shutdown is recorded (dirty pages stay in the cache) and the process
    /// exits, about 1 s later at most: requests still waiting on a backing
    /// that does not answer get no reply (their connections close). A second
    /// signal ends the grace period at once.
    #[arg(long, default_value_t = 10.0, value_parser = limits::stop_timeout)]
    pub(crate) stop_timeout: f64,
}
