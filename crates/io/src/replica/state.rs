//! A replicated cache's state file, beside its cache device on each host:
//! which cache it is (an id drawn when the cache was first replicated), the
//! epoch (raised by every takeover, the fence against an old primary), the
//! role of this copy, and whether a mirror is consistent (false from a
//! resync's first frame to its end). Written whole to a temporary file,
//! synced, renamed and the directory synced: a crash leaves the old state
//! or the new, never a mix. It must never be guessed: a file that does not
//! parse is an error naming it.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The role of this copy of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Serves the cache (`wcache serve`), mirrored or not.
    Primary,
    /// Holds a primary's mirror (`wcache replica`).
    Replica,
}

/// What the state file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaState {
    /// The cache's id in hex (32 digits).
    pub cache_id: String,
    pub epoch: u64,
    pub role: Role,
    /// A replica's mirror is a cache a takeover can recover (false while a
    /// resync runs: some blocks are newer than others).
    pub consistent: bool,
}

/// Why the state file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("replication state {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("replication state {path}: not a wcache replication state ({what}); move it away only if no copy of this cache needs it")]
    Parse { path: String, what: String },
}

impl ReplicaState {
    /// A new cache's state as a primary: a fresh id, epoch 1.
    pub fn new_primary() -> io::Result<ReplicaState> {
        let mut id = [0u8; 16];
        fs::File::open("/dev/urandom")?.read_exact(&mut id)?;
        Ok(ReplicaState {
            cache_id: super::wire::show_id(&id),
            epoch: 1,
            role: Role::Primary,
            consistent: true,
        })
    }

    /// The id as bytes (checked at load).
    pub fn id_bytes(&self) -> [u8; 16] {
        parse_id(&self.cache_id).unwrap_or([0; 16])
    }

    /// The state at `path`, or None where there is no file.
    pub fn load(path: &Path) -> Result<Option<ReplicaState>, StateError> {
        let shown = path.display().to_string();
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateError::Io {
                    path: shown,
                    source,
                })
            }
        };
        let state: ReplicaState = serde_json::from_str(&text).map_err(|e| StateError::Parse {
            path: shown.clone(),
            what: e.to_string(),
        })?;
        if parse_id(&state.cache_id).is_none() {
            return Err(StateError::Parse {
                path: shown,
                what: format!("cache_id {:?} is not 32 hex digits", state.cache_id),
            });
        }
        Ok(Some(state))
    }

    /// Writes the state durably (temporary file, fsync, rename, fsync of the directory).
    pub fn store(&self, path: &Path) -> Result<(), StateError> {
        let io = |source| StateError::Io {
            path: path.display().to_string(),
            source,
        };
        let tmp = temporary(path);
        let text = serde_json::to_string_pretty(self).expect("a state serializes");
        let mut f = fs::File::create(&tmp).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.write_all(b"\n").map_err(io)?;
        f.sync_all().map_err(io)?;
        fs::rename(&tmp, path).map_err(io)?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        fs::File::open(dir.unwrap_or(Path::new(".")))
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        Ok(())
    }
}

fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// 32 hex digits to 16 bytes.
pub fn parse_id(hex: &str) -> Option<[u8; 16]> {
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

/// Where a cache device's replication state lives by default: beside it,
/// `CACHE.replica`.
pub fn default_path(cache: &Path) -> PathBuf {
    let mut name = cache.as_os_str().to_os_string();
    name.push(".replica");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_survives_a_store_and_a_load_and_garbage_is_named() {
        let dir = std::env::temp_dir().join(format!("wcache-state-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cache.replica");
        assert_eq!(ReplicaState::load(&path).unwrap(), None);
        let state = ReplicaState::new_primary().unwrap();
        assert_eq!(state.epoch, 1);
        assert_ne!(state.id_bytes(), [0; 16]);
        state.store(&path).unwrap();
        assert_eq!(ReplicaState::load(&path).unwrap(), Some(state.clone()));
        fs::write(
            &path,
            "{\"cache_id\": \"xyz\", \"epoch\": 1, \"role\": \"primary\", \"consistent\": true}",
        )
        .unwrap();
        let e = ReplicaState::load(&path).unwrap_err().to_string();
        assert!(e.contains("cache_id") && e.contains("cache.replica"), "{e}");
        fs::write(&path, "not json").unwrap();
        let e = ReplicaState::load(&path).unwrap_err().to_string();
        assert!(e.contains("not a wcache replication state"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
