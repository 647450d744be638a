//! Starting and stopping a mount: the checks of the backing directory and
//! the mountpoint, the directory's lock, the cache opened with the files
//! as its one volume, the pages a crash left in the cache destaged to
//! their files (grown first to the sizes recorded in the cache) before
//! anything is served (so the file table starts empty
//! on every mount), then the FUSE session until an unmount or a stop.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wcache_core::types::PAGE_INDEX_MAX;
use wcache_io::lock::{DeviceLock, LockError, LockMode};
use wcache_io::{BlockDevice, Cache, CacheConfig, CacheDeviceSpec, CacheError, CloseReport};

use crate::callers::{critical_callers_hook, Callers, CriticalRules};
use crate::data::Data;
use crate::dirs::Dirs;
use crate::dirty::{DirtyLimits, DirtyPages};
use crate::disk::Disks;
use crate::files::{Files, FilesError};
use crate::fs::WcacheFs;
use crate::kernel_locks::KernelLocks;
use crate::nodes::Nodes;
use crate::volumes::Volumes;

pub use crate::volumes::VOLUME_NAME;
/// A drain at start gives up when no page was destaged for this long.
const DRAIN_STALL: Duration = Duration::from_secs(60);

/// Everything `wcache mount` needs.
pub struct MountConfig {
    pub backing_dir: PathBuf,
    pub mountpoint: PathBuf,
    /// The cache; its volumes are set here (the files of `backing_dir`).
    pub cache: CacheConfig,
    /// Under write-back-journaled: where the files volume's journal lives.
    pub journal: Option<String>,
    pub rules: CriticalRules,
    /// FUSE request threads.
    pub threads: usize,
    /// Time the backing files' data I/O on this device model in real time
    /// (`hdd`, `raid5`, ...: `disk.rs`); None: the directory's own speed.
    pub emulate: Option<String>,
    /// Directories (relative to `backing_dir`) whose files lie on an
    /// emulated disk of their own, of the same model (with `emulate`).
    pub emulate_own_disk: Vec<PathBuf>,
    /// Directories (relative to `backing_dir`) whose files go to the
    /// critical volume (`volumes.rs`).
    pub critical_dirs: Vec<PathBuf>,
    /// Writes held in memory until fsync or writeback (`dirty.rs`).
    pub dirty: DirtyLimits,
}

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("backing directory {path}: {why}")]
    BackingDir { path: String, why: String },
    #[error("mountpoint {path}: {why}")]
    Mountpoint { path: String, why: String },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error("the cache holds {dirty} dirty pages, but the file table {table} was made for another cache ({other:?}): their files are unknown; start with --force to DISCARD them")]
    ForeignTable {
        dirty: u64,
        table: String,
        other: String,
    },
    #[error("cannot mount on {path}: {source}")]
    Fuse {
        path: String,
        source: std::io::Error,
    },
}

/// The mount as a front end of the service: the FUSE session until stop.
pub struct MountFront {
    session: Option<fuser::BackgroundSession>,
    pub callers: Arc<Callers>,
    /// The held writes, written back at the stop.
    pub dirty: Arc<DirtyPages>,
    pub mountpoint: PathBuf,
    /// Criticality lent through the kernel's inode locks (its watcher).
    pub locks: Arc<KernelLocks>,
    started: std::time::Instant,
    _lock: DeviceLock,
}

/// A running mount with its cache (for a caller without the service
/// lifecycle: the tests).
pub struct Mounted {
    front: MountFront,
    cache: Cache,
    pub callers: Arc<Callers>,
}

fn check_backing_dir(path: &Path) -> Result<PathBuf, MountError> {
    let bad = |why: String| MountError::BackingDir {
        path: path.display().to_string(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.is_dir() {
        return Err(bad("not a directory".into()));
    }
    std::fs::canonicalize(path).map_err(|e| bad(e.to_string()))
}

/// The mountpoint must be an empty directory that nothing is mounted on.
fn check_mountpoint(path: &Path) -> Result<(), MountError> {
    let bad = |why: String| MountError::Mountpoint {
        path: path.display().to_string(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.is_dir() {
        return Err(bad("not a directory".into()));
    }
    let full = std::fs::canonicalize(path).map_err(|e| bad(e.to_string()))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let in_use = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(&m.replace("\\040", " ")) == full);
    if in_use {
        return Err(bad("something is mounted there already".into()));
    }
    let mut entries = std::fs::read_dir(path).map_err(|e| bad(e.to_string()))?;
    if entries.next().is_some() {
        return Err(bad("not empty".into()));
    }
    Ok(())
}

/// The cache device's identity, for the file table.
fn cache_identity(config: &CacheConfig) -> String {
    match &config.cache {
        CacheDeviceSpec::File { path, .. } => std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.clone())
            .display()
            .to_string(),
        CacheDeviceSpec::Memory { .. } => "mem".to_string(),
    }
}

/// Opens the cache over `files`, destaging what an earlier mount left in
/// it, so that the file table can start empty.
fn open_cache(config: &CacheConfig, files: &Arc<Files>, force: bool) -> Result<Cache, MountError> {
    // Every volume's backing is the files: a window is one file's, in
    // whichever volume it lies.
    let provided = || {
        let files = Some(Arc::clone(files) as Arc<dyn BlockDevice>);
        vec![files; config.volumes.len()]
    };
    let identity = cache_identity(config);
    let cache = Cache::open_with(config, provided())?;
    let dirty = cache.dirty_pages();
    let table = files.table_identity();
    if dirty > 0 && table != identity && !force {
        return Err(MountError::ForeignTable {
            dirty,
            table: files.dir_name(),
            other: table,
        });
    }
    if files.table_len() == 0 && table == identity {
        return Ok(cache);
    }
    if dirty > 0 && table == identity {
        // A window's pages, its size record too, are in one of the volumes.
        for volume in cache.volumes() {
            files.apply_size_records(cache.page_size_bytes(), |at, buf| {
                volume.read(at, buf).map_err(|e| e.to_string())
            })?;
        }
        tracing::info!(
            "destaging {dirty} dirty pages an earlier mount left in the cache to their files"
        );
        cache.drain(DRAIN_STALL, |left| {
            tracing::debug!("{left} dirty pages left")
        })?;
    }
    // Closed clean with no dirty page (every record freed), then the table emptied.
    let closed = cache.close()?;
    if closed.dirty_pages > 0 && !force {
        return Err(MountError::Cache(CacheError::Missing(format!(
            "{} dirty pages could not be destaged",
            closed.dirty_pages
        ))));
    }
    files.reset(&identity)?;
    let config = CacheConfig {
        force: true,
        ..config.clone()
    };
    Ok(Cache::open_with(&config, provided())?)
}

/// The emulated disks under the backing directory `dir`, if asked for.
fn emulated_disks(config: &MountConfig, dir: &Path) -> Result<Option<Arc<Disks>>, MountError> {
    let bad = |why: String| MountError::BackingDir {
        path: dir.display().to_string(),
        why,
    };
    match &config.emulate {
        Some(model) => Ok(Some(Arc::new(
            Disks::new(model, dir, &config.emulate_own_disk).map_err(bad)?,
        ))),
        None if !config.emulate_own_disk.is_empty() => Err(bad(
            "a directory of its own disk needs --emulate MODEL".into(),
        )),
        None => Ok(None),
    }
}

/// The backing directory's files (with the directories of the critical
/// volume) and the cache's config with the mount's volumes set.
fn files_and_volumes(
    config: &MountConfig,
    dir: &Path,
    disk: Option<Arc<Disks>>,
) -> Result<(Arc<Files>, CacheConfig), MountError> {
    let bad = |why: String| MountError::BackingDir {
        path: dir.display().to_string(),
        why,
    };
    let critical = Dirs::new(dir, &config.critical_dirs, |_| Ok(()))
        .map_err(|why| bad(format!("--critical-dir {why}")))?;
    let critical_volume = !critical.is_empty();
    let page = config.cache.engine.page_size_bytes;
    let files = Files::open(dir, (PAGE_INDEX_MAX >> 1) * page, disk, critical)?;
    let mut cache_config = config.cache.clone();
    let journal = config.journal.clone();
    crate::volumes::configure(&mut cache_config, dir, journal, critical_volume).map_err(bad)?;
    cache_config.block_size_bytes = page as u32;
    Ok((Arc::new(files), cache_config))
}

/// Checks, locks, opens the cache, and mounts: the cache (for the
/// service) and the mount (its front end).
pub fn start(config: MountConfig) -> Result<(Cache, MountFront), MountError> {
    let dir = check_backing_dir(&config.backing_dir)?;
    check_mountpoint(&config.mountpoint)?;
    let lock = DeviceLock::acquire(&dir, LockMode::Exclusive, "backing directory")?;
    let page = config.cache.engine.page_size_bytes;
    let disk = emulated_disks(&config, &dir)?;
    let (files, cache_config) = files_and_volumes(&config, &dir, disk.clone())?;
    let cache = open_cache(&cache_config, &files, config.cache.force)?;
    let callers = Arc::new(Callers::new(config.rules.clone()));
    let operator = cache.operator();
    operator.on_critical_callers(critical_callers_hook(
        Arc::clone(&callers),
        operator.clone(),
    ));
    let root_name = crate::nodes::cstr(dir.as_os_str()).map_err(|e| fuse_err(&dir, e))?;
    let root: OwnedFd = crate::nodes::open_at(
        libc::AT_FDCWD,
        &root_name,
        libc::O_PATH | libc::O_DIRECTORY,
        0,
    )
    .map_err(|e| fuse_err(&dir, e))?;
    let nodes = Nodes::new(root, disk).map_err(|e| fuse_err(&dir, e))?;
    let volumes = Arc::new(Volumes::of_cache(&cache, &files));
    let dirty = DirtyPages::start(Arc::clone(&volumes), page, config.dirty);
    let data = Data::new(Arc::clone(&volumes), files, Arc::clone(&dirty), page);
    let canonical =
        std::fs::canonicalize(&config.mountpoint).map_err(|e| MountError::Mountpoint {
            path: config.mountpoint.display().to_string(),
            why: e.to_string(),
        })?;
    let locks = KernelLocks::start(volumes, Arc::clone(&callers), &canonical);
    let (held, lent) = (Arc::clone(&dirty), Arc::clone(&locks));
    operator.on_front_metrics(Box::new(move || {
        let mut metrics = held.metrics();
        metrics.extend(lent.metrics());
        metrics
    }));
    let fs = WcacheFs::new(nodes, data, Arc::clone(&callers), Arc::clone(&locks));
    let session = mount_session(fs, &config.mountpoint, config.threads, &dir)?;
    let front = MountFront {
        session: Some(session),
        callers,
        dirty,
        locks,
        mountpoint: config.mountpoint,
        started: std::time::Instant::now(),
        _lock: lock,
    };
    Ok((cache, front))
}

impl MountFront {
    /// Unmounts, and waits for the session to end; where files are still
    /// open, detaches the mount instead (their next requests fail once the
    /// cache is closed) and leaves the session's thread to the process.
    /// Then the held writes go to the cache.
    pub fn finish(mut self) {
        if let Some(session) = self.session.take() {
            if self.unmount() {
                if let Err(e) = session.join() {
                    tracing::warn!("the FUSE session of {}: {e}", self.mountpoint.display());
                }
            }
        }
        self.locks.stop();
        let held = self.dirty.held_bytes();
        let lost = self.dirty.stop();
        if lost > 0 {
            tracing::error!(
                "{lost} bytes of writes never fsynced could not be written back to the cache: lost"
            );
        } else if held > 0 {
            tracing::info!("{held} bytes of held writes written back to the cache");
        }
    }

    /// Unmounts; where files are still open, detaches the mount. True if unmounted.
    fn unmount(&self) -> bool {
        let shown = self.mountpoint.display();
        let Ok(path) = crate::nodes::cstr(self.mountpoint.as_os_str()) else {
            return false;
        };
        // SAFETY: a valid C string.
        if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
            return true;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EBUSY) {
            tracing::warn!("files are still open on {shown}: detached; their next requests fail");
            // SAFETY: as above.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        } else {
            tracing::warn!("unmount of {shown}: {e}");
        }
        false
    }
}

impl wcache_io::service::FrontEnd for MountFront {
    fn stop(self: Box<Self>) {
        self.finish();
    }

    fn clients(&self) -> wcache_io::ops::ClientsHook {
        let (peer, started) = (format!("fuse {}", self.mountpoint.display()), self.started);
        Box::new(move || {
            vec![wcache_io::ops::ClientStatus {
                peer: peer.clone(),
                export: VOLUME_NAME.to_string(),
                connected_s: started.elapsed().as_secs_f64(),
            }]
        })
    }
}

impl Mounted {
    /// `start`, keeping the cache and the mount together.
    pub fn start(config: MountConfig) -> Result<Mounted, MountError> {
        let (cache, front) = start(config)?;
        let callers = Arc::clone(&front.callers);
        Ok(Mounted {
            front,
            cache,
            callers,
        })
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Bytes of writes held in memory now (`dirty.rs`).
    pub fn held_bytes(&self) -> u64 {
        self.front.dirty.held_bytes()
    }

    /// Unmounts and closes the cache: a clean shutdown is recorded; dirty
    /// pages stay for the next mount.
    pub fn stop(self) -> Result<CloseReport, MountError> {
        self.front.finish();
        Ok(self.cache.close()?)
    }
}

fn fuse_err(path: &Path, source: std::io::Error) -> MountError {
    MountError::Fuse {
        path: path.display().to_string(),
        source,
    }
}

fn mount_session(
    fs: WcacheFs,
    mountpoint: &Path,
    threads: usize,
    dir: &Path,
) -> Result<fuser::BackgroundSession, MountError> {
    use fuser::MountOption as O;
    let mut options = fuser::Config::default();
    options.mount_options = vec![
        O::FSName(format!("wcache:{}", dir.display())),
        O::Subtype("wcache".into()),
        O::DefaultPermissions,
        O::RW,
        O::NoDev,
        O::NoSuid,
    ];
    // Every user may use the mount (PostgreSQL runs as its own user);
    // the kernel checks permissions (default_permissions).
    options.acl = fuser::SessionACL::All;
    options.n_threads = Some(threads.max(1));
    options.clone_fd = true;
    fuser::Session::new(fs, mountpoint, &options)
        .and_then(fuser::Session::spawn)
        .map_err(|e| fuse_err(mountpoint, e))
}
