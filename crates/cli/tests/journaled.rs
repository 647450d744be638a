//! Journaled write-back in a real `wcache serve`: with consistency points
//! declared by hints, a server killed mid-run whose cache file is then
//! deleted leaves a backing that, once `wcache backing-recover` replayed its
//! journal, holds exactly the state of one declared point (every page of
//! one epoch, never a mix). And the bad inputs of the policy get errors
//! that name them.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{wcache, Nbd, Served};

const PAGE: usize = 4096;
/// Pages every epoch rewrites, scattered over the export.
const PAGES: u64 = 48;

fn page_of(i: u64) -> u64 {
    i * 37 % 1024
}

/// Epoch `e`'s bytes for page index `i`: the epoch in every 8-byte word.
fn content(e: u64, i: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    for (w, chunk) in b.chunks_exact_mut(8).enumerate() {
        let v = if e == 0 {
            0
        } else {
            e << 32 | i << 16 | w as u64
        };
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    b
}

fn serve_journaled(dir: &Path, extra: &[&str]) -> Served {
    serve_journaled_on(dir, "", extra)
}

/// As `serve_journaled`, the backing file behind `prefix` (e.g. an
/// emulated disk, so that checkpoints take long enough to be killed in).
fn serve_journaled_on(dir: &Path, prefix: &str, extra: &[&str]) -> Served {
    let mut args: Vec<String> = [
        "--cache",
        &dir.join("cache.img").display().to_string(),
        "--cache-size",
        "8M",
        "--export",
        &format!("disk={prefix}{}", dir.join("backing.img").display()),
        "--backing-size",
        "16M",
        "--write-policy",
        "wb-j",
        "--journal-size",
        "1M",
        "--journal",
        "disk=backing-end",
        "--control",
        &dir.join("w.ctl").display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Served::start(&args, &dir.join("w.sock"))
}

/// Which epoch each page of the backing file holds (None: a mix of bytes
/// no epoch wrote).
fn epochs_on_backing(dir: &Path) -> Vec<Option<u64>> {
    let bytes = std::fs::read(dir.join("backing.img")).expect("read backing");
    (0..PAGES)
        .map(|i| {
            let at = page_of(i) as usize * PAGE;
            let got = &bytes[at..at + PAGE];
            let e = u64::from_le_bytes(got[..8].try_into().expect("8 bytes")) >> 32;
            (got == content(e, i)).then_some(e)
        })
        .collect()
}

/// Writes epoch after epoch (every page, then a consistency point) until
/// stopped; returns the last epoch whose point was acknowledged.
fn write_epochs(dir: &Path, socket: &Path, stop: &AtomicBool, declared: &AtomicU64) {
    let Ok(mut nbd) = Nbd::connect(socket, "disk") else {
        return;
    };
    let ctl = dir.join("w.ctl").display().to_string();
    for e in 1.. {
        for i in 0..PAGES {
            if stop.load(Ordering::SeqCst)
                || nbd
                    .write(page_of(i) * PAGE as u64, &content(e, i), false)
                    .is_err()
            {
                return;
            }
        }
        let (ok, _, _) = wcache(&["consistency-point", "--control", &ctl]);
        if !ok {
            return;
        }
        declared.store(e, Ordering::SeqCst);
    }
}

#[test]
fn a_lost_cache_leaves_the_backing_at_a_declared_point() {
    lost_cache_trials(&["--cache-format", "2"]);
}

/// The same on format 3, where a write that waits for the log's room must
/// not commit the open transaction between declared points.
#[test]
fn a_lost_cache_leaves_the_backing_at_a_declared_point_on_format_3() {
    lost_cache_trials(&["--cache-format", "3"]);
}

/// Six trials: a writer declaring a consistency point after each epoch,
/// the server killed, the cache lost, the backing recovered alone; it must
/// hold one declared epoch whole. `format` adds serve options.
fn lost_cache_trials(format: &[&str]) {
    let mut reached = 0;
    for trial in 0..6u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        // Every other trial over an emulated disk: checkpoints then take
        // long enough that a kill often finds one half done.
        let prefix = if trial % 2 == 1 { "emulated-hdd:" } else { "" };
        // Checkpoints are lazy: a short maximum dirty age makes them run
        // while the writer goes on.
        let points = ["--consistency-points", "hint", "--max-dirty-age", "50ms"];
        let served = serve_journaled_on(dir.path(), prefix, &[&points[..], format].concat());
        let stop = Arc::new(AtomicBool::new(false));
        let declared = Arc::new(AtomicU64::new(0));
        let writer = {
            let (dir, socket) = (dir.path().to_path_buf(), served.socket.clone());
            let (stop, declared) = (stop.clone(), declared.clone());
            std::thread::spawn(move || write_epochs(&dir, &socket, &stop, &declared))
        };
        std::thread::sleep(Duration::from_millis(400 + 200 * trial));
        let log = served.kill9();
        stop.store(true, Ordering::SeqCst);
        writer.join().expect("writer");
        std::fs::remove_file(dir.path().join("cache.img")).expect("lose the cache");
        let backing = dir.path().join("backing.img").display().to_string();
        let (ok, out, err) = wcache(&[
            "backing-recover",
            &backing,
            "--journal-size",
            "1M",
            "--journal",
            "backing-end",
        ]);
        assert!(ok, "backing-recover: {out}{err}\n{log}");
        let epochs = epochs_on_backing(dir.path());
        let first = epochs[0];
        assert!(
            first.is_some() && epochs.iter().all(|&e| e == first),
            "trial {trial}: the backing mixes epochs {epochs:?} ({out})\n{log}"
        );
        let e = first.expect("checked");
        let last = declared.load(Ordering::SeqCst);
        assert!(e <= last + 1, "epoch {e} on the backing, {last} declared");
        reached = reached.max(e);
        println!(
            "trial {trial}: backing at epoch {e} of {last} declared; {}",
            out.trim()
        );
    }
    assert!(
        reached > 0,
        "no trial checkpointed an epoch: the check saw nothing"
    );
}

#[test]
fn journaled_bad_input_gets_errors_that_name_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("c.img").display().to_string();
    let backing = format!("disk={}", dir.path().join("b.img").display());
    let base = [
        "serve",
        "--cache",
        &cache,
        "--cache-size",
        "4M",
        "--export",
        &backing,
        "--backing-size",
        "4M",
        "--write-policy",
        "wb-j",
    ];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        wcache(&args)
    };
    let (ok, _, err) = run(&["--journal-size", "1M"]);
    assert!(
        !ok && err.contains("--journal disk=PATH") && err.contains("--journal disk=backing-end"),
        "no place given: {err}"
    );
    let (ok, _, err) = run(&["--journal-size", "16M", "--journal", "disk=backing-end"]);
    assert!(!ok && err.contains("too small for a journal"), "{err}");
    let (ok, _, err) = run(&["--journal-size", "1M", "--journal", "db=backing-end"]);
    assert!(!ok && err.contains("no export is called \"db\""), "{err}");
    let (ok, _, err) = run(&["--consistency-points", "sometimes"]);
    assert!(
        !ok && err.contains("--consistency-points") && err.contains("size, flush, hint"),
        "{err}"
    );
    let (ok, _, err) = run(&[
        "--journal-size",
        "1M",
        "--journal",
        "disk=backing-end",
        "--sequential-cutoff",
        "1M",
    ]);
    assert!(!ok && err.contains("write-back-journaled"), "{err}");

    // A consistency point to a server that is not journaled.
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).expect("dir");
    let served = Served::start(
        &[
            "--cache",
            &plain.join("c.img").display().to_string(),
            "--cache-size",
            "4M",
            "--export",
            &format!("disk={}", plain.join("b.img").display()),
            "--backing-size",
            "4M",
            "--control",
            &plain.join("w.ctl").display().to_string(),
        ],
        &plain.join("w.sock"),
    );
    let (ok, _, err) = wcache(&[
        "consistency-point",
        "--control",
        &plain.join("w.ctl").display().to_string(),
    ]);
    assert!(
        !ok && err.contains("need write policy write-back-journaled"),
        "{err}"
    );
    let (stopped, log) = served.stop();
    assert!(stopped, "{log}");

    // A backing journal with a damaged header.
    let served = serve_journaled(dir.path(), &[]);
    let (stopped, log) = served.stop();
    assert!(stopped, "{log}");
    let path = dir.path().join("backing.img");
    let mut bytes = std::fs::read(&path).expect("backing");
    let region = bytes.len() - 4096 * (1 + 1 + 256);
    let header = region / 4096 * 4096;
    assert_eq!(
        &bytes[header..header + 8],
        b"WCJRNL01",
        "the journal header is where documented"
    );
    bytes[header + 33] ^= 0xff;
    std::fs::write(&path, &bytes).expect("damage");
    let (ok, _, err) = wcache(&[
        "backing-recover",
        &path.display().to_string(),
        "--journal-size",
        "1M",
        "--journal",
        "backing-end",
    ]);
    assert!(!ok && err.contains("fails its checksum"), "{err}");
}
