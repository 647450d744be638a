//! The consistency grid (Koller et al., FAST'13 Fig. 10), measured: for each
//! write policy and failure mode, whether the state after recovery keeps
//! every acknowledged write (Tx-C) and whether it is a state the writes'
//! order allows (PiT-C; with consistency points, the state of a declared
//! point, App-C), each over many seeded crash runs.

use crate::crash_case::CrashCase;
use wcache_core::WritePolicyKind;

/// Requests per crash run.
const REQUESTS: u64 = 600;

/// A failure mode and the fault plan that makes it.
struct Failure {
    name: &'static str,
    faults: &'static str,
    cache_lost: bool,
}

const FAILURES: [Failure; 3] = [
    Failure {
        name: "process crash",
        faults: "spike=0.02:5",
        cache_lost: false,
    },
    Failure {
        name: "host crash, cache intact",
        faults: "torn,spike=0.02:5",
        cache_lost: false,
    },
    Failure {
        name: "cache device lost",
        faults: "torn,lose-cache,spike=0.02:5",
        cache_lost: true,
    },
];

/// The rows: a label, the write policy, and consistency points by hint
/// every this many answered writes (0: none; with points, the PiT-C cells
/// check App-C, the state of a declared point).
pub const ROWS: [(&str, WritePolicyKind, u64); 6] = [
    ("write-through", WritePolicyKind::WriteThrough, 0),
    ("write-back", WritePolicyKind::WriteBack, 0),
    ("write-back-ordered", WritePolicyKind::OrderedWriteBack, 0),
    (
        "write-back-journaled",
        WritePolicyKind::JournaledWriteBack,
        0,
    ),
    (
        "write-back-journaled, hints (App-C)",
        WritePolicyKind::JournaledWriteBack,
        8,
    ),
    ("write-around", WritePolicyKind::WriteAround, 0),
];

/// Seeds (of `seeds`) whose runs pass with `extra` added to `failure`'s faults.
fn passing(row: (&str, WritePolicyKind, u64), failure: &Failure, extra: &str, seeds: u64) -> u64 {
    let (_, policy, point_every) = row;
    (1..=seeds)
        .filter(|&seed| {
            let faults = format!("{},{extra}", failure.faults);
            let mut case = CrashCase::with_faults(policy, seed, REQUESTS, &faults);
            case.point_every = point_every;
            case.run().is_ok()
        })
        .count() as u64
}

fn cell(passed: u64, seeds: u64) -> String {
    if passed == seeds {
        format!("yes ({passed}/{seeds})")
    } else {
        format!("**no** ({passed}/{seeds})")
    }
}

/// The grid as a markdown table, `seeds` crash runs per cell.
///
/// Tx-C: after recovery every read returns the last acknowledged write,
/// even with the cache lost (`strict`). PiT-C: with the cache intact,
/// recovery serves every acknowledged write, so the state is the latest
/// one (PiT-C follows from Tx-C, and is measured as such); with the cache
/// lost, the backing alone must pass the point-in-time check (`pit`).
pub fn markdown(seeds: u64) -> String {
    let mut out = String::from("| policy |");
    for f in &FAILURES {
        out.push_str(&format!(" {}: Tx-C | {}: PiT-C |", f.name, f.name));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|---|".repeat(FAILURES.len()));
    out.push('\n');
    for row in ROWS {
        out.push_str(&format!("| {} |", row.0));
        for f in &FAILURES {
            let tx = passing(row, f, "strict", seeds);
            let pit = if f.cache_lost {
                passing(row, f, "pit", seeds)
            } else {
                tx
            };
            out.push_str(&format!(" {} | {} |", cell(tx, seeds), cell(pit, seeds)));
        }
        out.push('\n');
    }
    out
}
