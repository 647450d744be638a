//! Bounded memory over many connections, in CI (`scripts/rss-soak.sh` is the
//! longer run): `wcache serve`, then connections one after another, each
//! doing reads and writes of 4 KiB to 4 MiB (one of 32 MiB in every 50th);
//! the server's RSS at the end must be within 1.2× (plus 4 MiB for noise)
//! of its RSS after the first quarter of them, the resilience issue's
//! bound, measured after a warm-up that fills the cache (its metadata grows
//! with what it holds, up to its size: that is not per connection).
//! `scripts/rss-soak.sh` runs 10,000 connections.

mod common;

use std::time::Duration;

use common::{Nbd, Served};

const CONNECTIONS: u64 = 1200;
/// RSS is first measured after this many connections: per-thread
/// allocator arenas settle over the first few hundred.
const WARM_CONNECTIONS: u64 = 300;
const IOS_PER_CONNECTION: u64 = 10;

fn rss_mib(pid: libc::pid_t) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib / 1024.0
}

/// splitmix64: the sizes and offsets, the same on every run.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[test]
fn rss_levels_off_over_many_connections() {
    soak("2");
}

/// Format 3 too: a buffer per thread that ever wrote a batch grew its RSS
/// with the server's threads (33 to 51 MiB over 1,200 connections).
#[test]
fn rss_levels_off_over_many_connections_on_format_3() {
    soak("3");
}

/// The soak on a new cache of format `format`.
fn soak(format: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("w.sock");
    let cache = dir.path().join("cache.img");
    let backing = dir.path().join("backing.img");
    let served = Served::start(
        &[
            "--cache",
            cache.to_str().expect("utf8"),
            "--cache-size",
            "128M",
            "--cache-sync",
            "nvram",
            "--export",
            &format!("disk={}", backing.display()),
            "--backing-size",
            "256M",
            "--cache-format",
            format,
        ],
        &socket,
    );
    let pid = served.pid();
    let mut after_warm_up = 0.0;
    let payload = vec![0x6bu8; 32 << 20];
    let mut buf = vec![0u8; 32 << 20];
    // Warm-up: the whole volume written once, so the cache is full (its
    // metadata at its size) before any measuring.
    let mut nbd = Nbd::connect(&socket, "disk").expect("connect");
    for chunk in 0..(256 << 20) / (4 << 20) {
        nbd.write(chunk * (4 << 20), &payload[..4 << 20], false)
            .expect("warm-up write");
    }
    drop(nbd);
    for c in 0..CONNECTIONS {
        let mut nbd = Nbd::connect(&socket, "disk").expect("connect");
        for i in 0..IOS_PER_CONNECTION {
            let h = mix(c * IOS_PER_CONNECTION + i);
            let len = if (c * IOS_PER_CONNECTION + i) % 500 == 7 {
                32 << 20
            } else {
                [4usize << 10, 64 << 10, 1 << 20, 4 << 20][(h % 4) as usize]
            };
            let offset = (h >> 8) % ((256 << 20) - len as u64) / 4096 * 4096;
            if (h >> 4) & 1 == 0 {
                nbd.write(offset, &payload[..len], false).expect("write");
            } else {
                nbd.read(offset, &mut buf[..len]).expect("read");
            }
        }
        drop(nbd);
        if c + 1 == WARM_CONNECTIONS {
            std::thread::sleep(Duration::from_millis(100));
            after_warm_up = rss_mib(pid);
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let end = rss_mib(pid);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    assert!(
        end <= after_warm_up * 1.2 + 4.0,
        "format {format}: RSS {end:.1} MiB after {CONNECTIONS} connections, {after_warm_up:.1} MiB after {WARM_CONNECTIONS}"
    );
    println!("format {format}: RSS {after_warm_up:.1} MiB after {WARM_CONNECTIONS} connections, {end:.1} MiB after {CONNECTIONS}");
}
