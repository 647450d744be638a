//! `wcache status`, `stats`, `set` and the online half of `flush`: the
//! verbs that operate a running server through its control socket
//! (`wcache_io::ops`; protocol in `docs/operations.md`). It exists to turn
//! the socket's answers into what an operator reads; when no server holds
//! the socket, `status` falls back to reading the cache device as
//! `inspect` does and `flush` to the offline drain. Wiring and output only.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use wcache_io::ops::client::{ClientError, ControlClient};
use wcache_io::ops::protocol::Request;
use wcache_io::ops::snapshot::{interval_quantile_us, kind_buckets};
use wcache_io::ops::{ConsistencyPointDone, FlushProgress, SetDone, Snapshot, Status};

use crate::limits;
use crate::tools::AnyError;

/// Where the control socket of a running server is.
#[derive(Args, Debug, Clone)]
pub struct ControlArgs {
    /// The server's control socket (default: DATA_DIR/wcache.ctl, or beside
    /// --cache when that is given; `wcache serve` prints it).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// The server's data directory.
    #[arg(long, default_value = "wcache-data")]
    pub data_dir: PathBuf,
}

impl ControlArgs {
    pub fn path(&self, cache: Option<&Path>) -> PathBuf {
        if let Some(path) = &self.control {
            return path.clone();
        }
        match cache.and_then(Path::parent) {
            Some(dir) => dir.join("wcache.ctl"),
            None => self.data_dir.join("wcache.ctl"),
        }
    }
}

/// A running server's state; with no server, what its cache device holds.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// With no server running: the cache device to read instead (default DATA_DIR/cache.img).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Print the server's answer as JSON.
    #[arg(long)]
    json: bool,
}

/// A running server's statistics.
#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// Print the whole snapshot as JSON (one line per snapshot).
    #[arg(long)]
    json: bool,
    /// Print a line of rates every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS", value_parser = limits::watch_s)]
    watch: Option<f64>,
}

/// Change a policy of a running server: write-policy, admission,
/// destage-order, destage-rate.
#[derive(Args, Debug)]
pub struct SetArgs {
    #[command(flatten)]
    control: ControlArgs,
    key: String,
    value: String,
}

/// Declare an application consistency point to a running server whose
/// write policy is write-back-journaled: the open transaction commits, so
/// the backing alone will hold this state (docs/consistency.md).
#[derive(Args, Debug)]
pub struct ConsistencyPointArgs {
    #[command(flatten)]
    control: ControlArgs,
}

/// Make processes critical (or not) for a running `wcache mount`'s
/// request-oriented admission: by process, command name, cgroup, or the
/// real-time I/O class (docs/mount.md).
#[derive(Args, Debug)]
#[group(required = true, multiple = false, id = "which")]
pub struct CriticalArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// A process (it must exist).
    #[arg(long, group = "which")]
    pid: Option<u32>,
    /// A command name (`*` at the end matches a prefix).
    #[arg(long, group = "which")]
    command: Option<String>,
    /// A cgroup (v2 path; it must exist), its subtree too.
    #[arg(long, group = "which")]
    cgroup: Option<String>,
    /// Processes in the real-time I/O class (`ionice -c1`).
    #[arg(long, group = "which")]
    realtime_io: bool,
    /// Automatic identification (processes serving clients that fsync);
    /// the answer lists the processes it found so far.
    #[arg(long, group = "which")]
    auto: bool,
    /// Remove the rule instead.
    #[arg(long)]
    clear: bool,
}

pub fn critical(args: CriticalArgs) -> Result<(), AnyError> {
    let (key, value) = match (&args.pid, &args.command, &args.cgroup) {
        (Some(pid), _, _) => ("pid", pid.to_string()),
        (_, Some(name), _) => ("command", name.clone()),
        (_, _, Some(path)) => ("cgroup", path.clone()),
        _ if args.auto => ("auto", String::new()),
        _ => ("realtime-io", String::new()),
    };
    let mut request = Request::new("critical-caller");
    request.key = Some(key.to_string());
    request.value = Some(value.clone());
    request.critical = Some(!args.clear);
    let mut client = connect(&args.control.path(None))?;
    let rules = client.call(&request, &mut |_| {})?;
    println!(
        "wcache critical: {key} {value}: {}; rules now: {rules}",
        if args.clear { "cleared" } else { "critical" }
    );
    Ok(())
}

pub fn consistency_point(args: ConsistencyPointArgs) -> Result<(), AnyError> {
    let mut client = connect(&args.control.path(None))?;
    let answer = client.call(&Request::new("consistency-point"), &mut |_| {});
    let done: ConsistencyPointDone = parse(answer?)?;
    println!(
        "wcache consistency-point: committed ({} transactions committed so far)",
        done.journal_commits
    );
    Ok(())
}

pub(crate) fn connect(path: &Path) -> Result<ControlClient, AnyError> {
    ControlClient::connect(path).map_err(|e| match e {
        ClientError::NoServer { .. } => {
            format!("{e} (is `wcache serve` running? give its control socket with --control)")
                .into()
        }
        other => other.into(),
    })
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, AnyError> {
    Ok(serde_json::from_value(value).map_err(|e| format!("unexpected answer: {e}"))?)
}

pub fn status(args: StatusArgs) -> Result<(), AnyError> {
    let path = args.control.path(args.cache.as_deref());
    let mut client = match ControlClient::connect(&path) {
        Ok(client) => client,
        Err(ClientError::NoServer { .. }) => {
            let cache = args
                .cache
                .unwrap_or_else(|| args.control.data_dir.join("cache.img"));
            println!("no server at {}: reading the cache device", path.display());
            return crate::inspect::inspect_path(&cache);
        }
        Err(e) => return Err(e.into()),
    };
    let answer = client.call(&Request::new("status"), &mut |_| {})?;
    if args.json {
        println!("{answer}");
        return Ok(());
    }
    let s: Status = parse(answer)?;
    let mib = |pages: u64| (pages * s.page_size_bytes) >> 20;
    println!(
        "state:     {} (pid {}, up {:.0} s)",
        s.state, s.pid, s.uptime_s
    );
    println!(
        "policies:  write {}, admission {}, destage order {}, destage rate {}",
        s.write_policy, s.admission, s.destage_order, s.destage_rate
    );
    println!(
        "cache:     {} ({} pages of {} bytes)",
        s.cache_device, s.capacity_pages, s.page_size_bytes
    );
    println!(
        "occupancy: {:.1} % of slots used; {} dirty pages ({} MiB, {:.1} %), {} clean",
        s.occupancy_ratio * 100.0,
        s.dirty_pages,
        mib(s.dirty_pages),
        s.dirty_ratio * 100.0,
        s.clean_pages
    );
    println!(
        "staleness: the backing lags the acknowledged writes by at most {:.1} s ({} MiB dirty)",
        s.dirty_age_ms as f64 / 1000.0,
        mib(s.dirty_pages)
    );
    println!(
        "in flight: {} requests, {} destages",
        s.requests_in_flight, s.destages_in_flight
    );
    print_exports_and_clients(&s);
    Ok(())
}

/// Each export (its backing, dirty pages, hit ratios) and each client, for `status`.
fn print_exports_and_clients(s: &Status) {
    for e in &s.exports {
        println!(
            "export {}: {} ({} MiB); {} dirty pages; since start: {} pages destaged, page hits reads {:.1} %, writes {:.1} %",
            e.name,
            e.backing,
            e.size_bytes >> 20,
            e.dirty_pages,
            e.destaged_pages,
            100.0 * e.read_hit_ratio,
            100.0 * e.write_hit_ratio
        );
        if let Some(health) = &e.backing_health {
            println!("  backing: {health}");
        }
    }
    println!("clients: {}", s.clients.len());
    for c in &s.clients {
        println!(
            "  {} on export {}, connected {:.0} s",
            c.peer, c.export, c.connected_s
        );
    }
    if let Some(r) = &s.replication {
        print_replication(r);
    }
}

fn print_replication(r: &wcache_io::replica::ReplicationStatus) {
    println!(
        "replication: {} to {} (cache {}, epoch {}); {} MiB the peer may lack; {} links lost, {} MiB resynced",
        r.state,
        r.peer,
        r.cache_id,
        r.epoch,
        r.unprotected_bytes.div_ceil(1 << 20),
        r.links_lost,
        r.resynced_bytes >> 20
    );
    if let (Some(away), Some(why)) = (r.away_s, &r.last_error) {
        println!("  away for {away:.1} s: {why}");
    }
}

pub fn stats(args: StatsArgs) -> Result<(), AnyError> {
    let mut client = connect(&args.control.path(None))?;
    let mut take = || -> Result<(Value, Instant), AnyError> {
        Ok((
            client.call(&Request::new("stats"), &mut |_| {})?,
            Instant::now(),
        ))
    };
    let Some(every) = args.watch else {
        let (answer, _) = take()?;
        if args.json {
            println!("{answer}");
        } else {
            print_stats(&parse(answer)?);
        }
        return Ok(());
    };
    let every = Duration::from_secs_f64(every);
    let (first, mut then) = take()?;
    let mut last: Snapshot = parse(first)?;
    if !args.json {
        println!("{}", WATCH_HEADER);
    }
    loop {
        std::thread::sleep(every);
        let (answer, now) = take()?;
        if args.json {
            println!("{answer}");
            continue;
        }
        let snap: Snapshot = parse(answer)?;
        println!("{}", watch_line(&last, &snap, (now - then).as_secs_f64()));
        (last, then) = (snap, now);
    }
}

/// Every column is of the interval but `dirty` (now) and `errors` (since start).
const WATCH_HEADER: &str =
    "   read/s   write/s  wpages/s  destaged/s    dirty  stalls/s  write p99 us  read p99 us  errors";

/// One line of rates between two snapshots `seconds` apart.
fn watch_line(a: &Snapshot, b: &Snapshot, seconds: f64) -> String {
    let seconds = seconds.max(1e-9);
    let rate = |name: &str| {
        let now = b.engine_value(name).unwrap_or(0);
        now.saturating_sub(a.engine_value(name).unwrap_or(0)) as f64 / seconds
    };
    let per_s =
        |kind: &str| b.request_count(kind).saturating_sub(a.request_count(kind)) as f64 / seconds;
    // Of this interval's requests, from the histogram's buckets.
    let p99 = |kind: &str| {
        let q = interval_quantile_us(&kind_buckets(a, kind), &kind_buckets(b, kind), 0.99);
        q.map_or("-".to_string(), |us| format!("{us:.0}"))
    };
    format!(
        "{:9.0} {:9.0} {:9.0} {:11.0} {:8} {:9.0} {:13} {:12} {:7}",
        per_s("read"),
        per_s("write"),
        rate("write_pages"),
        rate("destaged_pages"),
        b.engine_value("dirty_pages").unwrap_or(0),
        rate("stalls"),
        p99("write"),
        p99("read"),
        b.driver.cache_errors + b.driver.backing_errors
    )
}

fn print_stats(s: &Snapshot) {
    let v = |name: &str| s.engine_value(name).unwrap_or(0);
    let ratio = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    println!("uptime {:.0} s", s.uptime_s);
    println!("requests   export  kind          count  errors   p50 us   p90 us   p99 us   max us");
    for r in s.requests.iter().filter(|r| r.count > 0) {
        println!(
            "         {:>8}  {:<12} {:>6}  {:>6} {:>8} {:>8} {:>8} {:>8}",
            r.export, r.kind, r.count, r.errors, r.p50_us, r.p90_us, r.p99_us, r.max_us
        );
    }
    println!(
        "reads      {} ({} hits, {:.1} %); pages {} ({:.1} % hits)",
        v("reads"),
        v("read_hits"),
        ratio(v("read_hits"), v("reads")),
        v("read_pages"),
        ratio(v("read_page_hits"), v("read_pages"))
    );
    println!(
        "writes     {} ({} pages, {:.1} % page hits), {} bypassed ({} reissued), {} stalled ({} ms)",
        v("writes"),
        v("write_pages"),
        ratio(v("write_page_hits"), v("write_pages")),
        v("write_bypasses"),
        v("reissued_writes"),
        v("stalls"),
        v("stall_ns_total") / 1_000_000
    );
    println!(
        "destages   {} of {} pages, {} errors; {} dirty pages now, {} in flight",
        v("destages"),
        v("destaged_pages"),
        v("destage_errors"),
        v("dirty_pages"),
        v("destages_in_flight")
    );
    println!(
        "devices    {} cache flushes, {} backing flushes, {} cache errors, {} backing errors{}",
        s.driver.cache_flushes,
        s.driver.backing_flushes,
        s.driver.cache_errors,
        s.driver.backing_errors,
        s.driver
            .last_error
            .as_deref()
            .map(|e| format!(" (last: {e})"))
            .unwrap_or_default()
    );
    if let Some(held) = s.front_value("mount_held_bytes") {
        let f = |name: &str| s.front_value(name).unwrap_or(0);
        println!(
            "held      {} MiB of write(2)s (limit {} MiB); {} writers waited for room ({} ms)",
            held >> 20,
            f("mount_held_limit_bytes") >> 20,
            f("mount_throttled_writes"),
            f("mount_throttle_ns_total") / 1_000_000
        );
    }
    println!("(every counter: wcache stats --json)");
}

pub fn set(args: SetArgs) -> Result<(), AnyError> {
    let mut client = connect(&args.control.path(None))?;
    let mut request = Request::new("set");
    request.key = Some(args.key);
    request.value = Some(args.value);
    let mut bar: Option<ProgressBar> = None;
    let answer = client.call(&request, &mut |p| {
        if let Ok(p) = serde_json::from_value::<FlushProgress>(p.clone()) {
            show_progress(
                bar.get_or_insert_with(|| {
                    println!("wcache set: draining first");
                    progress_bar(p.dirty_pages_start)
                }),
                &p,
            );
        }
    });
    if let Some(bar) = bar {
        bar.finish();
    }
    let done: SetDone = parse(answer?)?;
    println!("wcache set: {} {} -> {}", done.key, done.old, done.new);
    Ok(())
}

/// `wcache flush` when a server holds the cache: drain online.
pub fn flush_online(
    client: &mut ControlClient,
    export: Option<String>,
    stall_timeout_s: u64,
) -> Result<(), AnyError> {
    let mut request = Request::new("flush");
    request.export = export;
    request.stall_timeout_s = Some(stall_timeout_s);
    let done: FlushProgress = parse(call_with_progress(client, &request)?)?;
    println!(
        "wcache flush: online drain done: {} pages destaged in {:.1} s while serving; no page is dirty",
        done.destaged_pages, done.elapsed_s
    );
    Ok(())
}

/// Sends `request` (a drain: `flush`, `stop --flush`), showing its
/// progress lines on a bar; its final answer.
pub(crate) fn call_with_progress(
    client: &mut ControlClient,
    request: &Request,
) -> Result<Value, AnyError> {
    let mut bar: Option<ProgressBar> = None;
    let answer = client.call(request, &mut |p| {
        if let Ok(p) = serde_json::from_value::<FlushProgress>(p.clone()) {
            show_progress(
                bar.get_or_insert_with(|| progress_bar(p.dirty_pages_start)),
                &p,
            );
        }
    });
    match (answer, bar) {
        (Ok(done), bar) => {
            if let Some(bar) = bar {
                bar.finish();
            }
            Ok(done)
        }
        (Err(e), Some(bar)) => {
            bar.abandon();
            Err(e.into())
        }
        (Err(e), None) => Err(e.into()),
    }
}

fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{bar:40} {pos}/{len} pages  {msg}  elapsed {elapsed_precise}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}

fn show_progress(bar: &ProgressBar, p: &FlushProgress) {
    let len = bar.length().unwrap_or(0).max(p.dirty_pages);
    bar.set_length(len);
    bar.set_position(len - p.dirty_pages);
    let eta = p
        .eta_s
        .map(|s| {
            format!(
                "ETA {:02}:{:02}:{:02}",
                s as u64 / 3600,
                s as u64 / 60 % 60,
                s as u64 % 60
            )
        })
        .unwrap_or_else(|| "ETA ?".into());
    bar.set_message(format!("{:.0} pages/s  {eta}", p.rate_pages_per_s));
}
