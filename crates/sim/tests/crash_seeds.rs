//! Crash seeds: for each write policy, many seeds of a small persistent run
//! with faults (EIO on both devices, latency spikes, torn writes, a lost
//! cache device) and a crash at a device write chosen by the seed; after
//! recovery every read must return the last acknowledged write and, after
//! the final drain, the backing must hold every acknowledged write (under
//! write-back, unless the cache device itself was lost). A failing seed is
//! printed with the `wcache sim` command that replays it.

use wcache_core::WritePolicyKind;
use wcache_sim::crash_case::CrashCase;

/// Seeds per write policy (`CRASH_SEEDS` for a longer soak).
fn seeds() -> u64 {
    std::env::var("CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

const REQUESTS: u64 = 1000;

/// Runs `count` seeds; returns the first failure (the case and its error)
/// and totals (crashes, sectors checked, torn writes, EIO, bypasses,
/// point-in-time checks).
fn run_seeds(
    policy: WritePolicyKind,
    count: u64,
    extra: &str,
) -> (Option<(CrashCase, String)>, [u64; 6]) {
    run_seeds_on(policy, count, extra, false)
}

/// `run_seeds` with the cache device as format 3 (`log`) or not.
fn run_seeds_on(
    policy: WritePolicyKind,
    count: u64,
    extra: &str,
    log: bool,
) -> (Option<(CrashCase, String)>, [u64; 6]) {
    let mut totals = [0u64; 6];
    for seed in 1..=count {
        let mut case = CrashCase::for_seed(policy, seed, REQUESTS, extra);
        case.log = log;
        match case.run() {
            Ok(r) => {
                totals[0] += r.faults.crashes;
                totals[1] += r.sectors_checked + r.backing_sectors_checked;
                totals[2] += r.faults.torn_writes;
                totals[3] += r.faults.eio;
                if case.sequential_cutoff_bytes > 0 {
                    totals[4] += r.stats.write_bypasses;
                }
                totals[5] += r.order_checks;
            }
            Err(e) => return (Some((case, e.to_string())), totals),
        }
    }
    (None, totals)
}

fn every_seed_keeps_acknowledged_writes(policy: WritePolicyKind) {
    every_seed_keeps_acknowledged_writes_on(policy, seeds(), false);
}

fn every_seed_keeps_acknowledged_writes_on(policy: WritePolicyKind, count: u64, log: bool) {
    let (failure, [crashes, checked, torn, eio, bypasses, pit]) =
        run_seeds_on(policy, count, "", log);
    if let Some((case, error)) = failure {
        panic!(
            "{policy:?} seed {} failed: {error}\nreplay: {}",
            case.seed,
            case.command_line()
        );
    }
    // The seeds must exercise what they claim to.
    assert!(
        crashes > count * 3 / 4,
        "{policy:?}: only {crashes} crashes"
    );
    assert!(torn > count / 2, "{policy:?}: only {torn} torn writes");
    assert!(eio > count, "{policy:?}: only {eio} EIO");
    assert!(
        checked > count * 1000,
        "{policy:?}: only {checked} sectors checked"
    );
    if matches!(
        policy,
        WritePolicyKind::OrderedWriteBack | WritePolicyKind::JournaledWriteBack
    ) {
        // Every crash checks the backing alone; ordered and journaled
        // write-back admit every write (no cutoff).
        assert_eq!(
            pit, crashes,
            "{policy:?}: {pit} of {crashes} crashes checked"
        );
    } else {
        // The seeds with a sequential cutoff mix bypasses with cached writes.
        assert!(bypasses > count, "{policy:?}: only {bypasses} bypasses");
    }
    println!(
        "{policy:?}{}: {count} seeds, {crashes} crashes, {torn} torn writes, {eio} EIO, {checked} sectors checked, {bypasses} bypasses under a cutoff, {pit} point-in-time checks",
        if log { " (format 3)" } else { "" }
    );
}

#[test]
fn write_back_seeds_keep_acknowledged_writes() {
    every_seed_keeps_acknowledged_writes(WritePolicyKind::WriteBack);
}

#[test]
fn write_through_seeds_keep_acknowledged_writes() {
    every_seed_keeps_acknowledged_writes(WritePolicyKind::WriteThrough);
}

/// Ordered write-back: every crash loses the cache, and the backing alone
/// must be point-in-time consistent (besides every read being right).
#[test]
fn ordered_write_back_seeds_keep_the_backing_consistent() {
    every_seed_keeps_acknowledged_writes(WritePolicyKind::OrderedWriteBack);
}

/// Journaled write-back: the backing alone (its committed journal
/// transaction replayed) must be point-in-time consistent at every crash,
/// with checkpoints through a backing journal or the NVRAM model.
#[test]
fn journaled_write_back_seeds_keep_the_backing_consistent() {
    every_seed_keeps_acknowledged_writes(WritePolicyKind::JournaledWriteBack);
}

/// The point-in-time check can fail: plain write-back destages out of
/// order, so with the cache lost its backing is soon a state no order of
/// the writes allows.
#[test]
fn plain_write_back_fails_the_point_in_time_check() {
    let (failure, _) = run_seeds(WritePolicyKind::WriteBack, 200, "pit");
    let (case, error) =
        failure.expect("plain write-back's backing is not point-in-time consistent");
    assert!(
        error.contains("not point-in-time consistent"),
        "seed {}: {error}",
        case.seed
    );
    assert!(
        case.command_line().contains("pit"),
        "{}",
        case.command_line()
    );
}

/// Format 3 (a log of batches): every policy; under ordered and journaled
/// write-back the backing alone is checked point-in-time consistent at
/// every crash, as on format 2.
#[test]
fn format_3_seeds_keep_acknowledged_writes() {
    for policy in [
        WritePolicyKind::WriteBack,
        WritePolicyKind::WriteThrough,
        WritePolicyKind::WriteAround,
        WritePolicyKind::OrderedWriteBack,
        WritePolicyKind::JournaledWriteBack,
    ] {
        every_seed_keeps_acknowledged_writes_on(policy, seeds() / 2, true);
    }
}

/// Format 3: one script crashed at every device write.
#[test]
fn every_crash_point_of_one_script_keeps_acknowledged_writes_on_format_3() {
    for policy in [WritePolicyKind::WriteBack, WritePolicyKind::WriteThrough] {
        let mut case = CrashCase::for_seed(policy, 11, 400, "");
        case.faults = "torn".into();
        case.log = true;
        let points = crash_points(&case);
        assert!(points > 150, "{policy:?}: only {points} crash points");
        println!("{policy:?} (format 3): {points} crash points");
    }
}

#[test]
fn write_around_seeds_keep_acknowledged_writes() {
    every_seed_keeps_acknowledged_writes(WritePolicyKind::WriteAround);
}

/// A planted bug: a cache device that reports writes durable but loses its
/// last 16 at a crash (`lie=16`) breaks write-back's promise; the seeds
/// must find it and name a command that replays the failure.
#[test]
fn a_cache_device_that_lies_about_durability_is_caught() {
    let (failure, _) = run_seeds(WritePolicyKind::WriteBack, 200, "lie=16");
    let (case, error) = failure.expect("a lying cache device loses acknowledged writes");
    assert!(
        error.contains("data integrity violated"),
        "seed {}: {error}",
        case.seed
    );
    let command = case.command_line();
    assert!(
        command.contains(&format!("--seed {} ", case.seed)),
        "{command}"
    );
    assert!(command.contains("lie=16"), "{command}");
    // The same case fails the same way again.
    let again = case.run().expect_err("a replay fails too").to_string();
    assert_eq!(again, error);
    println!("caught at seed {}: {error}\nreplay: {command}", case.seed);
}

/// Crash points: one script per write policy, crashed at device write k for
/// every k from 1 until the script finishes without reaching k.
#[test]
fn every_crash_point_of_one_script_keeps_acknowledged_writes() {
    for policy in [
        WritePolicyKind::WriteBack,
        WritePolicyKind::WriteThrough,
        WritePolicyKind::WriteAround,
        // Their backing alone is checked point-in-time consistent at each crash too.
        WritePolicyKind::OrderedWriteBack,
        WritePolicyKind::JournaledWriteBack,
    ] {
        let mut case = CrashCase::for_seed(policy, 11, 400, "");
        case.faults = "torn".into();
        let points = crash_points(&case);
        assert!(points > 250, "{policy:?}: only {points} crash points");
        println!("{policy:?}: {points} crash points");
    }
}

/// Runs `case` crashed at device write k for every k from 1 until the
/// script finishes without reaching k; returns how many crashed.
fn crash_points(case: &CrashCase) -> u64 {
    let mut case = case.clone();
    let mut points = 0;
    for k in 1.. {
        case.crash_at = k;
        match case.run() {
            Ok(r) if r.faults.crashes == 0 => break,
            Ok(_) => points += 1,
            Err(e) => panic!(
                "{:?} crash at write {k} failed: {e}\nreplay: {}",
                case.policy,
                case.command_line()
            ),
        }
    }
    points
}
