//! Staleness bounds in a real `wcache serve`: a few acknowledged writes, far
//! below the destage thresholds, reach the backing file within the maximum
//! dirty age (plus the time to destage), or once the server is idle with an
//! idle drain; with both off, the same writes are still only in the cache
//! seconds later (so the checks can fail). The backing file is read
//! directly while the server runs.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Nbd, Served};

const PAGE: usize = 4096;
/// Scattered pages, one per write group.
const PAGES: [u64; 8] = [3, 40, 77, 150, 301, 480, 700, 1000];

fn serve(dir: &Path, extra: &[&str]) -> Served {
    let cache = dir.join("cache.img");
    let backing = dir.join("backing.img");
    let mut args = vec![
        "--cache".to_string(),
        cache.display().to_string(),
        "--cache-size".into(),
        "8M".into(),
        "--cache-sync".into(),
        "nvram".into(),
        "--export".into(),
        format!("disk={}", backing.display()),
        "--backing-size".into(),
        "8M".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Served::start(&args, &dir.join("w.sock"))
}

fn pattern(page: u64) -> Vec<u8> {
    (0..PAGE)
        .map(|i| (page as usize * 31 + i) as u8 | 1)
        .collect()
}

fn write_pages(served: &Served) {
    let mut nbd = Nbd::connect(&served.socket, "disk").expect("connect");
    for page in PAGES {
        nbd.write(page * PAGE as u64, &pattern(page), false)
            .expect("write");
    }
}

/// The pages of `PAGES` the backing file holds now.
fn on_backing(dir: &Path) -> usize {
    let bytes = std::fs::read(dir.join("backing.img")).expect("read backing");
    PAGES
        .iter()
        .filter(|&&p| {
            let at = p as usize * PAGE;
            bytes.get(at..at + PAGE) == Some(&pattern(p)[..])
        })
        .count()
}

/// Polls until every page is on the backing; returns how long that took.
fn time_to_backing(dir: &Path, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if on_backing(dir) == PAGES.len() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn a_maximum_dirty_age_brings_writes_to_the_backing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = serve(
        dir.path(),
        &["--max-dirty-age", "1s", "--idle-destages", "0"],
    );
    write_pages(&served);
    // The bound is 1 s plus the time to destage; the limit leaves room for
    // a busy machine, and is a deadline, not a speed check.
    let took = time_to_backing(dir.path(), Duration::from_secs(6));
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    assert!(took.is_some(), "pages not on the backing after 6 s: {log}");
}

#[test]
fn an_idle_server_drains_to_the_backing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = serve(
        dir.path(),
        &[
            "--max-dirty-age",
            "0",
            "--idle-after",
            "200ms",
            "--idle-destages",
            "2",
        ],
    );
    write_pages(&served);
    let took = time_to_backing(dir.path(), Duration::from_secs(5));
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    assert!(took.is_some(), "pages not on the backing after 5 s: {log}");
}

#[test]
fn journaled_writes_reach_the_backing_within_the_maximum_dirty_age() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = format!("disk={}", dir.path().join("journal.img").display());
    let served = serve(
        dir.path(),
        &[
            "--write-policy",
            "wb-j",
            "--journal-size",
            "1M",
            "--journal",
            &journal,
            "--commit-age",
            "500ms",
            "--max-dirty-age",
            "500ms",
            "--idle-destages",
            "0",
        ],
    );
    write_pages(&served);
    let took = time_to_backing(dir.path(), Duration::from_secs(5));
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    assert!(took.is_some(), "pages not on the backing after 5 s: {log}");
}

#[test]
fn without_the_bounds_writes_stay_in_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = serve(
        dir.path(),
        &["--max-dirty-age", "0", "--idle-destages", "0"],
    );
    write_pages(&served);
    std::thread::sleep(Duration::from_secs(2));
    let landed = on_backing(dir.path());
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    assert_eq!(landed, 0, "pages reached the backing with no bound: {log}");
}

#[test]
fn a_bad_duration_is_refused_with_its_option() {
    let (ok, _, err) = common::wcache(&["serve", "--max-dirty-age", "soon"]);
    assert!(!ok);
    assert!(
        err.contains("--max-dirty-age") && err.contains("\"soon\""),
        "{err}"
    );
    let (ok, _, err) = common::wcache(&["serve", "--max-dirty-age", "1ms"]);
    assert!(!ok);
    assert!(err.contains("max_dirty_age"), "{err}");
}
