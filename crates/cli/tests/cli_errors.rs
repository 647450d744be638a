//! Bad input to `wcache sim` and `wcache serve` ends with an error that names what is wrong and a
//! non-zero exit, never a panic.

use std::process::Command;

fn wcache(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wcache"))
        .args(args)
        .output()
        .expect("run wcache");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "wcache panicked: {stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

/// Runs `wcache ARGS`, which must succeed; returns its standard output.
fn succeeds(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wcache"))
        .args(args)
        .output()
        .expect("run wcache");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails_naming(args: &[&str], needle: &str) {
    let (code, stderr) = wcache(args);
    assert_ne!(code, 0, "{args:?} should fail");
    assert!(
        stderr.contains(needle),
        "{args:?}: error {stderr:?} does not name {needle:?}"
    );
}

/// A file `name` with `text` in a directory of its own (removed by the caller).
fn temp_file(name: &str, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("wcache-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn cache_smaller_than_a_write_group() {
    fails_naming(
        &["sim", "--backend", "raid5", "--cache-pages", "16"],
        "--cache-pages 16: fewer than one write group (64 pages of 4096 bytes)",
    );
}

#[test]
fn thresholds_out_of_order() {
    fails_naming(
        &["sim", "--low-threshold-pct", "95"],
        "low_threshold_pct (95)",
    );
}

#[test]
fn unknown_policies_and_devices() {
    fails_naming(&["sim", "--order", "fifo"], "destage order \"fifo\"");
    fails_naming(&["sim", "--replacement", "mru"], "\"mru\"");
    fails_naming(&["sim", "--rate", "fast"], "\"fast\"");
    fails_naming(
        &["sim", "wow-spc1", "--quick", "--rate", "fast"],
        "\"fast\"",
    );
    fails_naming(
        &["sim", "wow-random", "--quick", "--outstanding", "8"],
        "not to wow-random",
    );
    fails_naming(
        &["sim", "wow-spc1", "--quick", "--backend", "hdd"],
        "only raid5-md may replace its RAID-5",
    );
    fails_naming(
        &["sim", "wow-spc1", "--quick", "--outstanding", "0"],
        "for '--outstanding <OUTSTANDING>'",
    );
    fails_naming(
        &["sim", "--disk-queue-depth", "0"],
        "--disk-queue-depth 0: must be 1 to 256",
    );
    fails_naming(
        &["sim", "wow-spc1", "--quick", "--disk-queue-depth", "300"],
        "--disk-queue-depth 300: must be 1 to 256",
    );
    fails_naming(
        &["sim", "--write-policy", "sometimes"],
        "unknown write policy \"sometimes\"; valid: write-back, write-through, write-back-ordered, write-back-journaled, write-around",
    );
    fails_naming(
        &["sim", "--admission", "some"],
        "unknown admission policy \"some\"; valid: all",
    );
    fails_naming(
        &["sim", "--sequential-cutoff", "4X"],
        "\"4X\" is not a size",
    );
    fails_naming(&["sim", "--backend", "tape"], "\"tape\"");
    fails_naming(&["sim", "wow-foo"], "\"wow-foo\"");
    fails_naming(&["sim", "--page-size", "1000"], "page_size_bytes = 1000");
}

#[test]
fn unknown_hrrw_model_and_zero_bsus() {
    for workload in ["spc1", "random"] {
        fails_naming(
            &["sim", "--workload", workload, "--hrrw", "walk"],
            "unknown --hrrw value \"walk\"; valid: reference, generator, shared-grid",
        );
    }
    fails_naming(
        &[
            "sim",
            "--workload",
            "spc1",
            "--hrrw",
            "generator",
            "--bsus",
            "0",
        ],
        "bsus is 0",
    );
}

#[test]
fn malformed_trace_line_is_named() {
    let (dir, path) = temp_file(
        "bad.csv",
        "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
         128166372003061629,h,0,Write,4096,4096,10\n\
         128166372003061630,h,0,Write,4096,lots,10\n",
    );
    let p = path.to_str().unwrap();
    fails_naming(&["sim", "--workload", "trace", "--trace", p], "bad.csv:3");
    fails_naming(&["sim", "--workload", "trace", "--trace", p], "Size");
    fails_naming(
        &[
            "sim",
            "--workload",
            "trace",
            "--trace",
            "/nonexistent/trace.csv",
        ],
        "/nonexistent/trace.csv",
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn footprint_takes_units_and_names_a_bad_one() {
    fails_naming(&["sim", "--footprint", "12Q"], "\"12Q\" is not a size");
    fails_naming(
        &["sim", "--footprint", "1"],
        "\"1\" is less than one 4 KiB page",
    );
    fails_naming(&["sim", "--requests", "0"], "--requests");
    let stdout = succeeds(&[
        "sim",
        "--backend",
        "raid10",
        "--footprint",
        "64M",
        "--warmup",
        "100",
        "--requests",
        "500",
    ]);
    assert!(stdout.contains("(65536 KiB footprint)"), "{stdout}");
}

#[test]
fn a_good_run_succeeds_and_reports() {
    let stdout = succeeds(&[
        "sim",
        "--backend",
        "raid10",
        "--cache-pages",
        "512",
        "--warmup",
        "1000",
        "--requests",
        "3000",
        "--check",
    ]);
    assert!(stdout.contains("iops"), "{stdout}");
    assert!(stdout.contains("all correct"), "{stdout}");
}

/// With a sequential cutoff, a sequential stream's writes go around the
/// cache once the stream reaches it, and the data checker still finds every
/// read (of data written before, through the cache or around it) correct.
#[test]
fn a_sequential_cutoff_bypasses_and_stays_correct() {
    let mut trace = String::from("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n");
    let mut t = 128166372003061629u64;
    for round in 0..4u64 {
        for i in 0..64u64 {
            let offset = (round * 64 + i) * 16384;
            trace.push_str(&format!("{t},h,0,Write,{offset},16384,10\n"));
            t += 1000;
        }
        for i in 0..64u64 {
            let offset = (round * 64 + i) * 16384 + 512;
            trace.push_str(&format!("{t},h,0,Read,{offset},8192,10\n"));
            t += 1000;
        }
    }
    let (dir, path) = temp_file("sequential.csv", &trace);
    let run = |cutoff: &str| {
        succeeds(&[
            "sim",
            "--backend",
            "raid10",
            "--cache-pages",
            "4096",
            "--workload",
            "trace",
            "--trace",
            path.to_str().unwrap(),
            "--warmup",
            "0",
            "--sequential-cutoff",
            cutoff,
            "--check",
        ])
    };
    let off = run("0");
    let on = run("256K");
    std::fs::remove_dir_all(&dir).ok();
    assert!(off.contains("all correct"), "{off}");
    assert!(on.contains("all correct"), "{on}");
    let bypasses = |out: &str| -> u64 {
        let line = out
            .lines()
            .find(|l| l.starts_with("bypasses"))
            .expect("a bypasses line");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    assert_eq!(bypasses(&off), 0, "{off}");
    // The rounds write one stream (each round starts where the last ended);
    // its first 15 writes stay under 256 KiB, the other 241 go around. The
    // counters cover the measured window, which starts once the first 16
    // requests (all writes) are in flight.
    let n = bypasses(&on);
    assert!(
        (4 * 64 - 15 - 16..=4 * 64 - 15).contains(&n),
        "{n} bypasses: {on}"
    );
}

/// `--disk-queue-depth` reaches the array's disks: at depth 1 they serve in
/// arrival order, which is slower, and the mechanism line reports longer
/// positioning for the reads.
#[test]
fn disk_queue_depth_reaches_the_disks() {
    let run = |depth: &str| {
        let stdout = succeeds(&[
            "sim",
            "--backend",
            "raid10",
            "--cache-pages",
            "512",
            "--warmup",
            "1000",
            "--requests",
            "5000",
            "--read-fraction",
            "0.3",
            "--disk-queue-depth",
            depth,
        ]);
        let field = |line: &str, after: &str| -> f64 {
            let l = stdout
                .lines()
                .find(|l| l.starts_with(line))
                .unwrap_or_else(|| panic!("{stdout}"));
            let rest = &l[l.find(after).expect(after) + after.len()..];
            rest.split_whitespace()
                .next()
                .unwrap()
                .trim_start_matches('(')
                .parse()
                .unwrap()
        };
        (
            field("iops", "iops"),
            field("disk mechanism", " at "),
            field("disk mechanism", "ms each ("),
        )
    };
    let (iops1, service1, position1) = run("1");
    let (iops32, service32, position32) = run("32");
    assert!(
        iops32 > 1.2 * iops1,
        "depth 32 {iops32} vs depth 1 {iops1} IOPS"
    );
    assert!(
        position1 > position32 && position1 < service1,
        "{position1} {service1}"
    );
    assert!(position32 < service32);
}

#[test]
fn bad_serve_settings_touch_no_file() {
    let dir = std::env::temp_dir().join(format!("wcache-bad-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("cache.img");
    let path = |p: &std::path::Path| p.display().to_string();
    let (cache_s, backing_s, socket_s) = (
        path(&cache),
        path(&dir.join("backing.img")),
        path(&dir.join("s.sock")),
    );
    for (bad, needle) in [
        (["--page-size", "3000"], "page_size_bytes = 3000"),
        (["--group-size", "5000"], "group_size_bytes = 5000"),
        (["--order", "fifo"], "\"fifo\""),
        (["--rate", "fast"], "\"fast\""),
        (["--admission", "some"], "admission policy \"some\""),
        (
            ["--critical", "wal"],
            "--critical wal: no export is called \"wal\" (the exports: disk)",
        ),
        (
            ["--export-admission", "wal=cp"],
            "no export is called \"wal\" (the exports: disk)",
        ),
        (["--export-admission", "disk"], "expected EXPORT=POLICY"),
        (
            ["--export-admission", "disk=cpx"],
            "admission policy \"cpx\"",
        ),
        (["--sequential-cutoff", "4X"], "\"4X\""),
        (["--export", "bad"], "expected NAME=BACKING"),
        (["--cache-sync", "sometimes"], "\"sometimes\""),
        (["--block-size", "3"], "\"3\" is not a power of two"),
        (
            ["--flush-interval", "7200"],
            "\"7200\" is not a number of seconds",
        ),
        (
            ["--flush-interval", "soon"],
            "\"soon\" is not a number of seconds",
        ),
        (["--cache-format", "4"], "--cache-format"),
    ] {
        let mut args = vec![
            "serve",
            "--socket",
            &socket_s,
            "--cache",
            &cache_s,
            "--backing",
            &backing_s,
            "--cache-size",
            "16M",
            "--backing-size",
            "16M",
        ];
        args.extend(bad);
        fails_naming(&args, needle);
        // A formatted cache with the bad setting would refuse the next,
        // correct start.
        assert!(!cache.exists(), "{bad:?} created the cache device");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Format 3 on a cache in memory (it has no format): refused by name.
#[test]
fn format_3_refuses_a_cache_in_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backing = dir.path().join("backing.img").display().to_string();
    let socket = dir.path().join("s.sock").display().to_string();
    let args = [
        "serve",
        "--socket",
        &socket,
        "--cache",
        "mem",
        "--backing",
        &backing,
        "--cache-size",
        "16M",
        "--backing-size",
        "16M",
        "--cache-format",
        "3",
        "--write-policy",
        "write-through",
    ];
    fails_naming(&args, "format 3 needs a cache file or device");
}

/// `--help` lists each policy family (and the workloads) from its registry,
/// with the same names that parsing accepts.
#[test]
fn help_lists_the_policies_of_each_family() {
    let sim = succeeds(&["sim", "--help"]);
    for line in [
        "wow: CSCAN skipping groups written since the pointer passed",
        "adaptive: the linear threshold with WOW's adaptive high watermark",
        "write-through (wt): acknowledged once cache and backing hold the write",
        "arc: ARC: adaptive between recency and frequency",
        "all: admit every write",
        "redislike: Redis-like: AOF, snapshots",
    ] {
        assert!(sim.contains(line), "sim --help lacks {line:?}: {sim}");
    }
    let serve = succeeds(&["serve", "--help"]);
    assert!(
        serve.contains("lrw: least recently written group first"),
        "{serve}"
    );
    assert!(serve.contains("write-around (wa):"), "{serve}");
}

/// A socket that cannot be bound refuses the start before the cache device
/// is formatted or opened (recovery would rewrite its superblock).
#[test]
fn an_unbindable_socket_refuses_before_the_cache_is_touched() {
    let dir = std::env::temp_dir().join(format!("wcache-bad-socket-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("cache.img");
    let socket = dir.join("missing").join("w.sock");
    fails_naming(
        &[
            "serve",
            "--socket",
            socket.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
            "--backing",
            dir.join("backing.img").to_str().unwrap(),
            "--cache-size",
            "16M",
            "--backing-size",
            "16M",
        ],
        &format!("cannot listen on {}", socket.display()),
    );
    assert!(
        !cache.exists(),
        "the refused start created the cache device"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn refused_trace_requests_are_reported_not_dropped_silently() {
    // The second write (32 MiB) is larger than the 16 MiB cache.
    let (dir, path) = temp_file(
        "big.csv",
        "128166372003061629,h,0,Write,4096,4096,10\n\
         128166372003061630,h,0,Write,0,33554432,10\n\
         128166372003061631,h,0,Read,4096,4096,10\n",
    );
    let p = path.to_str().unwrap();
    let stdout = succeeds(&["sim", "--workload", "trace", "--trace", p]);
    assert!(
        stdout.contains("rejected            1 requests"),
        "{stdout}"
    );
    assert!(stdout.contains("larger than the whole cache"), "{stdout}");
    assert!(stdout.contains("no request was measured"), "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn timeline_is_written_for_one_run_and_refused_for_an_experiment() {
    let (dir, path) = temp_file("timeline.csv", "");
    let p = path.to_str().unwrap();
    fails_naming(
        &["sim", "wow-random", "--quick", "--timeline", p],
        "--timeline records one run",
    );
    succeeds(&[
        "sim",
        "--requests",
        "2000",
        "--timeline",
        p,
        "--timeline-ms",
        "10",
    ]);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("t_s,measuring,dirty_pages,"));
    let rows: Vec<&str> = lines.collect();
    assert!(rows.len() > 10, "{text}");
    assert!(rows.iter().all(|r| r.split(',').count() == 11), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_experiment_runs_on_the_stripe_cache_array_when_asked() {
    let (dir, path) = temp_file("wow-spc1.csv", "");
    let out = dir.to_str().unwrap();
    succeeds(&[
        "sim",
        "wow-spc1",
        "--quick",
        "--backend",
        "raid5-md",
        "--out",
        out,
    ]);
    let csv = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert!(rows.iter().any(|r| r.contains(",raid5-md,")), "{csv}");
    assert!(!rows.iter().any(|r| r.contains(",raid5,")), "{csv}");
    assert!(dir.join("wow-spc1-raid5-md.svg").exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// An experiment's CSV carries the disks' queue depth and their mechanism
/// time per operation, and WOW's skip count; `--disk-queue-depth` changes
/// the first and slows the disks.
#[test]
fn experiment_rows_carry_disk_mechanism_and_skips() {
    let column = |csv: &str, name: &str| -> Vec<String> {
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}"));
        lines
            .map(|l| l.split(',').nth(i).unwrap().to_string())
            .collect()
    };
    let run = |depth: &str| {
        let (dir, _) = temp_file(&format!("qd{depth}-wow-random.csv"), "");
        let out = dir.join("out");
        succeeds(&[
            "sim",
            "wow-random",
            "--quick",
            "--disk-queue-depth",
            depth,
            "--out",
            out.to_str().unwrap(),
        ]);
        let csv = std::fs::read_to_string(out.join("wow-random.csv")).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        csv
    };
    let deep = run("32");
    let shallow = run("1");
    assert!(column(&deep, "disk_queue_depth").iter().all(|d| d == "32"));
    assert!(column(&shallow, "disk_queue_depth")
        .iter()
        .all(|d| d == "1"));
    let mean = |csv: &str, name: &str| {
        let v: Vec<f64> = column(csv, name)
            .iter()
            .map(|x| x.parse().unwrap())
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    for csv in [&deep, &shallow] {
        let service = column(csv, "disk_write_ms");
        let position = column(csv, "disk_write_position_ms");
        for (s, p) in service.iter().zip(&position) {
            let (s, p): (f64, f64) = (s.parse().unwrap(), p.parse().unwrap());
            assert!(p > 0.0 && p < s, "positioning {p} of service {s}");
        }
    }
    assert!(
        mean(&shallow, "disk_write_position_ms") > mean(&deep, "disk_write_position_ms"),
        "arrival order positions longer than SATF"
    );
    let policies = column(&deep, "policy");
    let skips = column(&deep, "destage_skips");
    for (policy, skips) in policies.iter().zip(&skips) {
        if policy != "wow" {
            assert_eq!(skips, "0", "{policy} never skips");
        }
    }
}

/// Ordered write-back in the simulator says how the backing fared at crashes.
#[test]
fn ordered_write_back_reports_the_point_in_time_check() {
    // In the simulator it runs, and says how the backing fared at crashes.
    let out = succeeds(&[
        "sim",
        "--backend",
        "ssd",
        "--cache-pages",
        "32",
        "--group-size",
        "16384",
        "--write-policy",
        "wb-o",
        "--footprint",
        "256K",
        "--requests",
        "1000",
        "--warmup",
        "0",
        "--faults",
        "crashes=2",
        "--crash-at",
        "150",
        "--check",
    ]);
    assert!(
        out.contains("the backing alone was consistent at all 2 crashes"),
        "{out}"
    );
}

/// The application workloads refuse options that do not apply to them,
/// and a CPU time the virtual clock cannot hold, by name.
#[test]
fn application_workload_options_name_what_is_wrong() {
    let app = |extra: &[&'static str]| -> Vec<&'static str> {
        ["sim", "--requests", "100"]
            .iter()
            .chain(extra)
            .copied()
            .collect()
    };
    fails_naming(
        &app(&["--workload", "pglike", "--cpu-us", "1e30"]),
        "cpu_us_mean: 1000000000000000000000000000000 (must be 0 to 10000000",
    );
    fails_naming(
        &app(&["--workload", "redislike", "--cpu-us=-0.5"]),
        "cpu_us_mean: -0.5",
    );
    fails_naming(
        &app(&["--workload", "random", "--cpu-us", "5"]),
        "--cpu-us applies to --workload pglike and redislike only, not random",
    );
    fails_naming(
        &app(&["--workload", "pglike", "--footprint", "1M"]),
        "--footprint does not apply to --workload pglike",
    );
    fails_naming(
        &app(&["--workload", "pglike", "--outstanding", "300"]),
        "backends: 300 (must be 1..=200)",
    );
}

#[test]
fn admission_options_name_what_is_wrong() {
    let sim = [
        "sim",
        "--backend",
        "hdd",
        "--footprint",
        "16M",
        "--requests",
        "200",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        sim.iter().chain(extra).copied().collect()
    };
    // An unknown policy lists the registry's names.
    fails_naming(&with(&["--admission", "cpx"]), "cp-pi");
    fails_naming(
        &with(&["--issuers", "2", "--critical-issuers", "3"]),
        "critical issuers (3) exceed the issuers (2)",
    );
    fails_naming(&with(&["--sync-fraction", "0.5"]), "needs issuers");
    fails_naming(
        &with(&["--workload", "spc1", "--issuers", "4"]),
        "--workload random only, not spc1",
    );
    // A valid run prints the admission lines: cp caches only critical sync writes.
    let out = succeeds(&with(&[
        "--admission",
        "cp",
        "--issuers",
        "4",
        "--critical-issuers",
        "1",
        "--sync-fraction",
        "1",
        "--warmup",
        "0",
    ]));
    assert!(out.contains("admission           cp: "), "{out}");
    assert!(out.contains("critical writes"), "{out}");
    // The volume policy admits the writes of volumes named critical.
    let out = succeeds(&with(&["--admission", "volume", "--critical-volumes", "0"]));
    assert!(out.contains("bypasses            0"), "{out}");
}

/// The arguments `lead` then `rest`.
fn joined<'a>(lead: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    lead.iter().chain(rest).copied().collect()
}

/// Options a workload cannot take, a workload without its trace and an
/// unknown workload are refused, each by a message naming what is wrong.
#[test]
fn workload_options_that_do_not_apply_are_refused() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["pglike", "--target-iops", "100"],
            "--workload pglike is a closed loop of clients (--outstanding); --target-iops does not apply",
        ),
        (
            &["redislike", "--target-iops", "100"],
            "--workload redislike is a closed loop of clients (--outstanding); --target-iops does not apply",
        ),
        (
            &["fileserver", "--target-iops", "100"],
            "--workload fileserver is a closed loop (one request per stream, --outstanding streams); --target-iops does not apply",
        ),
        (&["trace"], "--workload trace needs --trace FILE"),
        (
            &["trace", "--trace", "t.csv", "--trace-format", "bad"],
            "unknown trace format `bad`; valid formats: msr, blkparse, libcachesim, tencent",
        ),
        (
            &["foo"],
            "unknown workload \"foo\"; valid: random, spc1, trace, fileserver, pglike, redislike",
        ),
        (
            &["fileserver", "--cpu-us", "5"],
            "--cpu-us applies to --workload pglike and redislike only, not fileserver",
        ),
        (
            &["redislike", "--footprint", "1M"],
            "--footprint does not apply to --workload redislike: the application's data and logs have their sizes (docs/workloads.md)",
        ),
        (
            &["pglike", "--issuers", "4"],
            "--issuers, --critical-issuers, --sync-fraction apply to --workload random only, not pglike",
        ),
    ];
    for (args, needle) in cases {
        fails_naming(
            &joined(&["sim", "--requests", "100", "--workload"], args),
            needle,
        );
    }
}

/// The report's first line names the workload with its own parameters and
/// the footprint it touches: `--footprint` (or the whole backing), or the
/// volumes a workload lays out itself.
#[test]
fn the_report_names_each_workload_and_its_footprint() {
    let (dir, trace) = temp_file("label.csv", "1,h,0,Write,0,4096,10\n2,h,0,Read,0,4096,10\n");
    let trace = trace.to_str().expect("utf-8 path");
    let cases: [(&[&str], &str); 7] = [
        (
            &["--workload", "random", "--footprint", "64M"],
            "random on raid5 (65536 KiB footprint)",
        ),
        (
            &["--workload", "spc1", "--footprint", "64M"],
            "spc1 (hrrw generator, 60 BSUs) on raid5 (65536 KiB footprint)",
        ),
        (
            &[
                "--workload",
                "spc1",
                "--hrrw",
                "reference",
                "--footprint",
                "64M",
            ],
            "workload            spc1 on raid5 (65536 KiB footprint)",
        ),
        (
            &[
                "--workload",
                "trace",
                "--trace",
                trace,
                "--footprint",
                "64M",
            ],
            "trace on raid5 (65536 KiB footprint)",
        ),
        (
            &[
                "--workload",
                "fileserver",
                "--files",
                "200",
                "--outstanding",
                "4",
            ],
            "fileserver (200 files, 4 streams) on raid5 (93688 KiB footprint)",
        ),
        (
            &["--workload", "pglike", "--backend", "hdd-per-volume"],
            "pglike (24 backends) on hdd-per-volume (1343488 KiB footprint)",
        ),
        (
            &["--workload", "redislike", "--outstanding", "10"],
            "redislike (10 clients) on raid5",
        ),
    ];
    for (args, expected) in cases {
        let stdout = succeeds(&joined(
            &["sim", "--warmup", "0", "--requests", "200"],
            args,
        ));
        let first = stdout.lines().next().unwrap_or_default();
        assert!(first.contains(expected), "{args:?}: {first:?}");
    }
    std::fs::remove_dir_all(dir).expect("remove the trace");
}
