//! `wcache sim --faults SPEC --crash-at K`: a bad SPEC is an error naming
//! the item, and the command a crash case prints runs exactly that case
//! (same faults, same sectors checked, same failure), so a failing seed of
//! the crash seeds test replays from its command line.

use std::process::{Command, Output};
use wcache_core::WritePolicyKind;
use wcache_sim::crash_case::CrashCase;

fn wcache(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_wcache"))
        .args(args)
        .output()
        .expect("run wcache");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "wcache panicked: {stderr}");
    out
}

/// Runs the command line the case prints.
fn run_command_line(case: &CrashCase) -> Output {
    let line = case.command_line();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[0], "wcache");
    wcache(&words[1..])
}

#[test]
fn a_bad_fault_spec_is_an_error_naming_the_item() {
    for (spec, needle) in [
        ("torn,tron", "fault \"tron\": unknown; valid:"),
        (
            "cache-write-eio=2",
            "\"2\" is not a probability between 0 and 1",
        ),
        (
            "backing-read-eio=@0",
            "@K needs a whole number K of at least 1",
        ),
        ("spike=0.1", "expected spike=P:MS"),
        ("lie=many", "N must be a whole number of writes"),
    ] {
        let out = wcache(&["sim", "--requests", "10", "--faults", spec]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec:?} should fail");
        assert!(
            stderr.contains("--faults: ") && stderr.contains(needle),
            "{spec:?}: {stderr}"
        );
    }
    let out = wcache(&["sim", "wow-random", "--quick", "--crash-at", "5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not to a named experiment"));
}

#[test]
fn a_crash_case_command_line_replays_the_case() {
    let case = CrashCase::for_seed(WritePolicyKind::WriteBack, 7, 400, "");
    let report = case.run().expect("the case passes");
    assert_eq!(report.faults.crashes, 1);
    let out = run_command_line(&case);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = report.faults;
    let faults = format!(
        "{} EIO, {} latency spikes, {} crashes ({} torn writes, {} acknowledged",
        f.eio, f.spikes, f.crashes, f.torn_writes, f.lost_writes
    );
    assert!(stdout.contains(&faults), "{faults:?} not in\n{stdout}");
    let checked = format!("data checked        {} sectors", report.sectors_checked);
    assert!(stdout.contains(&checked), "{checked:?} not in\n{stdout}");
}

#[test]
fn a_failing_crash_case_fails_the_same_way_from_the_command_line() {
    let case = CrashCase::for_seed(WritePolicyKind::WriteBack, 1, 400, "lie=16");
    let error = case
        .run()
        .expect_err("a lying cache device loses acknowledged writes");
    let out = run_command_line(&case);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&error.to_string()),
        "{error} not in {stderr}"
    );
}
