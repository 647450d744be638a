//! Directories of the backing directory named by the mount's options (a
//! disk of its own, the critical volume): each checked to be a plain path
//! inside it, and the one a file open at a descriptor lies under.

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

/// Directories under the backing directory, deepest first, each with `T`.
pub struct Dirs<T> {
    dirs: Vec<(PathBuf, T)>,
}

impl<T> Dirs<T> {
    /// `rel` (paths relative to `backing_dir`, absolute; they need not exist
    /// yet: a database creates its log directory later), each with what
    /// `make` gives for it.
    pub fn new(
        backing_dir: &Path,
        rel: &[PathBuf],
        mut make: impl FnMut(&Path) -> Result<T, String>,
    ) -> Result<Dirs<T>, String> {
        let mut dirs = Vec::new();
        for rel in rel {
            if rel.is_absolute()
                || rel.as_os_str().is_empty()
                || rel
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(format!(
                    "{}: must be a plain path inside the backing directory",
                    rel.display()
                ));
            }
            dirs.push((backing_dir.join(rel), make(rel)?));
        }
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        Ok(Dirs { dirs })
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// What the deepest directory the file open at `fd` lies under has
    /// (its path now: a file keeps what it was given when asked, as a
    /// rename moves no data on a real disk either).
    pub fn of(&self, fd: RawFd) -> Option<&T> {
        if self.dirs.is_empty() {
            return None;
        }
        let path = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
        let found = self.dirs.iter().find(|(dir, _)| path.starts_with(dir));
        found.map(|(_, t)| t)
    }

    pub fn iter(&self) -> impl Iterator<Item = &(PathBuf, T)> {
        self.dirs.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_lies_under_its_deepest_named_directory_and_bad_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pg/pg_wal")).unwrap();
        let rel = [PathBuf::from("pg"), PathBuf::from("pg/pg_wal")];
        let dirs = Dirs::new(dir.path(), &rel, |p| Ok(p.display().to_string())).unwrap();
        let open = |rel: &str| {
            let path = dir.path().join(rel);
            std::fs::write(&path, b"x").unwrap();
            std::fs::File::open(path).unwrap()
        };
        use std::os::fd::AsRawFd;
        let of = |rel: &str| dirs.of(open(rel).as_raw_fd()).cloned();
        assert_eq!(of("pg/pg_wal/000001").as_deref(), Some("pg/pg_wal"));
        assert_eq!(of("pg/table").as_deref(), Some("pg"));
        assert_eq!(of("top").as_deref(), None);
        assert_eq!(
            of("pg/pg_wal2").as_deref(),
            Some("pg"),
            "a prefix of a name is not its directory"
        );
        for bad in ["/abs", "../out", "a/../../b", "", "./a"] {
            let made = Dirs::new(dir.path(), &[PathBuf::from(bad)], |_| Ok(()));
            assert!(made.is_err(), "{bad:?} is refused");
        }
    }
}
