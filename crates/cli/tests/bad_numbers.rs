//! Bad numbers on the command line: every numeric option of every
//! subcommand, and every numeric key of `serve --config`, refuses zero,
//! negative, huge, tiny and non-finite values where they make no sense:
//! a non-zero exit, no panic, and an error that names the option (as
//! `--option`, or as the engine's field `option_bytes`, `option_pct`...).
//! Each refusal comes before a server starts or a file is made (the
//! directory the command runs in gains nothing). The good defaults, given
//! explicitly, still parse, so that a parser refusing everything fails here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a refusal may take: a command still running after this was
/// accepted (a server serving, a simulation running).
const REFUSAL_TIME_MAX: Duration = Duration::from_secs(20);

/// What an option needs around it to be parsed and checked.
#[derive(Clone, Copy, Debug)]
enum Ctx {
    /// One short simulated run.
    Sim,
    /// ...journaled (its commit age is checked).
    SimJournaled,
    SimPglike,
    SimSpc1,
    SimFileserver,
    SimTrace,
    /// ...with four issuers (critical issuers are checked against them).
    SimIssuers,
    /// `serve` with its data directory (default cache and backing files) here.
    Serve,
    ServeJournaled,
    /// `flush` offline, with no server, no cache and no backing.
    FlushOffline,
    Stop,
    Stats,
    Top,
    BackingRecover,
}

/// The arguments before the option for `ctx`, run in `dir`.
fn context(ctx: Ctx, dir: &Path) -> Vec<String> {
    let at = |name: &str| dir.join(name).display().to_string();
    let sim = ["sim", "--requests", "100", "--warmup", "0"];
    let serve = ["serve", "--data-dir", &at("d"), "--socket", &at("s.sock")];
    let args: Vec<&str> = match ctx {
        Ctx::Sim => sim.to_vec(),
        Ctx::SimJournaled => [&sim[..], &["--write-policy", "wb-j", "--footprint", "64M"]].concat(),
        Ctx::SimPglike => [
            &sim[..],
            &["--workload", "pglike", "--backend", "hdd-per-volume"],
        ]
        .concat(),
        Ctx::SimSpc1 => [&sim[..], &["--workload", "spc1"]].concat(),
        Ctx::SimFileserver => [&sim[..], &["--workload", "fileserver"]].concat(),
        Ctx::SimTrace => [&sim[..], &["--workload", "trace", "--trace", "trace.csv"]].concat(),
        Ctx::SimIssuers => [&sim[..], &["--issuers", "4"]].concat(),
        Ctx::Serve => serve.to_vec(),
        Ctx::ServeJournaled => {
            let journaled = ["--write-policy", "wb-j", "--journal", "disk=backing-end"];
            [&serve[..], &journaled].concat()
        }
        Ctx::FlushOffline => {
            let (control, cache) = (at("none.ctl"), at("none.img"));
            let export = format!("disk={}", at("none"));
            let args = [
                "flush",
                "--control",
                &control,
                "--cache",
                &cache,
                "--export",
                &export,
            ];
            return args.iter().map(|s| s.to_string()).collect();
        }
        Ctx::Stop => vec!["stop", "--control", "none.ctl"],
        Ctx::Stats => vec!["stats", "--control", "none.ctl"],
        Ctx::Top => vec!["top", "--control", "none.ctl"],
        Ctx::BackingRecover => {
            let journal = ["--journal", "backing-end", "--journal-size", "1M"];
            [&["backing-recover", "none.img"][..], &journal].concat()
        }
    };
    args.iter().map(|s| s.to_string()).collect()
}

/// Bad values of an option in a context; `names`, if not the option, is
/// what the error must say instead.
type Case = (
    Ctx,
    &'static str,
    &'static [&'static str],
    Option<&'static str>,
);

/// Beyond every integer type an option has.
const HUGE: &str = "99999999999999999999";

#[rustfmt::skip]
const SIM: &[Case] = &[
    (Ctx::Sim, "seeds", &["0", "-1", "1001", HUGE], None),
    (Ctx::Sim, "threads", &["0", "-1", "1025", HUGE], None),
    (Ctx::Sim, "crash-at", &["0", "-1", HUGE], None),
    (Ctx::Sim, "cache-format", &["0", "-1", "1", "4", HUGE], None),
    (Ctx::Sim, "cache-pages", &["0", "-1", "16", "536870913", HUGE], None),
    (Ctx::Sim, "page-size", &["0", "-1", "256", "1000", "131072", HUGE], None),
    (Ctx::Sim, "group-size", &["0", "-1", "1000", "1T", HUGE], None),
    (Ctx::Sim, "max-queue", &["0", "-1", "65537", HUGE], None),
    (Ctx::Sim, "low-threshold-pct", &["-1", "101", "NaN", "inf"], None),
    (Ctx::Sim, "high-threshold-pct", &["0", "-1", "101", "NaN", "inf"], None),
    (Ctx::Sim, "journal-pages", &["-1", "536870913", HUGE], None),
    (Ctx::Sim, "commit-pages", &["-1", "536870913", HUGE], None),
    (Ctx::Sim, "commit-age", &["-1", "25h", "600y"], None),
    (Ctx::SimJournaled, "commit-age", &["1ns", "9ms"], None),
    (Ctx::Sim, "consistency-point-every", &["-1", HUGE], None),
    (Ctx::Sim, "sequential-cutoff", &["-1", "16E", "99999999999T"], None),
    (Ctx::Sim, "max-dirty-age", &["-1", "1ns", "9ms", "25h", "600y"], None),
    (Ctx::Sim, "idle-after", &["-1", "25h", "600y"], None),
    (Ctx::Sim, "idle-destages", &["-1", "21", HUGE], None),
    (Ctx::SimFileserver, "files", &["0", "-1", "8388609", HUGE], None),
    // Fewer files than streams: the workload's table (twice the files).
    (Ctx::SimFileserver, "files", &["1"], Some("files_max")),
    (Ctx::SimPglike, "cpu-us", &["-1", "1e300", "NaN", "inf"], None),
    (Ctx::Sim, "footprint", &["0", "-1", "100", "1T", "16E"], None),
    (Ctx::Sim, "disk-queue-depth", &["0", "-1", "257", HUGE], None),
    (Ctx::Sim, "outstanding", &["0", "-1", "4097", HUGE], None),
    (Ctx::Sim, "target-iops", &["0", "-1", "0.5", "1e9", "NaN", "inf"], None),
    (Ctx::Sim, "read-fraction", &["-0.5", "1.5", "NaN", "inf"], None),
    (Ctx::Sim, "issuers", &["-1", HUGE], None),
    (Ctx::Sim, "critical-volumes", &["-1", "1", "65536"], None),
    (Ctx::SimIssuers, "critical-issuers", &["-1", "5", "4097", HUGE], None),
    (Ctx::Sim, "sync-fraction", &["-0.5", "1.5", "NaN", "inf"], None),
    (Ctx::SimSpc1, "bsus", &["0", "-1", "100001", HUGE], None),
    (Ctx::SimTrace, "trace-speed", &["0", "-1", "0.0001", "1e7", "NaN", "inf"], None),
    (Ctx::Sim, "seed", &["-1", HUGE], None),
    (Ctx::Sim, "warmup", &["-1", HUGE], None),
    (Ctx::Sim, "requests", &["0", "-1", HUGE], None),
    (Ctx::Sim, "timeline-ms", &["0", "-1", "86400001", HUGE], None),
    (Ctx::Sim, "faults", &["cache-write-eio=NaN", "cache-write-eio=-1", "cache-write-eio=2"], None),
    (Ctx::Sim, "faults", &["cache-write-eio=@0", "crashes=0", "spike=0.5:-1", "spike=0.5:NaN"], None),
];

#[rustfmt::skip]
const SERVE: &[Case] = &[
    (Ctx::Serve, "cache-size", &["0", "-1", "16K", "100T", "99999999999T"], None),
    (Ctx::Serve, "cache-format", &["0", "-1", "1", "4", HUGE], None),
    (Ctx::Serve, "flush-interval", &["-1", "0.0001", "3601", "NaN", "inf"], None),
    (Ctx::Serve, "backing-size", &["0", "-1", "100", "8388607T", "16E"], None),
    (Ctx::Serve, "backing-timeout", &["-1", "25h", "600y"], None),
    (Ctx::Serve, "peer-timeout", &["-1", "0", "1us", "25h", "600y"], None),
    (Ctx::Serve, "low-threshold", &["-1", "101", "NaN", "inf"], None),
    (Ctx::Serve, "high-threshold", &["0", "-1", "101", "NaN", "inf"], None),
    (Ctx::Serve, "destages-max", &["0", "-1", "65537", HUGE], None),
    (Ctx::Serve, "sequential-cutoff", &["-1", "16E", "99999999999T"], None),
    (Ctx::Serve, "max-dirty-age", &["-1", "1ns", "9ms", "25h", "600y"], None),
    (Ctx::Serve, "idle-after", &["-1", "25h", "600y"], None),
    (Ctx::Serve, "idle-destages", &["-1", "21", HUGE], None),
    (Ctx::Serve, "journal-size", &["0", "-1", "100", "8388607T"], None),
    (Ctx::Serve, "commit-size", &["-1", "100", "8388607T"], None),
    (Ctx::Serve, "commit-age", &["-1", "25h", "600y"], None),
    (Ctx::ServeJournaled, "commit-age", &["1ns", "9ms"], None),
    (Ctx::Serve, "page-size", &["0", "-1", "256", "1000", "131072", HUGE], None),
    (Ctx::Serve, "group-size", &["0", "-1", "1000", "1T", HUGE], None),
    (Ctx::Serve, "block-size", &["0", "-1", "3", "131072", HUGE], None),
    (Ctx::Serve, "workers", &["0", "-1", "1025", HUGE], None),
    (Ctx::Serve, "poll-us", &["-1", "10001", HUGE], None),
    (Ctx::Serve, "io-threads", &["0", "-1", "1025", HUGE], None),
    (Ctx::Serve, "stop-timeout", &["-1", "86401", "NaN", "inf"], None),
];

#[rustfmt::skip]
const TOOLS: &[Case] = &[
    (Ctx::FlushOffline, "stall-timeout-s", &["0", "-1", "86401", HUGE], None),
    (Ctx::FlushOffline, "journal-size", &["0", "-1", "100", "8388607T"], None),
    (Ctx::Stop, "stall-timeout-s", &["0", "-1", "86401", HUGE], None),
    (Ctx::Stats, "watch", &["0", "-1", "0.01", "3601", "NaN", "inf"], None),
    (Ctx::Top, "interval", &["0", "-1", "0.01", "61", "NaN", "inf"], None),
    (Ctx::BackingRecover, "journal-size", &["0", "-1", "100", "8388607T"], None),
    (Ctx::BackingRecover, "page-size", &["0", "-1", "256", "1000", "131072", HUGE], None),
];

/// `serve --config` keys (TOML values) and the same refusals.
#[rustfmt::skip]
const CONFIG: &[(&str, &[&str])] = &[
    ("cache-size", &["0", "-1", "\"16K\"", "\"100T\""]),
    ("cache-format", &["0", "-1", "1", "4"]),
    ("flush-interval", &["-1.0", "0.0001", "3601.0", "nan", "inf"]),
    ("backing-size", &["0", "-1", "\"8388607T\""]),
    ("backing-timeout", &["\"-1s\"", "\"25h\""]),
    ("peer-timeout", &["\"-1s\"", "\"0s\"", "\"25h\""]),
    ("low-threshold", &["-1.0", "101.0", "nan", "inf"]),
    ("high-threshold", &["0.0", "101.0", "nan", "inf"]),
    ("destages-max", &["0", "-1", "65537"]),
    ("sequential-cutoff", &["-1", "\"16E\""]),
    ("max-dirty-age", &["\"1ns\"", "\"25h\""]),
    ("idle-after", &["\"25h\""]),
    ("idle-destages", &["-1", "21"]),
    ("journal-size", &["0", "\"100\"", "\"8388607T\""]),
    ("commit-size", &["\"100\"", "\"8388607T\""]),
    ("commit-age", &["\"25h\""]),
    ("page-size", &["0", "-1", "1000"]),
    ("group-size", &["0", "-1", "1000"]),
    ("block-size", &["0", "-1", "3", "131072"]),
    ("workers", &["0", "-1", "1025"]),
    ("poll-us", &["-1", "10001"]),
    ("io-threads", &["0", "-1", "1025"]),
    ("stop-timeout", &["-1.0", "86401.0", "nan", "inf"]),
];

/// What a run of `wcache` left: its exit code (None: killed or still
/// running at `REFUSAL_TIME_MAX`) and its standard error.
fn run(args: &[String], dir: &Path) -> (Option<i32>, String) {
    let log = tempfile::NamedTempFile::new().expect("stderr file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_wcache"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().expect("stderr file"))
        .spawn()
        .expect("run wcache");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if start.elapsed() > REFUSAL_TIME_MAX {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (
        status,
        std::fs::read_to_string(log.path()).unwrap_or_default(),
    )
}

/// The names of what is in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A directory to run in, holding what some contexts read (never written).
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("trace.csv"), "1,h,0,Write,0,4096,10\n").expect("trace");
    dir
}

/// Refusals of a command line as a whole, not of a value.
const USAGE_ERRORS: &[&str] = &[
    "cannot be used multiple times",
    "required arguments were not provided",
    "unexpected argument",
];

/// `args` must be refused: non-zero exit, no panic, `names` in the error,
/// and nothing new in `dir`. Returns the problem, if any.
fn refused(args: &[String], dir: &Path, names: &[String]) -> Option<String> {
    let before = listing(dir);
    let (code, stderr) = run(args, dir);
    let problem = match code {
        None => "was accepted (still running) or killed by a signal".to_string(),
        Some(0) => "was accepted (exit 0)".to_string(),
        Some(_) if stderr.contains("panicked") => format!("panicked: {stderr}"),
        Some(_) if USAGE_ERRORS.iter().any(|e| stderr.contains(e)) => {
            format!("refused for its other arguments: {stderr}")
        }
        Some(_) if !names.iter().any(|n| stderr.contains(n.as_str())) => {
            format!("error does not name {names:?}: {stderr}")
        }
        Some(_) if listing(dir) != before => format!("left files: {:?}", listing(dir)),
        Some(_) => return None,
    };
    Some(format!("wcache {}: {problem}", args.join(" ")))
}

/// How an error may name option or key `name`: `--name`, or the field
/// the engine or a workload checks (`name_bytes`, `name_pct`, "name ...").
fn spellings(name: &str, option: bool) -> Vec<String> {
    let mut out = vec![name.replace('-', "_"), name.replace('-', " ")];
    out.push(if option {
        format!("--{name}")
    } else {
        name.to_string()
    });
    out
}

/// `args` with `--option value` in place of the context's own value.
fn with_option(mut args: Vec<String>, option: &str, value: &str) -> Vec<String> {
    let flag = format!("--{option}");
    if let Some(i) = args.iter().position(|a| *a == flag) {
        args.drain(i..i + 2);
    }
    args.extend([flag, value.to_string()]);
    args
}

/// Runs every case of `table`; fails listing every problem.
fn check_cases(table: &[Case]) {
    let dir = workdir();
    let mut problems = Vec::new();
    let mut runs = 0;
    for &(ctx, option, values, names) in table {
        let names = match names {
            Some(n) => vec![n.to_string()],
            None => spellings(option, true),
        };
        for value in values {
            let args = with_option(context(ctx, dir.path()), option, value);
            problems.extend(refused(&args, dir.path(), &names));
            runs += 1;
        }
    }
    assert!(runs >= table.len() * 2, "only {runs} runs");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn sim_refuses_bad_numbers_naming_the_option() {
    check_cases(SIM);
}

#[test]
fn serve_refuses_bad_numbers_naming_the_option_before_any_file() {
    check_cases(SERVE);
}

#[test]
fn the_tools_refuse_bad_numbers_naming_the_option() {
    check_cases(TOOLS);
}

#[test]
fn serve_config_keys_refuse_bad_numbers_naming_the_key() {
    let dir = workdir();
    let config = dir.path().join("wcache.toml");
    let mut problems = Vec::new();
    for &(key, values) in CONFIG {
        for value in values {
            std::fs::write(&config, format!("{key} = {value}\n")).expect("config");
            let mut args = context(Ctx::Serve, dir.path());
            args.extend(["--config".to_string(), config.display().to_string()]);
            problems.extend(refused(&args, dir.path(), &spellings(key, false)));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every numeric option of `serve` at its default, given explicitly.
const SERVE_DEFAULTS: &[(&str, &str)] = &[
    ("cache-size", "1G"),
    ("cache-format", "2"),
    ("flush-interval", "1.0"),
    ("backing-size", "8G"),
    ("backing-timeout", "30s"),
    ("peer-timeout", "5s"),
    ("low-threshold", "80.0"),
    ("high-threshold", "90.0"),
    ("destages-max", "20"),
    ("sequential-cutoff", "0"),
    ("max-dirty-age", "30s"),
    ("idle-after", "1s"),
    ("idle-destages", "4"),
    ("journal-size", "64M"),
    ("commit-size", "0"),
    ("commit-age", "1s"),
    ("page-size", "4096"),
    ("group-size", "65536"),
    ("block-size", "512"),
    ("workers", "32"),
    ("poll-us", "50"),
    ("io-threads", "4"),
    ("stop-timeout", "10.0"),
];

/// `args` fails with `expected` only: no number was refused, no panic.
fn fails_with_only(args: &[String], dir: &Path, expected: &str) {
    let (code, stderr) = run(args, dir);
    assert!(code.is_some_and(|c| c != 0), "{args:?}: {code:?} {stderr}");
    assert!(stderr.contains(expected), "{args:?}: {stderr}");
    let usage = USAGE_ERRORS.iter().any(|e| stderr.contains(e));
    assert!(
        !stderr.contains("invalid value") && !usage,
        "{args:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

#[test]
fn serve_and_its_config_file_take_the_defaults() {
    let dir = workdir();
    // An export given twice is refused last, before any file is made.
    let twice = ["--export", "a=mem:1M", "--export", "a=mem:1M"].map(String::from);
    let mut args = context(Ctx::Serve, dir.path());
    for (option, value) in SERVE_DEFAULTS {
        args.extend([format!("--{option}"), value.to_string()]);
    }
    args.extend(twice.clone());
    fails_with_only(&args, dir.path(), "export name \"a\" given twice");
    let config = dir.path().join("wcache.toml");
    let text: String = SERVE_DEFAULTS
        .iter()
        .map(|(key, value)| match value.parse::<f64>() {
            Ok(_) => format!("{key} = {value}\n"),
            Err(_) => format!("{key} = \"{value}\"\n"),
        })
        .collect();
    std::fs::write(&config, text).expect("config");
    let mut args = context(Ctx::Serve, dir.path());
    args.extend(["--config".to_string(), config.display().to_string()]);
    args.extend(twice);
    fails_with_only(&args, dir.path(), "export name \"a\" given twice");
    assert!(!dir.path().join("d").exists(), "a data directory was made");
}

/// `wcache ARGS` succeeds.
fn succeeds(args: &[&str], dir: &Path) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let (code, stderr) = run(&args, dir);
    assert_eq!(code, Some(0), "{args:?}: {stderr}");
}

/// Numeric options of one `sim` run at good values (most their defaults).
#[rustfmt::skip]
const SIM_GOOD: &[(&str, &str)] = &[
    ("seeds", "1"), ("threads", "1"), ("cache-format", "2"), ("cache-pages", "4096"),
    ("page-size", "4096"), ("group-size", "262144"), ("max-queue", "20"),
    ("low-threshold-pct", "80"), ("high-threshold-pct", "90"), ("journal-pages", "0"),
    ("commit-pages", "0"), ("commit-age", "1s"), ("consistency-point-every", "0"),
    ("sequential-cutoff", "0"), ("max-dirty-age", "24h"), ("idle-after", "1s"),
    ("idle-destages", "0"), ("footprint", "64M"), ("disk-queue-depth", "32"),
    ("outstanding", "16"), ("read-fraction", "0"), ("issuers", "4"),
    ("critical-issuers", "1"), ("sync-fraction", "0.5"), ("critical-volumes", "0"),
    ("timeline-ms", "100"), ("crash-at", "1000000"), ("seed", "1"), ("warmup", "0"),
    ("requests", "100"),
];

#[test]
fn sim_takes_good_numbers() {
    let dir = workdir();
    let d = dir.path();
    let mut args = vec!["sim".to_string()];
    for (option, value) in SIM_GOOD {
        args.extend([format!("--{option}"), value.to_string()]);
    }
    succeeds(&args.iter().map(String::as_str).collect::<Vec<_>>(), d);
    let sim = |extra: &[&'static str]| -> Vec<&'static str> {
        let head = ["sim", "--requests", "100", "--warmup", "0"];
        head.iter().chain(extra).copied().collect()
    };
    succeeds(&sim(&["--target-iops", "500"]), d);
    let journaled = [
        "--write-policy",
        "wb-j",
        "--footprint",
        "64M",
        "--commit-age",
        "10ms",
    ];
    succeeds(&sim(&journaled), d);
    succeeds(&sim(&["--workload", "spc1", "--bsus", "10"]), d);
    succeeds(&sim(&["--workload", "fileserver", "--files", "200"]), d);
    let pglike = [
        "--workload",
        "pglike",
        "--backend",
        "hdd-per-volume",
        "--cpu-us",
        "100",
    ];
    succeeds(&sim(&pglike), d);
    let trace = [
        "--workload",
        "trace",
        "--trace",
        "trace.csv",
        "--trace-speed",
        "1",
    ];
    succeeds(&sim(&trace), d);
}

#[test]
fn the_tools_take_good_numbers() {
    let dir = workdir();
    let d = dir.path();
    let with = |ctx: Ctx, good: &[(&str, &str)]| -> Vec<String> {
        let start = context(ctx, d);
        good.iter().fold(start, |args, (option, value)| {
            with_option(args, option, value)
        })
    };
    let none: PathBuf = d.join("none.img");
    let missing = format!("{} does not exist", none.display());
    let flush = with(
        Ctx::FlushOffline,
        &[("stall-timeout-s", "60"), ("journal-size", "64M")],
    );
    fails_with_only(&flush, d, &missing);
    let recover = with(
        Ctx::BackingRecover,
        &[("journal-size", "64M"), ("page-size", "4096")],
    );
    fails_with_only(&recover, d, "backing none.img does not exist");
    let stop = with(Ctx::Stop, &[("stall-timeout-s", "60")]);
    fails_with_only(&stop, d, "none.ctl");
    fails_with_only(&with(Ctx::Stats, &[("watch", "1")]), d, "none.ctl");
    fails_with_only(&with(Ctx::Top, &[("interval", "1")]), d, "none.ctl");
}

/// Options that take a value other than a number: paths, addresses,
/// names, specs.
#[rustfmt::skip]
const NOT_NUMBERS: &[&str] = &[
    "out", "backend", "cache-device", "order", "rate", "write-policy", "consistency-points",
    "checkpoint", "replacement", "admission", "workload", "hrrw", "trace", "trace-format",
    "timeline", "config", "socket", "listen", "control", "metrics", "data-dir", "cache",
    "cache-sync", "backing", "export", "backing-sync", "export-admission", "critical", "journal",
    "tls", "tls-certificates", "replicate-to", "replica-state", "on-peer-lost",
    "replicate-tls-certificates",
];

/// Every subcommand's options that take a value, from its `--help`.
fn options_of(subcommand: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_wcache"))
        .args([subcommand, "--help"])
        .output()
        .expect("run wcache");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    help.lines()
        .filter_map(|line| {
            // "  --name <VALUE>" or "  -n, --name <VALUE>"
            let long = line.trim_start().split(", ").last()?;
            let (flag, rest) = long.strip_prefix("--")?.split_once(' ')?;
            rest.starts_with('<').then(|| flag.to_string())
        })
        .collect()
}

/// A new numeric option fails here until its bad values are in a table
/// above (and, for `serve`, in the config file's).
#[test]
fn every_numeric_option_has_its_bad_values_here() {
    let subcommands = [
        "sim",
        "serve",
        "flush",
        "stop",
        "stats",
        "top",
        "backing-recover",
        "inspect",
        "check",
        "status",
        "set",
        "consistency-point",
    ];
    let dir = workdir();
    let mut missing = Vec::new();
    let mut numeric = 0;
    for subcommand in subcommands {
        let cases: Vec<&str> = [SIM, SERVE, TOOLS]
            .concat()
            .iter()
            .filter(|(ctx, ..)| context(*ctx, dir.path())[0] == subcommand)
            .map(|&(_, option, ..)| option)
            .collect();
        for option in options_of(subcommand) {
            if NOT_NUMBERS.contains(&option.as_str()) {
                continue;
            }
            numeric += 1;
            if !cases.contains(&option.as_str()) {
                missing.push(format!("{subcommand} --{option}"));
            }
            if subcommand == "serve" && !CONFIG.iter().any(|(key, _)| *key == option) {
                missing.push(format!("serve --config key {option}"));
            }
        }
    }
    assert!(numeric > 60, "only {numeric} numeric options found");
    assert!(missing.is_empty(), "no bad values for: {missing:?}");
}
