//! The mirror against a real peer in this process (loopback TCP): writes
//! reach the peer's copy, and a write the peer took but the local device
//! refused is copied back from the local device, so the two copies never
//! stay apart. The whole-server tests (kills, partitions, TLS) are in
//! `crates/cli/tests/replication.rs`.

use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wcache_io::replica::{
    LinkState, LinkTls, Mirror, MirrorOptions, OnPeerLost, Peer, PeerOptions,
};
use wcache_io::{BlockDevice, FaultPlan, FaultyDevice, MemDevice};

const SIZE: u64 = 8 << 20;
const MIB: u64 = 1 << 20;

struct Pair {
    mirror: Arc<Mirror>,
    local: Arc<MemDevice>,
    plan: Arc<FaultPlan>,
    copy: std::path::PathBuf,
    stop: Arc<AtomicBool>,
    peer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.mirror.close();
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.peer.take() {
            t.join().expect("the peer's thread");
        }
    }
}

fn pair(dir: &Path) -> Pair {
    let copy = dir.join("copy.img");
    let mut peer = Peer::open(PeerOptions {
        cache: copy.clone(),
        state_path: dir.join("copy.img.replica"),
        tls: LinkTls::Off,
        timeout: Duration::from_secs(2),
        force: false,
    })
    .expect("open the peer");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let peer_stop = Arc::clone(&stop);
    let peer = std::thread::spawn(move || {
        peer.serve(&listener, &peer_stop).expect("the peer serves");
    });
    let local = Arc::new(MemDevice::new(SIZE));
    let plan = FaultPlan::new();
    let faulty: Arc<dyn BlockDevice> = Arc::new(FaultyDevice::new(local.clone(), plan.clone()));
    let mirror = Mirror::start(
        faulty,
        MirrorOptions {
            peer: address,
            state_path: dir.join("cache.replica"),
            timeout: Duration::from_secs(2),
            start_without_peer: false,
            on_peer_lost: OnPeerLost::WriteBack,
            tls: LinkTls::Off,
        },
    )
    .expect("the mirror starts");
    Pair {
        mirror,
        local,
        plan,
        copy,
        stop,
        peer: Some(peer),
    }
}

fn copy_bytes(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let all = std::fs::read(path).expect("read the peer's copy");
    all[offset as usize..offset as usize + len].to_vec()
}

fn local_bytes(dev: &MemDevice, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    dev.read_at(&mut buf, offset)
        .expect("read the local device");
    buf
}

fn wait_connected(mirror: &Mirror) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while mirror.link_state() != LinkState::Connected {
        assert!(
            Instant::now() < deadline,
            "the link came back: {:?}",
            mirror.status()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_flushed_write_is_on_both_copies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pair(dir.path());
    assert_eq!(p.mirror.link_state(), LinkState::Connected);
    let data = vec![0xA5u8; 8192];
    p.mirror.write_at(&data, 3 * MIB + 4096).expect("write");
    p.mirror
        .write_vectored_at(&[&data[..4096], &data[4096..]], 5 * MIB)
        .expect("vectored write");
    p.mirror.flush().expect("flush");
    assert_eq!(copy_bytes(&p.copy, 3 * MIB + 4096, 8192), data);
    assert_eq!(copy_bytes(&p.copy, 5 * MIB, 8192), data);
    assert_eq!(p.mirror.status().unprotected_bytes, 0);
}

/// A write goes to the peer before the local device; where the local
/// device then fails it, the peer holds bytes this host does not. The
/// region must be marked lacking and the link ended, so that the resync
/// puts the local bytes back on the peer.
#[test]
fn a_write_the_local_device_refused_is_copied_back_to_the_peer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pair(dir.path());
    let old = vec![0x11u8; 4096];
    p.mirror.write_at(&old, 2 * MIB).expect("write");
    p.mirror.flush().expect("flush");
    let losses = p.mirror.status().links_lost;

    p.plan.fail_next_writes.store(1, Ordering::SeqCst);
    let refused = vec![0x77u8; 4096];
    assert!(
        p.mirror.write_at(&refused, 2 * MIB).is_err(),
        "the fault fails the write"
    );
    assert_eq!(
        local_bytes(&p.local, 2 * MIB, 4096),
        old,
        "a failed write writes nothing here"
    );

    // The link ends and comes back; the comparison or the resync copies the region.
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.mirror.status().links_lost == losses {
        assert!(Instant::now() < deadline, "the link was not ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_connected(&p.mirror);
    p.mirror.flush().expect("flush");
    assert_eq!(
        copy_bytes(&p.copy, 2 * MIB, 4096),
        old,
        "the peer kept a write this host refused"
    );
    assert_eq!(p.mirror.status().unprotected_bytes, 0);
}

/// Writes from several threads while the link is cut again and again: once
/// connected and flushed, the peer's copy equals the local device.
#[test]
fn copies_agree_after_writes_across_lost_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pair(dir.path());
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u8)
        .map(|t| {
            let mirror = Arc::clone(&p.mirror);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !done.load(Ordering::Acquire) {
                    let page = (i * 7 + t as u64 * 131) % (SIZE / 4096);
                    let data = vec![t.wrapping_mul(50).wrapping_add(i as u8); 4096];
                    // A write the fault failed leaves the older bytes here,
                    // and must leave them on the peer too.
                    let _ = mirror.write_at(&data, page * 4096);
                    if i.is_multiple_of(50) {
                        mirror.flush().expect("flush");
                    }
                    i += 1;
                }
            })
        })
        .collect();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(100));
        p.plan.fail_next_writes.store(1, Ordering::SeqCst);
        while p.plan.fail_next_writes.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    done.store(true, Ordering::Release);
    for w in writers {
        w.join().expect("a writer");
    }
    assert_eq!(p.plan.injected(), 3, "three writes failed here");
    assert!(
        p.mirror.status().links_lost >= 1,
        "a refused write ends the link"
    );
    wait_connected(&p.mirror);
    p.mirror.flush().expect("flush");
    let local = local_bytes(&p.local, 0, SIZE as usize);
    let copy = copy_bytes(&p.copy, 0, SIZE as usize);
    assert!(local.iter().any(|&b| b != 0), "something was written");
    assert!(
        local == copy,
        "the peer's copy differs from the local device"
    );
}
