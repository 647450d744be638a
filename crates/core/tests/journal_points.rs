//! Journaled write-back under declared consistency points, format 2: the
//! open transaction commits at a point, and otherwise only (counted as
//! forced) when nothing but its commit can make the room a write waits for.

mod common;

use common::{Bench, PAGE};
use wcache_core::config::{ConsistencyPoints, JournalConfig};
use wcache_core::time::Nanos;
use wcache_core::{EngineConfig, IoCommand, WritePolicyKind};

/// Eight persistent slots, points declared by hints.
fn bench() -> Bench {
    Bench::with(EngineConfig {
        cache_slots: 8,
        group_size_bytes: 4 * PAGE,
        persistent: true,
        write_policy: WritePolicyKind::JournaledWriteBack,
        journal: JournalConfig {
            points: ConsistencyPoints::Hint,
            ..JournalConfig::default()
        },
        ..EngineConfig::default()
    })
}

fn is_free(c: &IoCommand) -> bool {
    matches!(c, IoCommand::FreeSlots { .. })
}

/// A write that waits for the frees of stale versions gets its room from
/// them, not from a commit that would cut the open transaction between
/// points (format 2 committed on any such stall: a lost cache then left
/// half an application's epoch on the backing).
#[test]
fn a_write_waiting_for_frees_does_not_commit_the_open_transaction() {
    let mut b = bench();
    // Pages 0..4 twice in the open transaction: the second versions
    // replace the first, which are stale and reusable only once freed on
    // the cache device.
    for byte in [1, 2] {
        for p in 0..4 {
            b.write(p, byte, 0);
        }
        b.complete_while(|c| !is_free(c));
    }
    let waiting = b.write(4, 2, 0);
    assert!(!b.answered(waiting));
    assert_eq!(b.e.stats().stalls, 1, "the fifth page waits for a slot");
    assert!(
        b.cmds.iter().any(is_free),
        "the frees go at once: {:?}",
        b.cmds
    );
    assert_eq!(b.e.journal_forced_commits(), 0, "the stall committed");
    b.complete_while(|_| true);
    assert!(b.answered(waiting));
    assert_eq!(b.e.journal_forced_commits(), 0);
    // Nothing reached the backing before the point; all of it after.
    assert_eq!(b.backing_byte(0), 0);
    b.e.consistency_point(Nanos(0)).unwrap();
    b.pump();
    b.drain();
    assert_eq!(b.e.journal_forced_commits(), 0);
    assert_eq!((b.backing_byte(0), b.backing_byte(4)), (2, 2));
}

/// When the open transaction itself fills the cache, only its commit makes
/// room: it is forced, and counted.
#[test]
fn a_write_the_open_transaction_leaves_no_room_for_forces_a_commit() {
    let mut b = bench();
    for p in 0..8 {
        b.write(p, 3, 0);
    }
    b.complete_while(|_| true);
    assert_eq!(b.e.journal_forced_commits(), 0);
    let waiting = b.write(8, 3, 0);
    assert_eq!(b.e.journal_forced_commits(), 1);
    b.complete_while(|_| true);
    assert!(b.answered(waiting));
    assert_eq!(b.backing_byte(7), 3, "the forced transaction checkpointed");
}

/// A drain under points commits the open transaction without a declared
/// point: counted, as the backing may stop there.
#[test]
fn a_drain_counts_its_commit_as_undeclared() {
    let mut b = bench();
    b.write(0, 4, 0);
    b.complete_while(|_| true);
    b.drain();
    assert_eq!(b.e.journal_forced_commits(), 1);
    assert_eq!(b.backing_byte(0), 4);
}
