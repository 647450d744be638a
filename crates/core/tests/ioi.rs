//! I/O criticality inheritance (Kim et al., ATC'15 §4.2.2, Fig. 3): each
//! way a critical request waits on a bypass write in flight (or on a write
//! admission bypassed that went through the cache) — an overwrite
//! of its page, a FLUSH, an issuer that inherits criticality — promotes it
//! to the cache; the waiter goes on, the late original never lands over
//! newer data, and under policies without IOI the same requests wait. The
//! devices are the reference interpreter, so every check is on bytes.

mod common;

use common::{is_original, Bench, PAGE};
use wcache_core::time::Nanos;
use wcache_core::types::{RequestId, VolumeId};
use wcache_core::{Engine, EngineConfig, IoCommand, IoError, Request, RequestFlags, RequestKind};

/// Fig. 3(b): a critical write to a page under a non-critical bypass
/// goes on at once; the bypass is reissued to the cache, and (with
/// buffers that outlive answers) answered from it; the late original is
/// held off the page's destage, so the backing ends with the newer data.
#[test]
fn a_critical_overwrite_promotes_the_bypass_it_waits_on() {
    for early in [false, true] {
        let mut b = Bench::new("cp-pi-ioi", early, 64);
        let old = b.write(7, 0xB0, 2);
        assert_eq!(b.cmds.len(), 1, "a bypass: one backing write");
        assert!(is_original(&b.cmds[0]));
        let new = b.write(7, 0xC0, 1);
        assert_eq!(b.e.stats().reissued_writes, 1);
        assert_eq!(b.e.stats().stalls, 0, "the critical write did not stall");
        b.complete_while(|c| !is_original(c));
        assert!(
            b.answered(new),
            "the critical write is answered before the original lands"
        );
        assert_eq!(
            b.answered(old),
            early,
            "early answers only where buffers outlive them"
        );
        assert_eq!(
            b.kept.contains(&old),
            early,
            "the answer says its buffer is in use"
        );
        // The newer version is dirty, and is not destaged while the original may land.
        b.e.start_drain();
        b.pump();
        b.complete_while(|c| !is_original(c));
        assert_eq!(
            b.destages(),
            0,
            "a destage went out before the original landed"
        );
        assert_eq!(b.e.dirty_pages(), 1);
        b.complete_while(is_original);
        assert!(b.answered(old));
        assert_eq!(b.e.stats().discarded_completions, early as u64);
        b.complete_while(|_| true);
        assert_eq!(
            b.backing_byte(7),
            0xC0,
            "early {early}: the original landed last"
        );
        assert_eq!(b.e.dirty_pages(), 0);
    }
}

/// Without I/O criticality inheritance the same write waits for the
/// original (the policies' difference the rdc experiments measure).
#[test]
fn under_cp_pi_the_overwrite_waits_for_the_bypass() {
    let mut b = Bench::new("cp-pi", true, 64);
    let old = b.write(7, 0xB0, 2);
    let new = b.write(7, 0xC0, 1);
    assert_eq!(b.e.stats().stalls, 1);
    b.complete_while(|c| !is_original(c));
    assert!(!b.answered(new) && !b.answered(old));
    b.complete_while(|_| true);
    assert!(b.answered(new) && b.answered(old));
    assert_eq!(b.e.stats().reissued_writes, 0);
    b.drain();
    assert_eq!(b.backing_byte(7), 0xC0);
}

/// A FLUSH of a critical issuer promotes every bypass in flight on its
/// volume (the writeback an fsync waits for); a non-critical one, or one
/// on another volume, promotes nothing.
#[test]
fn a_critical_flush_promotes_the_bypasses_of_its_volume() {
    let mut b = Bench::new("cp-pi-ioi", true, 64);
    let w1 = b.write(3, 0x31, 2);
    let w2 = b.write(5, 0x51, 3);
    let other = b.submit(1, RequestKind::Write, 5, 0x77, 2);
    b.submit(0, RequestKind::Flush, 0, 0, 2);
    assert_eq!(
        b.e.stats().reissued_writes,
        0,
        "a non-critical FLUSH waits for nothing"
    );
    b.submit(0, RequestKind::Flush, 0, 0, 1);
    assert_eq!(b.e.stats().reissued_writes, 2);
    b.complete_while(|c| !is_original(c));
    assert!(b.answered(w1) && b.answered(w2), "answered from the cache");
    assert!(!b.answered(other), "volume 1's bypass is not covered");
    b.drain();
    assert_eq!((b.backing_byte(3), b.backing_byte(5)), (0x31, 0x51));
    assert_eq!(b.e.stats().discarded_completions, 2);
}

/// A FLUSH with a range (the mount's fsync of one file: its window)
/// promotes only the bypasses over it; another file's writeback in flight
/// goes on to the backing alone.
#[test]
fn a_critical_flush_with_a_range_promotes_only_the_bypasses_over_it() {
    let mut b = Bench::new("cp-pi-ioi", true, 64);
    let mine = b.write(3, 0x31, 2);
    let other = b.write(9, 0x91, 3);
    b.submit_range(0, RequestKind::Flush, (2 * PAGE, 4 * PAGE), 0, 1);
    assert_eq!(b.e.stats().reissued_writes, 1, "only page 3's bypass");
    b.complete_while(|c| !is_original(c));
    assert!(b.answered(mine), "answered from the cache");
    assert!(!b.answered(other), "outside the range: still on its way");
    b.drain();
    assert_eq!((b.backing_byte(3), b.backing_byte(9)), (0x31, 0x91));
}

/// A promoted bypass answered early whose cached version is then trimmed:
/// the page has no cached version, so a later write to it bypasses again,
/// and must wait for the original still in flight (the client saw the
/// first write acknowledged, so the later one must land last). The engine
/// model's soak found it: the original's zeroes over a later write.
#[test]
fn a_bypass_after_a_trimmed_promoted_write_waits_for_the_original() {
    let mut b = Bench::new("cp-pi-ioi", true, 64);
    let first = b.write(7, 0xB0, 2);
    b.submit(0, RequestKind::Flush, 0, 0, 1);
    assert_eq!(b.e.stats().reissued_writes, 1);
    b.complete_while(|c| !is_original(c));
    assert!(b.answered(first), "answered from the cache");
    let trim = Request {
        id: RequestId(b.next_id),
        volume: VolumeId(0),
        kind: RequestKind::Trim,
        offset_bytes: 7 * PAGE,
        len_bytes: PAGE,
        flags: RequestFlags::default(),
    };
    b.next_id += 1;
    b.e.handle_request(Nanos(0), trim).unwrap();
    b.pump();
    assert_eq!(
        b.e.dirty_pages(),
        0,
        "the trim dropped the promoted version"
    );
    let later = b.write(7, 0xD0, 2);
    let backing_writes = b.cmds.iter().filter(|c| is_original(c)).count();
    assert_eq!(
        backing_writes, 1,
        "the later bypass waits while the original is in flight"
    );
    assert!(!b.answered(later));
    // Whatever order the device picks, the later write lands last.
    b.complete_while(is_original);
    assert!(b.answered(later));
    b.drain();
    assert_eq!(b.backing_byte(7), 0xD0);
}

/// A bypass in flight holds up only writes to its own pages: 2,000
/// critical writes scattered over a 1 GiB volume beside a 256 KiB bypass
/// go on at once. (By filter bucket, as before 2026-11-26, some of them
/// matched the bypass and stalled, and every write queued behind them too:
/// most of the critical stalls in the rdc experiments.)
#[test]
fn a_bypass_holds_up_only_writes_to_its_own_pages() {
    let config = EngineConfig {
        cache_slots: 4096,
        group_size_bytes: 4 * PAGE,
        admission: "cp-pi".into(),
        ..EngineConfig::default()
    };
    let mut e = Engine::new(config).unwrap();
    e.add_volume(1 << 30).unwrap();
    e.set_critical_issuer(1, true).unwrap();
    let write = |e: &mut Engine, id: u64, page: u64, pages: u64, issuer: u32| {
        let req = Request {
            id: RequestId(id),
            volume: VolumeId(0),
            kind: RequestKind::Write,
            offset_bytes: page * PAGE,
            len_bytes: pages * PAGE,
            flags: RequestFlags {
                sync: true,
                issuer,
                ..RequestFlags::default()
            },
        };
        e.handle_request(Nanos(0), req).unwrap();
    };
    write(&mut e, 1, 0, 64, 2);
    assert_eq!(e.stats().write_bypasses, 1);
    for k in 0..2000u64 {
        write(&mut e, 2 + k, 1000 + k * 97, 1, 1);
    }
    assert_eq!(e.stats().stalls, 0, "no critical write waited");
    // One of its own pages does wait.
    write(&mut e, 5000, 40, 1, 1);
    assert_eq!(e.stats().stalls, 1);
}

/// The end of a cascade (Fig. 3(c)): an issuer that inherits criticality
/// has its bypasses in flight promoted, together with any other bypass
/// over the same page (the cached version must hold every byte the backing
/// will); when the cascade ends the issuer's writes bypass again.
#[test]
fn an_issuer_that_inherits_criticality_has_its_bypasses_promoted() {
    let mut b = Bench::new("cp-pi-ioi", true, 64);
    let mine = b.write(9, 0x91, 3);
    let same_page = b.write(9, 0x92, 4);
    let elsewhere = b.write(11, 0xB1, 4);
    assert_eq!(b.e.inherit_criticality(3), Ok(1));
    b.pump();
    assert_eq!(
        b.e.stats().reissued_writes,
        2,
        "its bypass and the one over its page"
    );
    b.complete_while(|c| !is_original(c));
    assert!(b.answered(mine) && b.answered(same_page) && !b.answered(elsewhere));
    assert_eq!(b.e.end_inherited_criticality(3), Ok(0));
    b.write(20, 0x20, 3);
    assert!(
        is_original(b.cmds.last().unwrap()),
        "not critical any more: a bypass"
    );
    b.drain();
    assert_eq!(
        b.backing_byte(9),
        0x92,
        "the later write of the page stays on top"
    );
    assert_eq!(b.backing_byte(11), 0xB1);
}

/// Promotion takes room; with none free or evictable, nothing is
/// promoted and the waiter waits as under CP+PI.
#[test]
fn without_room_nothing_is_promoted() {
    let mut b = Bench::new("cp-pi-ioi", true, 16);
    for page in 100..116 {
        b.write(page, 0x11, 1);
    }
    b.complete_while(|c| matches!(c, IoCommand::WritePage { .. }));
    assert_eq!(b.e.dirty_pages(), 16, "the cache is full of dirty pages");
    let old = b.write(7, 0xB0, 2);
    let new = b.write(7, 0xC0, 1);
    assert_eq!(b.e.stats().reissued_writes, 0);
    assert!(!b.answered(new) && !b.answered(old));
    b.drain();
    assert!(b.answered(new) && b.answered(old));
    assert_eq!(b.backing_byte(7), 0xC0);
}

/// A write admission bypassed over a page with a dirty version in the
/// cache cannot go around it (write-around's rule): it goes through the
/// cache and its answer waits for its backing write. That backing write
/// is an outstanding non-critical write like a bypass (the Redis-like
/// app's periodic journal commit, found dirty in the cache, which the
/// main process then waited for behind the log rewrite for up to 3.5 s):
/// an issuer that inherits criticality has it promoted (answered from the
/// cache at once, its version kept dirty and not destaged until the
/// original lands), and so does a critical FLUSH.
#[test]
fn a_write_through_the_cache_is_promoted_like_a_bypass() {
    for by_flush in [false, true] {
        let mut b = Bench::new("cp-pi-ioi", true, 64);
        b.write(7, 0xA0, 1);
        b.complete_while(|c| !is_original(c));
        assert_eq!(b.e.dirty_pages(), 1, "the critical version is dirty");
        let w = b.write(7, 0xB0, 3);
        assert_eq!(b.e.stats().write_bypasses, 0, "not around the dirty page");
        assert!(b.cmds.iter().any(is_original), "through to the backing");
        b.complete_while(|c| !is_original(c));
        assert!(!b.answered(w), "a write through waits for the backing");
        if by_flush {
            b.submit(0, RequestKind::Flush, 0, 0, 1);
        } else {
            assert_eq!(b.e.inherit_criticality(3), Ok(1));
            b.pump();
        }
        assert_eq!(b.e.stats().reissued_writes, 1, "flush {by_flush}");
        b.complete_while(|c| !is_original(c));
        assert!(b.answered(w), "flush {by_flush}: answered from the cache");
        assert!(b.kept.contains(&w), "its buffer is in use by the original");
        b.e.start_drain();
        b.pump();
        b.complete_while(|c| !is_original(c));
        assert_eq!(b.destages(), 0, "no destage before the original lands");
        assert_eq!(b.e.dirty_pages(), 1, "the promoted version is dirty");
        b.complete_while(is_original);
        b.complete_while(|_| true);
        assert_eq!(b.backing_byte(7), 0xB0);
        assert_eq!(b.e.dirty_pages(), 0);
        assert_eq!(b.e.stats().discarded_completions, 1);
    }
}

/// Under CP+PI the same write waits for its backing write.
#[test]
fn under_cp_pi_a_write_through_the_cache_waits_for_the_backing() {
    let mut b = Bench::new("cp-pi", true, 64);
    b.write(7, 0xA0, 1);
    b.complete_while(|c| !is_original(c));
    let w = b.write(7, 0xB0, 3);
    assert_eq!(b.e.inherit_criticality(3), Ok(1));
    b.submit(0, RequestKind::Flush, 0, 0, 1);
    b.complete_while(|c| !is_original(c));
    assert!(!b.answered(w));
    assert_eq!(b.e.stats().reissued_writes, 0);
    b.drain();
    assert!(b.answered(w));
    assert_eq!(b.backing_byte(7), 0xB0);
}

/// A critical write to a page whose version from a bypassed write through
/// the cache is in flight waits for that version, which is final only once
/// its backing write lands: under CP+PI+IOI the write through is promoted
/// and both are answered from the cache; under CP+PI both wait.
#[test]
fn a_critical_overwrite_promotes_the_write_through_it_waits_on() {
    for ioi in [true, false] {
        let mut b = Bench::new(if ioi { "cp-pi-ioi" } else { "cp-pi" }, true, 64);
        b.write(7, 0xA0, 1);
        b.complete_while(|c| !is_original(c));
        let through = b.write(7, 0xB0, 3);
        b.complete_while(|c| !is_original(c));
        let critical = b.write(7, 0xC0, 1);
        assert_eq!(b.e.stats().reissued_writes, ioi as u64);
        b.complete_while(|c| !is_original(c));
        assert_eq!(b.answered(through), ioi, "ioi {ioi}");
        assert_eq!(b.answered(critical), ioi, "ioi {ioi}");
        b.e.start_drain();
        b.pump();
        b.complete_while(|c| !is_original(c));
        assert_eq!(b.destages(), 0, "no destage before the original lands");
        b.complete_while(is_original);
        b.complete_while(|_| true);
        assert!(b.answered(through) && b.answered(critical));
        assert_eq!(b.backing_byte(7), 0xC0, "ioi {ioi}: the newest lands last");
        assert_eq!(b.e.dirty_pages(), 0);
    }
}

/// On a persistent cache a page whose destaged version's record is not yet
/// freed cannot be bypassed either; a write through the cache there makes
/// a clean version (the backing will have it). Promoted, that version must
/// be dirty: the backing does not have it until the original lands. If its
/// cache write then fails, the version is undone as one that made the page
/// dirty, and the write is answered with the error.
#[test]
fn a_promoted_write_through_the_cache_keeps_its_clean_version_dirty() {
    for fail_fill in [false, true] {
        let config = EngineConfig {
            cache_slots: 64,
            group_size_bytes: 4 * PAGE,
            admission: "cp-pi-ioi".into(),
            buffers_outlive_answers: true,
            persistent: true,
            ..EngineConfig::default()
        };
        let mut b = Bench::with(config);
        b.write(7, 0xA0, 1);
        b.complete_while(|c| matches!(c, IoCommand::WritePage { .. }));
        b.e.start_drain();
        b.pump();
        b.complete_while(|c| matches!(c, IoCommand::Destage { .. }));
        assert_eq!(b.e.dirty_pages(), 0, "destaged; its record not yet freed");
        let w = b.write(7, 0xB0, 3);
        assert_eq!(b.e.stats().write_bypasses, 0, "through the cache");
        assert_eq!(b.e.dirty_pages(), 0, "a clean version");
        assert_eq!(b.e.inherit_criticality(3), Ok(1));
        b.pump();
        assert_eq!(b.e.stats().reissued_writes, 1);
        assert_eq!(b.e.dirty_pages(), 1, "the promoted version is dirty");
        if fail_fill {
            let k = (b.cmds.iter())
                .position(|c| matches!(c, IoCommand::WritePage { .. }))
                .expect("the version's cache write");
            let c = b.cmds.remove(k);
            b.e.handle_completion(Nanos(0), c.io(), Err(IoError::Io))
                .unwrap();
            // Answered once the older version's record is zeroed (a crash
            // must not bring it back over the backing write).
            let is_free = |c: &IoCommand| matches!(c, IoCommand::FreeSlots { .. });
            b.cmds.extend(std::iter::from_fn(|| b.e.poll_command()));
            while let Some(k) = b.cmds.iter().position(is_free) {
                let c = b.cmds.remove(k);
                b.dev.execute(&c, &mut b.bufs);
                b.e.handle_completion(Nanos(0), c.io(), Ok(())).unwrap();
                b.cmds.extend(std::iter::from_fn(|| b.e.poll_command()));
            }
            let r = b.e.poll_response().expect("answered");
            assert_eq!((r.id.0, r.result), (w, Err(IoError::Io)));
            assert_eq!(b.e.dirty_pages(), 0, "the version is undone");
            b.pump();
        } else {
            b.complete_while(|c| !is_original(c));
            assert!(b.answered(w), "answered from the cache");
            assert_eq!(b.e.dirty_pages(), 1);
        }
        assert_eq!(b.destages(), 0, "no destage before the original lands");
        b.complete_while(is_original);
        b.complete_while(|_| true);
        assert_eq!(b.backing_byte(7), 0xB0, "fail {fail_fill}");
        assert_eq!(b.e.dirty_pages(), 0);
    }
}
