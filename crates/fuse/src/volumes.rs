//! The mount's volumes in the cache: `files`, and with `--critical-dir`
//! also `files-critical`, marked critical for the `volume` admission (the
//! paper's WAL policy: the log's writes cached, the rest bypassed). Each
//! file's window lies in one of them for the mount's life, chosen by the
//! file's path when it takes its first write (`Files::window_of`).

use std::sync::Arc;

use wcache_io::Volume;

use crate::files::Files;

/// The volume's name in the cache (and in `wcache status`).
pub const VOLUME_NAME: &str = "files";
/// The critical volume's name.
pub const CRITICAL_VOLUME_NAME: &str = "files-critical";

pub struct Volumes {
    files: Volume,
    /// The critical volume, and the files that say which windows are in it.
    critical: Option<(Volume, Arc<Files>)>,
}

impl Volumes {
    /// One volume: every window is in `files`.
    pub fn one(files: Volume) -> Volumes {
        Volumes {
            files,
            critical: None,
        }
    }

    /// The volumes `configure` set in `cache`, over `files`.
    pub fn of_cache(cache: &wcache_io::Cache, files: &Arc<Files>) -> Volumes {
        match cache.volumes() {
            [one] => Volumes::one(one.clone()),
            [main, critical] => Volumes {
                files: main.clone(),
                critical: Some((critical.clone(), Arc::clone(files))),
            },
            more => unreachable!("the mount sets one or two volumes, not {}", more.len()),
        }
    }

    /// The volume of the window at byte `window`.
    pub fn of(&self, window: u64) -> &Volume {
        match &self.critical {
            Some((critical, files)) if files.in_critical_volume(window) => critical,
            _ => &self.files,
        }
    }

    /// A volume for what is the engine's as a whole, not a volume's (an
    /// issuer's criticality, lent and ended).
    pub fn engine(&self) -> &Volume {
        &self.files
    }
}

/// Sets the mount's volumes in `config` (the files of `backing_dir`, with
/// `journal` under write-back-journaled), and with `critical_dirs` the
/// critical volume, marked critical. Refused: a critical volume under
/// write-back-journaled, whose journal is the files volume's alone.
pub fn configure(
    config: &mut wcache_io::CacheConfig,
    backing_dir: &std::path::Path,
    journal: Option<String>,
    critical_dirs: bool,
) -> Result<(), String> {
    let spec = |name: &str, journal| wcache_io::VolumeSpec {
        name: name.to_string(),
        backing: format!("files:{}", backing_dir.display()),
        journal,
    };
    config.volumes = vec![spec(VOLUME_NAME, journal)];
    if critical_dirs {
        if config.engine.write_policy == wcache_core::WritePolicyKind::JournaledWriteBack {
            return Err("--critical-dir is not available under write-back-journaled (the mount's one journal is the files volume's)".into());
        }
        config.volumes.push(spec(CRITICAL_VOLUME_NAME, None));
        config.engine.critical_volumes = vec![1];
    }
    Ok(())
}
