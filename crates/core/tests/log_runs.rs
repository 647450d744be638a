//! Extents end to end in log mode (format 3): the whole pages of one write
//! that follow each other in the log are one `WritePages` (one command,
//! one completion), and pages that differ (a partial page, another
//! request's bytes) are commands of their own. The devices are the
//! reference interpreter, so the checks are on bytes too.

mod common;

use common::{Bench, PAGE};
use wcache_core::time::Nanos;
use wcache_core::types::PageIndex;
use wcache_core::{EngineConfig, IoCommand, PageBase, RequestKind, Source};

fn bench() -> Bench {
    Bench::with(EngineConfig {
        cache_slots: 256,
        group_size_bytes: 16 * PAGE,
        persistent: true,
        log: true,
        ..EngineConfig::default()
    })
}

/// The page commands of the one `WriteBatch` waiting, in order.
fn batch_pages(b: &Bench) -> Vec<IoCommand> {
    let batches: Vec<&IoCommand> = b
        .cmds
        .iter()
        .filter(|c| matches!(c, IoCommand::WriteBatch { .. }))
        .collect();
    assert_eq!(batches.len(), 1, "one batch: {:?}", b.cmds);
    let IoCommand::WriteBatch { pages, .. } = batches[0] else {
        unreachable!()
    };
    pages.clone()
}

fn is_batch(c: &IoCommand) -> bool {
    matches!(c, IoCommand::WriteBatch { .. })
}

fn write(b: &mut Bench, (offset, len): (u64, u64), byte: u8) -> u64 {
    b.submit_range(0, RequestKind::Write, (offset, len), byte, 0)
}

/// Reads `len` bytes at `offset` of volume 0 to the end.
fn read(b: &mut Bench, (offset, len): (u64, u64)) -> Vec<u8> {
    let id = b.submit_range(0, RequestKind::Read, (offset, len), 0xEE, 0);
    b.complete_while(|_| true);
    assert!(b.answered(id));
    b.bufs[&id].clone()
}

#[test]
fn a_write_of_whole_pages_is_one_page_command_and_reads_back() {
    let mut b = bench();
    let id = write(&mut b, (3 * PAGE, 16 * PAGE), 0xA1);
    let pages = batch_pages(&b);
    assert_eq!(pages.len(), 1, "{pages:?}");
    let IoCommand::WritePages {
        count, first, src, ..
    } = pages[0]
    else {
        panic!("not a run: {pages:?}");
    };
    assert_eq!(count, 16);
    assert_eq!(first.key.page(), PageIndex(3));
    assert!(first.dirty);
    assert!(matches!(
        src,
        Source::Request {
            offset_bytes: 0,
            ..
        }
    ));
    let writes: Vec<_> = pages[0].page_writes(PAGE as u32).collect();
    assert_eq!(writes.len(), 16);
    for (i, w) in writes.iter().enumerate() {
        assert_eq!(w.record.key.page(), PageIndex(3 + i as u64));
        assert_eq!(w.record.seq, first.seq + i as u64);
        assert_eq!(w.base, PageBase::None);
    }
    b.complete_while(is_batch);
    assert!(b.answered(id));
    assert_eq!(b.e.dirty_pages(), 16);
    assert_eq!(
        read(&mut b, (2 * PAGE, 18 * PAGE))[..],
        {
            let mut want = vec![0u8; 18 * PAGE as usize];
            want[PAGE as usize..17 * PAGE as usize].fill(0xA1);
            want
        }[..]
    );
    b.drain();
    assert_eq!(b.backing_byte(3), 0xA1);
    assert_eq!(b.backing_byte(18), 0xA1);
    assert_eq!(b.backing_byte(19), 0);
}

#[test]
fn partial_pages_and_another_requests_pages_are_commands_of_their_own() {
    let mut b = bench();
    // A batch in flight, so the next writes gather in the open one.
    let first = write(&mut b, (0, PAGE), 0x01);
    // Half a page, three whole pages, half a page.
    let a = write(&mut b, (10 * PAGE + PAGE / 2, 4 * PAGE), 0xA2);
    // Pages 15-16: they follow a's last page in the log and on the volume,
    // but their bytes are another request's.
    let c = write(&mut b, (15 * PAGE, 2 * PAGE), 0xC3);
    let batch = b.execute(is_batch);
    b.report(batch);
    assert!(b.answered(first));
    let pages = batch_pages(&b);
    let shape: Vec<(u32, bool)> = pages
        .iter()
        .map(|p| (p.page_count(), matches!(p, IoCommand::WritePages { .. })))
        .collect();
    assert_eq!(
        shape,
        [(1, false), (3, true), (1, false), (2, true)],
        "{pages:?}"
    );
    b.complete_while(is_batch);
    assert!(b.answered(a) && b.answered(c));
    let got = read(&mut b, (10 * PAGE, 7 * PAGE));
    let p = PAGE as usize;
    assert!(got[..p / 2].iter().all(|&x| x == 0));
    assert!(got[p / 2..4 * p + p / 2].iter().all(|&x| x == 0xA2));
    assert!(got[4 * p + p / 2..5 * p].iter().all(|&x| x == 0));
    assert!(got[5 * p..].iter().all(|&x| x == 0xC3));
}

#[test]
fn a_failed_batch_fails_every_page_of_a_run_and_keeps_the_old_bytes() {
    let mut b = bench();
    let old = write(&mut b, (4 * PAGE, 8 * PAGE), 0x0D);
    b.complete_while(is_batch);
    assert!(b.answered(old));
    let new = write(&mut b, (4 * PAGE, 8 * PAGE), 0x1E);
    let k = b.cmds.iter().position(is_batch).expect("a batch");
    let batch = b.cmds.remove(k);
    b.e.handle_completion(Nanos(0), batch.io(), Err(wcache_core::IoError::Io))
        .unwrap();
    let mut failed = false;
    while let Some(r) = b.e.poll_response() {
        assert_eq!(r.id.0, new);
        failed = r.result.is_err();
    }
    assert!(failed, "the write was not answered with its error");
    // The batch goes again, empty, before any later one (after a pause).
    let at = b.e.poll_timeout().expect("a retry timer");
    b.e.handle_timeout(at);
    b.pump();
    assert!(batch_pages(&b).is_empty());
    b.complete_while(is_batch);
    assert_eq!(b.e.dirty_pages(), 8, "the old versions are dirty again");
    assert!(read(&mut b, (4 * PAGE, 8 * PAGE))
        .iter()
        .all(|&x| x == 0x0D));
    b.drain();
    assert_eq!(b.backing_byte(11), 0x0D);
}

/// Writes admitted while the open batch is held share it, with nothing in
/// flight before them: one `WriteBatch` at the release, not one per write
/// (a front end's writes started together: one barrier).
#[test]
fn writes_admitted_while_the_batch_is_held_share_one_batch() {
    let mut b = bench();
    b.e.hold_batch();
    let a = write(&mut b, (2 * PAGE, PAGE), 0xA1);
    let c = write(&mut b, (40 * PAGE, 2 * PAGE), 0xC2);
    b.pump();
    assert!(
        !b.cmds.iter().any(is_batch),
        "no batch while held: {:?}",
        b.cmds
    );
    b.e.release_batch(Nanos(0));
    b.pump();
    let pages = batch_pages(&b);
    let counts: Vec<u32> = pages.iter().map(|p| p.page_count()).collect();
    assert_eq!(counts, [1, 2], "both writes in the one batch: {pages:?}");
    b.complete_while(is_batch);
    assert!(b.answered(a) && b.answered(c));
    assert_eq!(read(&mut b, (40 * PAGE, PAGE))[0], 0xC2);
}

/// A held batch of 64 KiB or more goes at once: holding it would only
/// delay a write whose barrier is a small part of its cost.
#[test]
fn a_large_write_is_not_held() {
    let mut b = bench();
    b.e.hold_batch();
    let a = write(&mut b, (0, 16 * PAGE), 0xB1);
    b.pump();
    assert_eq!(batch_pages(&b).len(), 1, "the batch went while held");
    b.complete_while(is_batch);
    assert!(b.answered(a));
    b.e.release_batch(Nanos(0));
}
