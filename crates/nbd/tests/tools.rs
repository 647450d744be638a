//! Real clients against a `MemExport` server: libnbd's `nbdinfo` and
//! `nbdcopy` (Debian package libnbd-bin) and `fio`'s nbd engine. Each test
//! prints a skip reason when its tool is missing, unless
//! `WCACHE_REQUIRE_TOOLS=1`, in which case a missing tool fails the test.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::{pattern, start_unix, TempDir};
use wcache_nbd::{Export, MemExport};

const MIB: u64 = 1024 * 1024;

/// Path of `name` on PATH, or `None` after printing why the test is skipped.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        let required = std::env::var("WCACHE_REQUIRE_TOOLS").is_ok_and(|v| v == "1");
        assert!(!required, "{name} is required (WCACHE_REQUIRE_TOOLS=1) but not installed; apt-get install {package}");
        eprintln!("SKIP: {name} not installed (apt-get install {package}); set WCACHE_REQUIRE_TOOLS=1 to fail instead");
    }
    found
}

fn uri(socket: &Path, name: &str) -> String {
    format!("nbd+unix:///{name}?socket={}", socket.display())
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("spawn tool");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{command:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    stdout
}

/// Whitespace-insensitive check that the JSON text holds `"key": value`.
fn json_has(json: &str, key: &str, value: &str) -> bool {
    let compact: String = json.chars().filter(|c| !c.is_whitespace()).collect();
    compact.contains(&format!("\"{key}\":{value}"))
}

#[test]
fn nbdinfo_reports_size_block_sizes_and_flags() {
    let Some(nbdinfo) = tool("nbdinfo", "libnbd-bin") else {
        return;
    };
    let dir = TempDir::new("nbdinfo");
    let disk: Arc<dyn Export> = Arc::new(MemExport::new(16 * MIB, 4096));
    let other: Arc<dyn Export> = Arc::new(MemExport::new(MIB, 512).with_multi_conn(false));
    let server = start_unix(&dir.socket(), vec![("disk", disk), ("other", other)]);

    let json = run(Command::new(&nbdinfo)
        .arg("--json")
        .arg(uri(&dir.socket(), "disk")));
    assert!(
        json_has(&json, "export-size", &(16 * MIB).to_string()),
        "{json}"
    );
    assert!(json_has(&json, "block_size_minimum", "4096"), "{json}");
    assert!(json_has(&json, "block_size_preferred", "4096"), "{json}");
    assert!(json_has(&json, "block_size_maximum", "33554432"), "{json}");
    assert!(json_has(&json, "can_multi_conn", "true"), "{json}");
    assert!(json_has(&json, "can_flush", "true"), "{json}");
    assert!(json_has(&json, "can_fua", "true"), "{json}");
    assert!(json_has(&json, "can_trim", "true"), "{json}");
    assert!(json_has(&json, "can_zero", "true"), "{json}");
    assert!(json_has(&json, "is_read_only", "false"), "{json}");

    let json = run(Command::new(&nbdinfo)
        .arg("--json")
        .arg(uri(&dir.socket(), "other")));
    assert!(json_has(&json, "can_multi_conn", "false"), "{json}");

    let list = run(Command::new(&nbdinfo)
        .arg("--list")
        .arg("--json")
        .arg(uri(&dir.socket(), "")));
    assert!(json_has(&list, "export-name", "\"disk\""), "{list}");
    assert!(json_has(&list, "export-name", "\"other\""), "{list}");
    server.stop();
}

#[test]
fn nbdcopy_round_trips_a_file() {
    let Some(nbdcopy) = tool("nbdcopy", "libnbd-bin") else {
        return;
    };
    let dir = TempDir::new("nbdcopy");
    let size_bytes = 24 * MIB;
    let export = Arc::new(MemExport::new(size_bytes, 512));
    let server = start_unix(&dir.socket(), vec![("disk", export)]);
    let source = dir.0.join("source.img");
    let back = dir.0.join("back.img");
    let mut data = pattern(size_bytes as usize, 17);
    // A hole in the middle exercises zero detection in nbdcopy.
    data[(4 * MIB) as usize..(8 * MIB) as usize].fill(0);
    std::fs::write(&source, &data).expect("write source");
    let target = uri(&dir.socket(), "disk");
    run(Command::new(&nbdcopy)
        .arg("--flush")
        .arg(&source)
        .arg(&target));
    std::fs::File::create(&back).expect("create back");
    run(Command::new(&nbdcopy).arg(&target).arg(&back));
    let copied = std::fs::read(&back).expect("read back");
    assert_eq!(copied.len(), data.len());
    assert!(copied == data, "nbdcopy round trip differs");
    server.stop();
}

#[test]
fn fio_randwrite_with_crc32c_verify() {
    let Some(fio) = tool("fio", "fio") else {
        return;
    };
    let engines = run(Command::new(&fio).arg("--enghelp"));
    if !engines.contains("nbd") {
        let required = std::env::var("WCACHE_REQUIRE_TOOLS").is_ok_and(|v| v == "1");
        assert!(!required, "fio lacks the nbd engine");
        eprintln!("SKIP: this fio has no nbd engine");
        return;
    }
    let dir = TempDir::new("fio");
    let export = Arc::new(MemExport::new(64 * MIB, 512));
    let server = start_unix(&dir.socket(), vec![("disk", export)]);
    let output = run(Command::new(&fio)
        .current_dir(&dir.0)
        .arg("--name=wcache-nbd-verify")
        .arg("--ioengine=nbd")
        .arg(format!("--uri={}", uri(&dir.socket(), "disk")))
        .arg("--rw=randwrite")
        .arg("--bs=4k")
        .arg("--size=32M")
        .arg("--iodepth=32")
        .arg("--verify=crc32c")
        .arg("--do_verify=1")
        .arg("--verify_fatal=1")
        .arg("--verify_state_save=0")
        .arg("--output-format=terse")
        .arg("--terse-version=3"));
    // Terse v3 (1-based): field 5 is the error code, field 6 the KiB read
    // (the verify pass), field 47 the KiB written.
    let line = output
        .lines()
        .find(|l| l.starts_with("3;"))
        .expect("terse line");
    let fields: Vec<&str> = line.split(';').collect();
    assert_eq!(fields.get(4), Some(&"0"), "fio reported an error: {line}");
    assert_eq!(
        fields.get(5),
        Some(&"32768"),
        "verify read all data: {line}"
    );
    assert_eq!(fields.get(46), Some(&"32768"), "wrote all data: {line}");
    server.stop();
}
