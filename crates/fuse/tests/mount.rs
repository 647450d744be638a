//! `wcache mount` on a real FUSE mount: files written, read back, grown,
//! truncated, renamed and removed through the cache, their bytes on the
//! backing files after an unmount (and after a remount with pages left
//! dirty in the cache); sync writes and fsync counted by the engine as
//! sync; the mountpoint and the backing directory checked.

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use wcache_core::config::StalenessConfig;
use wcache_core::policy::destage_rate::RateConfig;
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_fuse::{CriticalRules, DirtyLimits, MountConfig, MountError, Mounted};
use wcache_io::{CacheConfig, CacheDeviceSpec, DriverConfig, FormatAsked, SyncMode};

fn cache_config(cache: &Path, format: FormatAsked) -> CacheConfig {
    CacheConfig {
        cache: CacheDeviceSpec::File {
            path: cache.to_path_buf(),
            create_size_bytes: 64 << 20,
            size_given: false,
            sync: SyncMode::Fdatasync,
            direct: false,
            measure_sync: false,
        },
        volumes: Vec::new(),
        backing_sync: SyncMode::Fdatasync,
        backing_create_size_bytes: None,
        engine: EngineConfig {
            page_size_bytes: 4096,
            group_size_bytes: 64 * 1024,
            write_policy: WritePolicyKind::WriteBack,
            // Dirty pages stay in the cache until the test says.
            rate: RateConfig {
                low_threshold_pct: 95.0,
                high_threshold_pct: 99.0,
                ..RateConfig::default()
            },
            staleness: StalenessConfig {
                max_dirty_age_ns: 0,
                idle_destages: 0,
                ..StalenessConfig::default()
            },
            ..EngineConfig::default()
        },
        driver: DriverConfig {
            io_threads: 2,
            ..DriverConfig::default()
        },
        block_size_bytes: 4096,
        force: false,
        format,
        volatile_write_back: false,
        backing_timeout: None,
        replicate: None,
    }
}

struct Dirs {
    _tmp: tempfile::TempDir,
    backing: std::path::PathBuf,
    mnt: std::path::PathBuf,
    cache: std::path::PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let backing = tmp.path().join("backing");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    let cache = tmp.path().join("cache.img");
    Dirs {
        _tmp: tmp,
        backing,
        mnt,
        cache,
    }
}

fn mount(d: &Dirs, format: FormatAsked) -> Mounted {
    mount_with(d, format, DirtyLimits::default())
}

fn mount_with(d: &Dirs, format: FormatAsked, dirty: DirtyLimits) -> Mounted {
    Mounted::start(MountConfig {
        backing_dir: d.backing.clone(),
        mountpoint: d.mnt.clone(),
        cache: cache_config(&d.cache, format),
        journal: None,
        rules: CriticalRules::default(),
        threads: 2,
        emulate: None,
        emulate_own_disk: Vec::new(),
        critical_dirs: Vec::new(),
        dirty,
    })
    .expect("mount")
}

/// Nothing held: every write goes to the cache at once.
const NONE_HELD: DirtyLimits = DirtyLimits {
    max_bytes: 0,
    expire: Duration::from_secs(30),
};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn engine(m: &Mounted, name: &str) -> u64 {
    m.cache()
        .operator()
        .snapshot()
        .engine_value(name)
        .unwrap_or(0)
}

#[test]
fn files_round_trip_through_the_cache_on_both_formats_held_or_not() {
    let formats = [FormatAsked::FoundNewLog, FormatAsked::Records];
    for (format, dirty) in formats
        .into_iter()
        .flat_map(|f| [(f, DirtyLimits::default()), (f, NONE_HELD)])
    {
        let held = dirty.max_bytes > 0;
        let d = dirs();
        let m = mount_with(&d, format, dirty);
        let a = d.mnt.join("a.dat");
        // Odd sizes and offsets: a partial first and last page.
        let first = pattern(10_000, 1);
        fs::write(&a, &first).unwrap();
        let f = OpenOptions::new().read(true).write(true).open(&a).unwrap();
        f.write_all_at(&pattern(5000, 2), 7001).unwrap();
        let mut want = first.clone();
        want.resize(12_001, 0);
        want[7001..12_001].copy_from_slice(&pattern(5000, 2));
        assert_eq!(fs::read(&a).unwrap(), want);
        assert_eq!(fs::metadata(&a).unwrap().len(), 12_001);
        if held {
            // Held in memory (read back from there), until the fsync.
            assert_eq!(m.held_bytes(), 12_288);
            assert_eq!(m.cache().dirty_pages(), 0);
            f.sync_all().unwrap();
            assert_eq!(m.held_bytes(), 0, "the fsync wrote the file's pages back");
        }
        // The cache holds the writes (write-back, thresholds not reached).
        assert!(m.cache().dirty_pages() > 0, "writes went through the cache");
        // Truncate into a page, then grow again: the cut bytes read as zeros.
        f.set_len(5000).unwrap();
        f.set_len(9000).unwrap();
        let mut grown = want[..5000].to_vec();
        grown.resize(9000, 0);
        assert_eq!(fs::read(&a).unwrap(), grown);
        if held {
            // A write held, then a truncation into its page and past it.
            f.write_all_at(&pattern(3000, 3), 6000).unwrap();
            f.set_len(7000).unwrap();
            grown[6000..7000].copy_from_slice(&pattern(3000, 3)[..1000]);
            grown.truncate(7000);
            grown.resize(9000, 0);
            f.set_len(9000).unwrap();
            assert_eq!(fs::read(&a).unwrap(), grown);
            assert!(m.held_bytes() > 0, "the stop writes these back");
        }
        drop(f);
        // Metadata passes through.
        fs::create_dir(d.mnt.join("sub")).unwrap();
        fs::rename(&a, d.mnt.join("sub/b.dat")).unwrap();
        fs::write(d.mnt.join("gone"), b"x").unwrap();
        fs::remove_file(d.mnt.join("gone")).unwrap();
        let mut names: Vec<String> = fs::read_dir(&d.mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, vec!["sub"], "the file table is hidden");
        let report = m.stop().unwrap();
        assert!(report.recorded_clean);
        // The next mount destages what stayed dirty; the backing file has it all.
        let m = mount(&d, format);
        assert_eq!(m.cache().dirty_pages(), 0);
        assert_eq!(fs::read(d.backing.join("sub/b.dat")).unwrap(), grown);
        assert_eq!(fs::read(d.mnt.join("sub/b.dat")).unwrap(), grown);
        m.stop().unwrap();
    }
}

/// A writer past the limit waits for writeback (memory stays bounded),
/// and held writes no one fsyncs reach the cache once they expire.
#[test]
fn held_writes_are_bounded_and_expire_into_the_cache() {
    let d = dirs();
    let limits = DirtyLimits {
        max_bytes: 64 << 10,
        expire: Duration::from_millis(200),
    };
    let m = mount_with(&d, FormatAsked::FoundNewLog, limits);
    let path = d.mnt.join("big");
    let mut f = fs::File::create(&path).unwrap();
    let mut want = Vec::new();
    for i in 0..16u8 {
        let chunk = pattern(256 << 10, i);
        f.write_all(&chunk).unwrap();
        want.extend_from_slice(&chunk);
        // At most the limit plus one request of the kernel's (up to 1 MiB).
        assert!(
            m.held_bytes() <= (64 << 10) + (1 << 20),
            "{}",
            m.held_bytes()
        );
    }
    assert_eq!(fs::read(&path).unwrap(), want);
    let start = Instant::now();
    while m.held_bytes() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "held writes never expired"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(m.cache().dirty_pages() > 0, "written back into the cache");
    assert_eq!(fs::read(&path).unwrap(), want);
    drop(f);
    m.stop().unwrap();
    // The next mount destages what the cache held to the file.
    let m = mount(&d, FormatAsked::FoundNewLog);
    assert_eq!(fs::read(d.backing.join("big")).unwrap(), want);
    m.stop().unwrap();
}

#[test]
fn o_dsync_writes_and_fsync_reach_the_engine_as_sync() {
    let d = dirs();
    let m = mount(&d, FormatAsked::FoundNewLog);
    let path = d.mnt.join("wal");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .custom_flags(libc::O_DSYNC)
        .open(&path)
        .unwrap();
    let flushes = engine(&m, "flushes");
    for i in 0..8u8 {
        f.write_all(&pattern(8192, i)).unwrap();
    }
    let mut g = OpenOptions::new().append(true).open(&path).unwrap();
    g.write_all(&pattern(100, 9)).unwrap();
    g.sync_all().unwrap();
    assert!(
        engine(&m, "flushes") > flushes,
        "fsync is a FLUSH to the engine"
    );
    let mut back = Vec::new();
    let mut r = fs::File::open(&path).unwrap();
    r.seek(SeekFrom::Start(0)).unwrap();
    r.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 8 * 8192 + 100);
    assert_eq!(&back[8 * 8192..], &pattern(100, 9)[..]);
    m.stop().unwrap();
}

/// An fsync of an appended file sends its pages and its size record in
/// one batch of the cache's: the record costs the cache no barrier of its
/// own (fsyncs that grow the file cost what fsyncs that do not cost).
#[test]
fn a_size_record_rides_with_the_pages_of_its_fsync() {
    let d = dirs();
    let m = mount(&d, FormatAsked::FoundNewLog);
    let path = d.mnt.join("aof");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let flushes = || m.cache().monitor().stats().cache_flushes;
    f.write_all(&pattern(3000, 1)).unwrap();
    f.sync_data().unwrap();
    const ROUNDS: u64 = 20;
    let before = flushes();
    for i in 0..ROUNDS {
        f.write_all(&pattern(1000, i as u8)).unwrap();
        f.sync_data().unwrap();
    }
    let growing = flushes() - before;
    let g = OpenOptions::new().write(true).open(&path).unwrap();
    let before = flushes();
    for i in 0..ROUNDS {
        g.write_all_at(&pattern(1000, i as u8), 0).unwrap();
        g.sync_data().unwrap();
    }
    let same_size = flushes() - before;
    assert!(
        same_size >= ROUNDS,
        "each fsync made its pages durable: {same_size}"
    );
    assert_eq!(
        growing, same_size,
        "a size record costs a barrier of its own ({growing} against {same_size} over {ROUNDS} fsyncs)"
    );
    m.stop().unwrap();
}

/// A host crash can lose a backing file's size that was never synced on
/// it: an fsync that grew a file records its size in the cache, and the
/// next mount grows the file to it before destaging, so no fsynced byte
/// past the lost size is dropped; the record never shows in the file.
#[test]
fn a_size_the_backing_file_lost_comes_back_from_its_record() {
    for held in [NONE_HELD, DirtyLimits::default()] {
        let d = dirs();
        let m = mount_with(&d, FormatAsked::FoundNewLog, held);
        let path = d.mnt.join("log");
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let mut want = Vec::new();
        for i in 0..20 {
            let chunk = pattern(1000 + i * 333, i as u8);
            f.write_all(&chunk).unwrap();
            f.sync_data().unwrap();
            want.extend(chunk);
        }
        drop(f);
        assert_eq!(fs::read(&path).unwrap(), want, "held {}", held.max_bytes);
        assert!(
            engine(&m, "dirty_pages") > 0,
            "the test needs pages left dirty"
        );
        m.stop().unwrap();
        // The host lost the file's size: never synced on the backing file.
        let backing = d.backing.join("log");
        OpenOptions::new()
            .write(true)
            .open(&backing)
            .unwrap()
            .set_len(0)
            .unwrap();
        let m = mount_with(&d, FormatAsked::FoundNewLog, held);
        let back = fs::read(&backing).unwrap();
        assert_eq!(back.len(), want.len(), "held {}", held.max_bytes);
        assert!(back == want, "held {}: the bytes differ", held.max_bytes);
        assert!(fs::read(&path).unwrap() == want);
        // The record's page is not the file's: writes reach up to it, no further.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        let max = wcache_fuse::files::FILE_BYTES_MAX;
        f.write_all_at(b"last", max - 4).unwrap();
        let e = f.write_all_at(b"x", max).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
        let mut tail = [0u8; 4];
        fs::File::open(&path)
            .unwrap()
            .read_exact_at(&mut tail, max - 4)
            .unwrap();
        assert_eq!(&tail, b"last");
        m.stop().unwrap();
    }
}

#[test]
fn a_bad_backing_directory_or_mountpoint_is_named() {
    let d = dirs();
    let start = |backing: &Path, mnt: &Path| {
        Mounted::start(MountConfig {
            backing_dir: backing.to_path_buf(),
            mountpoint: mnt.to_path_buf(),
            cache: cache_config(&d.cache, FormatAsked::FoundNewLog),
            journal: None,
            rules: CriticalRules::default(),
            threads: 1,
            emulate: None,
            emulate_own_disk: Vec::new(),
            critical_dirs: Vec::new(),
            dirty: DirtyLimits::default(),
        })
    };
    let missing = d.backing.join("nope");
    let e = start(&missing, &d.mnt).err().expect("refused");
    assert!(matches!(e, MountError::BackingDir { .. }), "{e}");
    assert!(e.to_string().contains("nope"), "{e}");
    fs::write(d.mnt.join("x"), b"x").unwrap();
    let e = start(&d.backing, &d.mnt).err().expect("refused");
    assert!(e.to_string().contains("not empty"), "{e}");
    fs::remove_file(d.mnt.join("x")).unwrap();
    let m = start(&d.backing, &d.mnt).expect("mounts");
    let other = d.backing.join("../mnt2");
    fs::create_dir(&other).unwrap();
    let e = start(&d.backing, &other).err().expect("refused");
    assert!(
        e.to_string().contains("backing directory"),
        "the directory is locked: {e}"
    );
    m.stop().unwrap();
    assert!(!d.cache.with_extension("x").exists());
}

/// A real program on the mount: sqlite3 makes a database (journal files
/// created, synced, deleted), writes a thousand rows in transactions and
/// reads them back; after an unmount and a remount (the pages left dirty
/// destaged to the backing files) the database checks out and holds them.
#[test]
fn sqlite3_works_on_the_mount_and_its_database_survives_a_remount() {
    let d = dirs();
    let m = mount(&d, FormatAsked::FoundNewLog);
    let db = d.mnt.join("t.db");
    let sql = |db: &Path, script: &str| {
        let out = std::process::Command::new("sqlite3")
            .arg(db)
            .arg(script)
            .output()
            .expect("sqlite3 runs (the test script installs it)");
        assert!(
            out.status.success(),
            "sqlite3 {script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    sql(
        &db,
        "PRAGMA page_size=4096; CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);",
    );
    for batch in 0..10 {
        let mut script = String::from("BEGIN;");
        for k in batch * 100..(batch + 1) * 100 {
            script.push_str(&format!(
                "INSERT INTO t VALUES({k}, printf('%0500d', {k}));"
            ));
        }
        script.push_str("COMMIT;");
        sql(&db, &script);
    }
    assert_eq!(sql(&db, "SELECT count(*), sum(k) FROM t;"), "1000|499500");
    assert!(
        engine(&m, "flushes") > 0,
        "sqlite's fsyncs reach the engine"
    );
    m.stop().unwrap();
    // On the backing directory itself, after the next mount's start destaged everything.
    let m = mount(&d, FormatAsked::FoundNewLog);
    let plain = d.backing.join("t.db");
    assert_eq!(sql(&plain, "PRAGMA integrity_check;"), "ok");
    assert_eq!(
        sql(&plain, "SELECT count(*), sum(k) FROM t;"),
        "1000|499500"
    );
    assert_eq!(
        sql(&db, "SELECT v FROM t WHERE k = 999;"),
        format!("{:0500}", 999)
    );
    m.stop().unwrap();
}

/// The control socket's `critical-caller` on a mount: rules by command and
/// cgroup change the callers' criticality; a pid sets the engine's hint
/// for its process; a pid or cgroup that does not exist, an unknown key:
/// a clear error, nothing changed.
#[test]
fn critical_callers_are_set_by_pid_command_and_cgroup_and_bad_ones_named() {
    let d = dirs();
    let m = mount(&d, FormatAsked::FoundNewLog);
    let op = m.cache().operator();
    let me = std::process::id();
    assert!(!m.callers.of(me).critical);
    let rules = op
        .critical_caller("command", "mount*", true)
        .expect("a command rule");
    assert_eq!(rules["commands"][0], "mount*");
    assert!(
        m.callers.of(me).critical,
        "this test binary is called mount-..."
    );
    op.critical_caller("command", "mount*", false).unwrap();
    assert!(!m.callers.of(me).critical);
    let own = wcache_fuse::callers::cgroup(me).unwrap();
    op.critical_caller("cgroup", &own, true).unwrap();
    assert!(m.callers.of(me).critical);
    op.critical_caller("cgroup", &own, false).unwrap();
    op.critical_caller("pid", &me.to_string(), true).unwrap();
    assert!(m.cache().volumes()[0].issuer_is_critical(me));
    for (by, value, says) in [
        ("pid", "4000000000", "no process 4000000000"),
        ("pid", "abc", "not a process number"),
        ("cgroup", "/no/such/group", "no cgroup /no/such/group"),
        ("command", "", "an empty command name"),
        ("user", "x", "unknown key \"user\""),
    ] {
        let e = op.critical_caller(by, value, true).expect_err(by);
        assert!(e.to_string().contains(says), "{by} {value}: {e}");
    }
    assert!(m.callers.rules().cgroups.is_empty() && m.callers.rules().commands.is_empty());
    m.stop().unwrap();
}

/// PostgreSQL on the mount: initdb (as the `postgres` user: files owned by
/// their creator), a server started on the mount, a few transactions
/// (WAL fsyncs reach the engine), a fast stop; after an unmount and a
/// remount the server starts again and the rows are there.
#[test]
fn postgresql_initdb_and_transactions_on_the_mount() {
    let bin = Path::new("/usr/lib/postgresql/15/bin");
    assert!(
        bin.join("initdb").exists(),
        "the test command installs postgresql"
    );
    let d = dirs();
    let m = mount(&d, FormatAsked::FoundNewLog);
    let data = d.mnt.join("pg");
    fs::create_dir(&data).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["postgres:postgres"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(chown.success());
    // The temporary directory's parents must let postgres in.
    let mut up = d.mnt.clone();
    while up.pop() {
        let _ = std::process::Command::new("chmod")
            .arg("o+x")
            .arg(&up)
            .status();
    }
    let as_pg = |args: &[&str]| {
        let out = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let pg = |name: &str| bin.join(name).display().to_string();
    let data_s = data.display().to_string();
    let sock = d.mnt.parent().unwrap().join("sock");
    fs::create_dir_all(&sock).unwrap();
    std::process::Command::new("chmod")
        .arg("777")
        .arg(&sock)
        .status()
        .unwrap();
    let opts = format!("-k {} -p 54329 -c listen_addresses=''", sock.display());
    // A failing test must not leave a server running on a dead mount.
    struct StopServer(String, String);
    impl Drop for StopServer {
        fn drop(&mut self) {
            let _ = std::process::Command::new("runuser")
                .args([
                    "-u",
                    "postgres",
                    "--",
                    &self.0,
                    "-D",
                    &self.1,
                    "-m",
                    "immediate",
                    "stop",
                ])
                .output();
        }
    }
    let _stop = StopServer(pg("pg_ctl"), data_s.clone());
    as_pg(&[
        &pg("initdb"),
        "-D",
        &data_s,
        "-A",
        "trust",
        "-U",
        "postgres",
    ]);
    let uid = |p: &Path| std::os::unix::fs::MetadataExt::uid(&fs::metadata(p).unwrap());
    let owner = uid(&d.backing.join("pg/PG_VERSION"));
    assert_eq!(
        owner,
        uid(&data),
        "files belong to their creator (postgres)"
    );
    assert_ne!(owner, 0, "not to root");
    // The server's output to a log file: it would hold our pipes open.
    let log = sock.join("pg.log").display().to_string();
    as_pg(&[
        &pg("pg_ctl"),
        "-D",
        &data_s,
        "-o",
        &opts,
        "-l",
        &log,
        "-w",
        "start",
    ]);
    let flushes = engine(&m, "flushes");
    let psql = |sql: &str| {
        as_pg(&[
            &pg("psql"),
            "-h",
            &sock.display().to_string(),
            "-p",
            "54329",
            "-At",
            "-c",
            sql,
            "postgres",
        ])
    };
    psql("CREATE TABLE t(k int primary key, v text)");
    for i in 0..20 {
        psql(&format!(
            "INSERT INTO t SELECT g, md5(g::text) FROM generate_series({}, {}) g",
            i * 100,
            i * 100 + 99
        ));
    }
    assert_eq!(psql("SELECT count(*) FROM t"), "2000");
    assert!(
        engine(&m, "flushes") > flushes,
        "commits fsync the WAL through the engine"
    );
    as_pg(&[&pg("pg_ctl"), "-D", &data_s, "-m", "fast", "-w", "stop"]);
    m.stop().unwrap();
    let m = mount(&d, FormatAsked::FoundNewLog);
    as_pg(&[
        &pg("pg_ctl"),
        "-D",
        &data_s,
        "-o",
        &opts,
        "-l",
        &log,
        "-w",
        "start",
    ]);
    assert_eq!(psql("SELECT count(*), sum(k) FROM t"), "2000|1999000");
    as_pg(&[&pg("pg_ctl"), "-D", &data_s, "-m", "fast", "-w", "stop"]);
    m.stop().unwrap();
}

/// Nodes made through the mount: a directory, a symbolic link, a FIFO and
/// a hard link land in the backing directory as such.
#[test]
fn directories_links_and_fifos_pass_through() {
    let d = dirs();
    let m = mount(&d, FormatAsked::FoundNewLog);
    fs::create_dir(d.mnt.join("dir")).unwrap();
    fs::write(d.mnt.join("dir/f"), b"data").unwrap();
    std::os::unix::fs::symlink("dir/f", d.mnt.join("link")).unwrap();
    assert_eq!(
        fs::read_link(d.mnt.join("link")).unwrap(),
        Path::new("dir/f")
    );
    assert_eq!(fs::read(d.mnt.join("link")).unwrap(), b"data");
    fs::hard_link(d.mnt.join("dir/f"), d.mnt.join("hard")).unwrap();
    assert_eq!(fs::metadata(d.mnt.join("hard")).unwrap().len(), 4);
    let fifo = std::ffi::CString::new(d.mnt.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(d.backing.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(fs::symlink_metadata(d.backing.join("link"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(fs::metadata(d.backing.join("dir")).unwrap().is_dir());
    m.stop().unwrap();
}
