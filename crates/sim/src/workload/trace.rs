//! Block-trace replay: MSR Cambridge CSV, blkparse text, libCacheSim block CSV
//! and SNIA/Tencent CBS, streamed line by line so that traces of any length
//! replay in constant memory.
//!
//! A first pass over the file validates every line, maps volumes to dense ids
//! and sizes them; the second pass replays. A malformed line therefore fails
//! at build time with its line number, field and problem, never mid-run, and
//! never with a panic. Replay never allocates per request.

use rustc_hash::FxHashMap as HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;

use wcache_core::time::Nanos;

use super::gate::{Gate, Pacing};
use super::{
    IoRequest, ReqKind, Stop, Workload, WorkloadError, WorkloadStats, OUTSTANDING_MAX_DEFAULT,
};

const SECTOR_BYTES: u64 = 512;
/// Volume sizes are the largest extent seen, rounded up to this.
pub const VOLUME_ROUND_BYTES: u64 = 1 << 20;
const NS_PER_SEC: u64 = 1_000_000_000;
const NS_PER_US: u64 = 1_000;
/// Windows filetime tick.
const NS_PER_FILETIME_TICK: u64 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
    Msr,
    /// blkparse default text output.
    Blkparse,
    /// `version,time,op,size,lbn`.
    LibCacheSim,
    /// `Timestamp,Offset,Size,IOType,VolumeID`.
    TencentCbs,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 4] = [
        TraceFormat::Msr,
        TraceFormat::Blkparse,
        TraceFormat::LibCacheSim,
        TraceFormat::TencentCbs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Msr => "msr",
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::LibCacheSim => "libcachesim",
            TraceFormat::TencentCbs => "tencent",
        }
    }

    /// Accepts the names above and a few aliases, case-insensitively.
    pub fn from_name(name: &str) -> Result<TraceFormat, TraceError> {
        let lower = name.trim().to_ascii_lowercase();
        let format = match lower.as_str() {
            "msr" | "msr-cambridge" => TraceFormat::Msr,
            "blkparse" | "blktrace" => TraceFormat::Blkparse,
            "libcachesim" | "lcs" | "libcachesim-csv" => TraceFormat::LibCacheSim,
            "tencent" | "tencent-cbs" | "cbs" | "snia-cbs" => TraceFormat::TencentCbs,
            _ => {
                let valid: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.name()).collect();
                return Err(TraceError::UnknownFormat {
                    name: name.to_string(),
                    valid: valid.join(", "),
                });
            }
        };
        Ok(format)
    }
}

/// Which blkparse action is a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BlkparseAction {
    /// `Q`: queued, the moment the issuer asked (default).
    #[default]
    Queue,
    /// `C`: completed; pid is then whoever ran at completion, often not the issuer.
    Complete,
}

/// What a malformed line does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MalformedPolicy {
    /// Building the workload fails with the first malformed line (default).
    #[default]
    Abort,
    /// Malformed lines are skipped and counted in `lines_malformed_skipped`.
    Skip,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Replay {
    /// Arrival at the recorded time (relative to the first record) divided by
    /// `speed`; past `outstanding_max` in flight arrivals are held back.
    AsRecorded { speed: f64, outstanding_max: u64 },
    /// As fast as possible with `outstanding` in flight.
    Closed { outstanding: u64 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct TraceConfig {
    pub path: PathBuf,
    pub format: TraceFormat,
    pub replay: Replay,
    pub blkparse_action: BlkparseAction,
    /// Tencent CBS: the IOType value meaning write; the other of 0/1 means read.
    pub cbs_write_io_type: u8,
    pub on_malformed: MalformedPolicy,
    pub stop: Stop,
}

impl TraceConfig {
    /// Replay as recorded at speed 1, abort on malformed lines, blkparse `Q`,
    /// CBS IOType 1 = write.
    pub fn new(path: impl Into<PathBuf>, format: TraceFormat) -> TraceConfig {
        TraceConfig {
            path: path.into(),
            format,
            replay: Replay::AsRecorded {
                speed: 1.0,
                outstanding_max: OUTSTANDING_MAX_DEFAULT,
            },
            blkparse_action: BlkparseAction::Queue,
            cbs_write_io_type: 1,
            on_malformed: MalformedPolicy::Abort,
            stop: Stop::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path}:{line}: field `{field}`: {problem}")]
    Malformed {
        path: String,
        line: u64,
        field: &'static str,
        problem: String,
    },
    #[error("unknown trace format `{name}`; valid formats: {valid}")]
    UnknownFormat { name: String, valid: String },
    #[error("{path}: no read or write request in the trace")]
    Empty { path: String },
    #[error("invalid trace option: {0}")]
    InvalidOption(String),
}

/// One problem in one field of a line.
#[derive(Debug)]
struct FieldError {
    field: &'static str,
    problem: String,
}

type FieldResult<T> = Result<T, FieldError>;

fn field_error(field: &'static str, problem: impl Into<String>) -> FieldError {
    FieldError {
        field,
        problem: problem.into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    /// In the trace's own time base, converted to nanoseconds.
    time_ns: u64,
    volume_key: u64,
    kind: ReqKind,
    offset_bytes: u64,
    len_bytes: u64,
    sync: bool,
    issuer: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parsed {
    Record(Record),
    /// Empty or whitespace only; not counted.
    Blank,
    /// Well formed, but not a data read or write (header, comment, other action, ...).
    Ignored,
    ZeroLength,
}

/// The comma-separated fields of a line, as `str::split(',')` gives them;
/// a byte loop, which is quicker than the general splitter on short fields.
struct CommaFields<'a> {
    rest: Option<&'a str>,
}

impl<'a> Iterator for CommaFields<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        match rest.bytes().position(|b| b == b',') {
            Some(i) => {
                // ',' is ASCII, so both sides are on character boundaries.
                self.rest = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

fn comma_fields(line: &str) -> CommaFields<'_> {
    CommaFields { rest: Some(line) }
}

fn next_field<'a>(
    fields: &mut impl Iterator<Item = &'a str>,
    name: &'static str,
) -> FieldResult<&'a str> {
    match fields.next() {
        Some(f) => Ok(trim(f)),
        None => Err(field_error(name, "missing")),
    }
}

/// `str::trim`, with a shortcut for the usual field that starts and ends
/// with a visible ASCII character.
fn trim(f: &str) -> &str {
    let visible = |b: u8| b > b' ' && b < 0x7f;
    match (f.as_bytes().first(), f.as_bytes().last()) {
        (Some(&a), Some(&z)) if visible(a) && visible(z) => f,
        _ => f.trim(),
    }
}

/// A run of 1 to 19 ASCII digits (always within u64); `None` for anything
/// else, which the caller hands to the general parser.
fn digits_u64(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + d as u64;
    }
    Some(v)
}

fn parse_u64(s: &str, name: &'static str) -> FieldResult<u64> {
    if let Some(v) = digits_u64(s) {
        return Ok(v);
    }
    s.parse::<u64>()
        .map_err(|_| field_error(name, format!("`{s}` is not an unsigned integer")))
}

fn mul_checked(a: u64, b: u64, name: &'static str) -> FieldResult<u64> {
    a.checked_mul(b)
        .ok_or_else(|| field_error(name, format!("{a} x {b} overflows 64 bits")))
}

/// A non-negative decimal number of units (`12`, `12.5`) in nanoseconds,
/// exactly (no floating point); digits beyond 18 decimals are ignored.
fn parse_decimal_ns(s: &str, unit_ns: u64, name: &'static str) -> FieldResult<u64> {
    if let Some(int_value) = digits_u64(s) {
        return mul_checked(int_value, unit_ns, name);
    }
    let bad = || field_error(name, format!("`{s}` is not a non-negative decimal number"));
    let (int_part, frac_part) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad());
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let int_value: u64 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| bad())?
    };
    let mut ns = mul_checked(int_value, unit_ns, name)?;
    let frac_digits = &frac_part[..frac_part.len().min(18)];
    if !frac_digits.is_empty() {
        let numerator: u128 = frac_digits.parse().map_err(|_| bad())?;
        let denominator = 10u128.pow(frac_digits.len() as u32);
        let frac_ns = numerator * unit_ns as u128 / denominator;
        ns = ns
            .checked_add(frac_ns as u64)
            .ok_or_else(|| field_error(name, "time overflows 64-bit nanoseconds"))?;
    }
    Ok(ns)
}

/// Parses lines of one format. Stateless except for header detection.
#[derive(Clone, Debug)]
struct LineParser {
    format: TraceFormat,
    blkparse_action: BlkparseAction,
    cbs_write_io_type: u8,
    seen_content: bool,
}

impl LineParser {
    fn new(config: &TraceConfig) -> LineParser {
        LineParser {
            format: config.format,
            blkparse_action: config.blkparse_action,
            cbs_write_io_type: config.cbs_write_io_type,
            seen_content: false,
        }
    }

    fn parse(&mut self, line: &str) -> FieldResult<Parsed> {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return Ok(Parsed::Blank);
        }
        if trimmed.starts_with('#') {
            return Ok(Parsed::Ignored);
        }
        let first_content = !self.seen_content;
        self.seen_content = true;
        // A CSV header is the first line with content when it starts with a letter.
        let header = first_content
            && self.format != TraceFormat::Blkparse
            && trimmed.as_bytes()[0].is_ascii_alphabetic();
        if header {
            return Ok(Parsed::Ignored);
        }
        match self.format {
            TraceFormat::Msr => parse_msr(trimmed),
            TraceFormat::Blkparse => parse_blkparse(trimmed, self.blkparse_action),
            TraceFormat::LibCacheSim => parse_libcachesim(trimmed),
            TraceFormat::TencentCbs => parse_cbs(trimmed, self.cbs_write_io_type),
        }
    }
}

fn finish(record: Record) -> Parsed {
    if record.len_bytes == 0 {
        Parsed::ZeroLength
    } else {
        Parsed::Record(record)
    }
}

fn check_extent(offset_bytes: u64, len_bytes: u64, name: &'static str) -> FieldResult<()> {
    match offset_bytes.checked_add(len_bytes) {
        Some(_) => Ok(()),
        None => Err(field_error(name, "offset + size overflows 64 bits")),
    }
}

fn parse_msr(line: &str) -> FieldResult<Parsed> {
    let mut fields = comma_fields(line);
    let ticks = parse_u64(next_field(&mut fields, "Timestamp")?, "Timestamp")?;
    let _hostname = next_field(&mut fields, "Hostname")?;
    let disk = parse_u64(next_field(&mut fields, "DiskNumber")?, "DiskNumber")?;
    let kind_text = next_field(&mut fields, "Type")?;
    let kind = if kind_text.eq_ignore_ascii_case("read") {
        ReqKind::Read
    } else if kind_text.eq_ignore_ascii_case("write") {
        ReqKind::Write
    } else {
        return Err(field_error(
            "Type",
            format!("`{kind_text}` is neither Read nor Write"),
        ));
    };
    let offset_bytes = parse_u64(next_field(&mut fields, "Offset")?, "Offset")?;
    let len_bytes = parse_u64(next_field(&mut fields, "Size")?, "Size")?;
    check_extent(offset_bytes, len_bytes, "Size")?;
    Ok(finish(Record {
        time_ns: mul_checked(ticks, NS_PER_FILETIME_TICK, "Timestamp")?,
        volume_key: disk,
        kind,
        offset_bytes,
        len_bytes,
        sync: false,
        issuer: 0,
    }))
}

/// `maj,min` of a blkparse event line, or `None` if this is not an event line.
fn parse_device(s: &str) -> Option<u64> {
    let (maj, min) = s.split_once(',')?;
    let maj: u32 = maj.parse().ok()?;
    let min: u32 = min.parse().ok()?;
    Some(((maj as u64) << 32) | min as u64)
}

fn parse_blkparse(line: &str, action: BlkparseAction) -> FieldResult<Parsed> {
    let mut fields = line.split_ascii_whitespace();
    // Lines not starting with `maj,min` are blkparse's per-CPU and total summaries.
    let Some(device) = fields.next().and_then(parse_device) else {
        return Ok(Parsed::Ignored);
    };
    parse_u64(next_field(&mut fields, "cpu")?, "cpu")?;
    parse_u64(next_field(&mut fields, "sequence")?, "sequence")?;
    let time_ns = parse_decimal_ns(next_field(&mut fields, "time")?, NS_PER_SEC, "time")?;
    let pid = parse_u64(next_field(&mut fields, "pid")?, "pid")?;
    let pid =
        u32::try_from(pid).map_err(|_| field_error("pid", format!("{pid} exceeds 32 bits")))?;
    let action_text = next_field(&mut fields, "action")?;
    let wanted = match action {
        BlkparseAction::Queue => "Q",
        BlkparseAction::Complete => "C",
    };
    if action_text != wanted {
        return Ok(Parsed::Ignored);
    }
    let rwbs = next_field(&mut fields, "RWBS")?;
    if !rwbs.bytes().all(|b| b"RWDBSFMANE".contains(&b)) {
        return Err(field_error("RWBS", format!("`{rwbs}` has unknown flags")));
    }
    let kind = if rwbs.contains('D') {
        return Ok(Parsed::Ignored); // discard carries no data to cache
    } else if rwbs.contains('W') {
        ReqKind::Write
    } else if rwbs.contains('R') {
        ReqKind::Read
    } else {
        return Ok(Parsed::Ignored); // pure flush or no-data request
    };
    let sync = rwbs.contains('S') || rwbs.contains('F');
    let sector_text = match fields.next() {
        // A flush with a write flag but no sector range carries no data.
        None => return Ok(Parsed::ZeroLength),
        Some(s) if s.starts_with('[') => return Ok(Parsed::ZeroLength),
        Some(s) => s,
    };
    let sector = parse_u64(sector_text, "sector")?;
    let plus = next_field(&mut fields, "+")?;
    if plus != "+" {
        return Err(field_error("+", format!("expected `+`, found `{plus}`")));
    }
    let count = parse_u64(next_field(&mut fields, "count")?, "count")?;
    let offset_bytes = mul_checked(sector, SECTOR_BYTES, "sector")?;
    let len_bytes = mul_checked(count, SECTOR_BYTES, "count")?;
    check_extent(offset_bytes, len_bytes, "count")?;
    Ok(finish(Record {
        time_ns,
        volume_key: device,
        kind,
        offset_bytes,
        len_bytes,
        sync,
        issuer: pid,
    }))
}

fn parse_libcachesim(line: &str) -> FieldResult<Parsed> {
    let mut fields = comma_fields(line);
    parse_u64(next_field(&mut fields, "version")?, "version")?;
    let time_ns = parse_decimal_ns(next_field(&mut fields, "time")?, NS_PER_US, "time")?;
    let op_text = next_field(&mut fields, "op")?;
    let hex = op_text
        .strip_prefix("0x")
        .or_else(|| op_text.strip_prefix("0X"))
        .unwrap_or(op_text);
    let op = u8::from_str_radix(hex, 16).map_err(|_| {
        field_error(
            "op",
            format!("`{op_text}` is not a one-byte hex SCSI opcode"),
        )
    })?;
    let size_bytes = parse_u64(next_field(&mut fields, "size")?, "size")?;
    let lbn = parse_u64(next_field(&mut fields, "lbn")?, "lbn")?;
    let kind = match op {
        // READ(6/10/16/12), WRITE(6/10/16/12)
        0x08 | 0x28 | 0x88 | 0xa8 => ReqKind::Read,
        0x0a | 0x2a | 0x8a | 0xaa => ReqKind::Write,
        _ => return Ok(Parsed::Ignored),
    };
    let offset_bytes = mul_checked(lbn, SECTOR_BYTES, "lbn")?;
    check_extent(offset_bytes, size_bytes, "size")?;
    Ok(finish(Record {
        time_ns,
        volume_key: 0,
        kind,
        offset_bytes,
        len_bytes: size_bytes,
        sync: false,
        issuer: 0,
    }))
}

fn parse_cbs(line: &str, write_io_type: u8) -> FieldResult<Parsed> {
    let mut fields = comma_fields(line);
    let time_ns = parse_decimal_ns(
        next_field(&mut fields, "Timestamp")?,
        NS_PER_SEC,
        "Timestamp",
    )?;
    let offset_sectors = parse_u64(next_field(&mut fields, "Offset")?, "Offset")?;
    let size_sectors = parse_u64(next_field(&mut fields, "Size")?, "Size")?;
    let io_type = parse_u64(next_field(&mut fields, "IOType")?, "IOType")?;
    let kind = match io_type {
        0 | 1 if io_type == write_io_type as u64 => ReqKind::Write,
        0 | 1 => ReqKind::Read,
        _ => {
            return Err(field_error(
                "IOType",
                format!("`{io_type}` is neither 0 nor 1"),
            ))
        }
    };
    let volume = parse_u64(next_field(&mut fields, "VolumeID")?, "VolumeID")?;
    let offset_bytes = mul_checked(offset_sectors, SECTOR_BYTES, "Offset")?;
    let len_bytes = mul_checked(size_sectors, SECTOR_BYTES, "Size")?;
    check_extent(offset_bytes, len_bytes, "Size")?;
    Ok(finish(Record {
        time_ns,
        volume_key: volume,
        kind,
        offset_bytes,
        len_bytes,
        sync: false,
        issuer: 0,
    }))
}

/// Streams a trace's lines, reusing one buffer.
struct LineSource<R> {
    reader: R,
    buf: Vec<u8>,
    line_no: u64,
    path: String,
}

impl<R: BufRead> LineSource<R> {
    /// The next line's parse result, with the line number; `None` at the end.
    fn next(
        &mut self,
        parser: &mut LineParser,
    ) -> Result<Option<(u64, FieldResult<Parsed>)>, TraceError> {
        self.buf.clear();
        let read = self
            .reader
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| TraceError::Io {
                path: self.path.clone(),
                source,
            })?;
        if read == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        let parsed = match std::str::from_utf8(&self.buf) {
            Ok(line) => parser.parse(line),
            Err(_) => Err(field_error("line", "not valid UTF-8")),
        };
        Ok(Some((self.line_no, parsed)))
    }

    fn malformed(&self, line: u64, e: FieldError) -> TraceError {
        TraceError::Malformed {
            path: self.path.clone(),
            line,
            field: e.field,
            problem: e.problem,
        }
    }
}

/// What the first pass learned.
struct Prescan {
    volume_ids: HashMap<u64, u32>,
    volume_sizes_bytes: Vec<u64>,
    first_time_ns: u64,
    stats: WorkloadStats,
}

fn prescan<R: BufRead>(
    source: &mut LineSource<R>,
    config: &TraceConfig,
) -> Result<Prescan, TraceError> {
    let mut parser = LineParser::new(config);
    let mut volume_ids: HashMap<u64, u32> = HashMap::default();
    let mut extents_bytes: Vec<u64> = Vec::new();
    let mut stats = WorkloadStats::default();
    let mut first_time_ns: Option<u64> = None;
    let mut latest_time_ns = 0u64;
    while let Some((line_no, parsed)) = source.next(&mut parser)? {
        let record = match parsed {
            Ok(Parsed::Record(record)) => record,
            Ok(Parsed::Blank) => continue,
            Ok(Parsed::Ignored) => {
                stats.lines_ignored += 1;
                continue;
            }
            Ok(Parsed::ZeroLength) => {
                stats.requests_zero_length_skipped += 1;
                continue;
            }
            Err(e) => match config.on_malformed {
                MalformedPolicy::Abort => return Err(source.malformed(line_no, e)),
                MalformedPolicy::Skip => {
                    stats.lines_malformed_skipped += 1;
                    continue;
                }
            },
        };
        if first_time_ns.is_none() {
            first_time_ns = Some(record.time_ns);
        }
        if record.time_ns < latest_time_ns {
            stats.timestamps_clamped += 1;
        }
        latest_time_ns = latest_time_ns.max(record.time_ns);
        let next_id = volume_ids.len();
        let id = *volume_ids.entry(record.volume_key).or_insert_with(|| {
            extents_bytes.push(0);
            next_id as u32
        });
        let end_bytes = record.offset_bytes + record.len_bytes; // checked while parsing
        let extent = &mut extents_bytes[id as usize];
        *extent = (*extent).max(end_bytes);
    }
    let Some(first_time_ns) = first_time_ns else {
        return Err(TraceError::Empty {
            path: source.path.clone(),
        });
    };
    let volume_sizes_bytes = extents_bytes
        .iter()
        .map(|e| {
            e.div_ceil(VOLUME_ROUND_BYTES)
                .saturating_mul(VOLUME_ROUND_BYTES)
        })
        .collect();
    Ok(Prescan {
        volume_ids,
        volume_sizes_bytes,
        first_time_ns,
        stats,
    })
}

/// The next request, read ahead so that its arrival time is known.
#[derive(Clone, Copy, Debug)]
struct Pending {
    scheduled: Nanos,
    record: Record,
    volume: u32,
}

pub struct TraceWorkload<R = BufReader<File>> {
    config: TraceConfig,
    source: LineSource<R>,
    parser: LineParser,
    volume_ids: HashMap<u64, u32>,
    volume_sizes_bytes: Vec<u64>,
    first_time_ns: u64,
    /// Replay speed; `None` in closed loop.
    speed: Option<f64>,
    gate: Gate,
    /// Line-level counters from the first pass.
    line_stats: WorkloadStats,
    pending: Option<Pending>,
    last_scheduled: Nanos,
    error: Option<TraceError>,
    next_id: u64,
}

impl TraceWorkload<BufReader<File>> {
    /// Open `config.path` and pre-scan it.
    pub fn open(config: TraceConfig) -> Result<TraceWorkload<BufReader<File>>, TraceError> {
        let file = File::open(&config.path).map_err(|source| TraceError::Io {
            path: config.path.display().to_string(),
            source,
        })?;
        TraceWorkload::from_reader(BufReader::with_capacity(1 << 16, file), config)
    }
}

impl<R: BufRead + Seek + Send> TraceWorkload<R> {
    /// Replay from any seekable reader; `config.path` only names it in errors.
    pub fn from_reader(reader: R, config: TraceConfig) -> Result<TraceWorkload<R>, TraceError> {
        let (pacing, speed) = match config.replay {
            Replay::AsRecorded {
                speed,
                outstanding_max,
            } => {
                if !(speed.is_finite() && speed > 0.0) {
                    return Err(TraceError::InvalidOption(format!(
                        "replay speed must be a positive number, got {speed}"
                    )));
                }
                if outstanding_max == 0 {
                    return Err(TraceError::InvalidOption(
                        "outstanding_max must be at least 1".into(),
                    ));
                }
                (Pacing::Open { outstanding_max }, Some(speed))
            }
            Replay::Closed { outstanding } => {
                if outstanding == 0 {
                    return Err(TraceError::InvalidOption(
                        "closed-loop replay needs at least 1 outstanding request".into(),
                    ));
                }
                (Pacing::Closed { outstanding }, None)
            }
        };
        if config.cbs_write_io_type > 1 {
            return Err(TraceError::InvalidOption(format!(
                "cbs_write_io_type must be 0 or 1, got {}",
                config.cbs_write_io_type
            )));
        }
        let mut source = LineSource {
            reader,
            buf: Vec::with_capacity(256),
            line_no: 0,
            path: config.path.display().to_string(),
        };
        let scan = prescan(&mut source, &config)?;
        source
            .reader
            .seek(SeekFrom::Start(0))
            .map_err(|e| TraceError::Io {
                path: source.path.clone(),
                source: e,
            })?;
        source.line_no = 0;
        let mut workload = TraceWorkload {
            parser: LineParser::new(&config),
            gate: Gate::new(pacing, config.stop),
            config,
            source,
            volume_ids: scan.volume_ids,
            volume_sizes_bytes: scan.volume_sizes_bytes,
            first_time_ns: scan.first_time_ns,
            speed,
            line_stats: scan.stats,
            pending: None,
            last_scheduled: Nanos::ZERO,
            error: None,
            next_id: 0,
        };
        workload.advance();
        Ok(workload)
    }

    /// Read ahead to the next request; on an error (the file changed since
    /// the first pass) keep it and end the replay.
    fn advance(&mut self) {
        self.pending = None;
        if self.error.is_some() {
            return;
        }
        loop {
            let next = match self.source.next(&mut self.parser) {
                Ok(next) => next,
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            };
            let Some((line_no, parsed)) = next else {
                return;
            };
            let record = match parsed {
                Ok(Parsed::Record(record)) => record,
                Ok(Parsed::Blank | Parsed::Ignored | Parsed::ZeroLength) => continue,
                Err(e) => match self.config.on_malformed {
                    MalformedPolicy::Skip => continue,
                    MalformedPolicy::Abort => {
                        self.error = Some(self.source.malformed(line_no, e));
                        return;
                    }
                },
            };
            let Some(&volume) = self.volume_ids.get(&record.volume_key) else {
                self.error = Some(TraceError::Malformed {
                    path: self.source.path.clone(),
                    line: line_no,
                    field: "volume",
                    problem: "volume not seen in the first pass (file changed?)".into(),
                });
                return;
            };
            let scheduled = match self.speed {
                Some(speed) => {
                    let relative_ns = record.time_ns.saturating_sub(self.first_time_ns);
                    let scaled = Nanos((relative_ns as f64 / speed).round() as u64);
                    scaled.max(self.last_scheduled)
                }
                None => Nanos::ZERO,
            };
            self.last_scheduled = scheduled;
            self.pending = Some(Pending {
                scheduled,
                record,
                volume,
            });
            return;
        }
    }

    fn scheduled(&self) -> Option<Nanos> {
        self.pending.map(|p| p.scheduled)
    }
}

impl<R: BufRead + Seek + Send> Workload for TraceWorkload<R> {
    fn next_arrival(&self) -> Option<Nanos> {
        self.gate.next_time(self.scheduled())
    }

    fn poll(&mut self, now: Nanos) -> Option<IoRequest> {
        let scheduled = self.scheduled();
        if !self.gate.ready(now, scheduled) {
            return None;
        }
        let pending = self.pending?;
        self.gate.on_issue(scheduled);
        let id = self.next_id;
        self.next_id += 1;
        self.advance();
        let record = pending.record;
        Some(IoRequest {
            id,
            volume: pending.volume,
            kind: record.kind,
            offset_bytes: record.offset_bytes,
            len_bytes: record.len_bytes,
            sync: record.sync,
            issuer: record.issuer,
        })
    }

    fn complete(&mut self, now: Nanos, id: u64) {
        debug_assert!(
            id < self.next_id,
            "completion of a request never handed out"
        );
        self.gate.on_complete(now);
    }

    fn finished(&self) -> bool {
        self.gate.finished(self.scheduled())
    }

    fn volume_sizes_bytes(&self) -> Vec<u64> {
        self.volume_sizes_bytes.clone()
    }

    fn name(&self) -> String {
        format!("trace({}:{})", self.config.format.name(), self.source.path)
    }

    /// Request counters from the replay; line counters cover the whole file
    /// (from the first pass), even when a stop limit ends the replay early.
    fn stats(&self) -> WorkloadStats {
        let mut stats = self.gate.stats();
        stats.lines_malformed_skipped = self.line_stats.lines_malformed_skipped;
        stats.lines_ignored = self.line_stats.lines_ignored;
        stats.requests_zero_length_skipped = self.line_stats.requests_zero_length_skipped;
        stats.timestamps_clamped = self.line_stats.timestamps_clamped;
        stats
    }

    fn take_error(&mut self) -> Option<WorkloadError> {
        self.error.take().map(WorkloadError::Trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_times_are_exact() {
        assert_eq!(
            parse_decimal_ns("1.5", NS_PER_SEC, "t").ok(),
            Some(1_500_000_000)
        );
        assert_eq!(
            parse_decimal_ns("0.000000001", NS_PER_SEC, "t").ok(),
            Some(1)
        );
        assert_eq!(parse_decimal_ns("12", NS_PER_US, "t").ok(), Some(12_000));
        assert_eq!(parse_decimal_ns(".5", NS_PER_US, "t").ok(), Some(500));
        assert!(parse_decimal_ns("-1", NS_PER_SEC, "t").is_err());
        assert!(parse_decimal_ns("1e3", NS_PER_SEC, "t").is_err());
        assert!(parse_decimal_ns(".", NS_PER_SEC, "t").is_err());
        assert!(parse_decimal_ns("99999999999999999999", NS_PER_SEC, "t").is_err());
    }

    /// The shortcuts (byte splitter, ASCII trim, digit runs) give what the
    /// general std routines give, on lines made of the pieces that matter:
    /// digits, signs, dots, commas, ASCII and Unicode spaces, long numbers.
    #[test]
    fn shortcuts_agree_with_the_std_routines() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        const PIECES: &[&str] = &[
            "0",
            "7",
            "42",
            "0x28",
            "+5",
            "-3",
            ".",
            "1.5",
            ",",
            ",",
            " ",
            "\t",
            "\u{a0}",
            "\u{2003}",
            "é",
            "R",
            "Write",
            "18446744073709551615",
            "18446744073709551616",
            "9999999999999999999",
            "00000000000000000001",
            "",
        ];
        let mut rng = SmallRng::seed_from_u64(11);
        for _ in 0..50_000 {
            let line: String = (0..rng.gen_range(0..8))
                .map(|_| PIECES[rng.gen_range(0..PIECES.len())])
                .collect();
            let ours: Vec<&str> = comma_fields(&line).collect();
            let std: Vec<&str> = line.split(',').collect();
            assert_eq!(ours, std, "{line:?}");
            for f in std {
                assert_eq!(trim(f), f.trim(), "{f:?}");
                let general = f.parse::<u64>().ok();
                assert_eq!(parse_u64(f, "x").ok(), general, "{f:?}");
                if let Some(v) = digits_u64(f) {
                    assert_eq!(Some(v), general, "{f:?}");
                }
                let decimal = parse_decimal_ns(f, NS_PER_US, "t").ok();
                if let Some(v) = general.filter(|_| f.bytes().all(|b| b.is_ascii_digit())) {
                    assert_eq!(decimal, v.checked_mul(NS_PER_US), "{f:?}");
                }
            }
        }
    }
}
