//! `wcache mount`: a filesystem front end (FUSE) that knows which process
//! issued each write. Metadata passes through to a backing directory; file
//! data goes through the cache, each file a window of a volume, with the
//! caller as the request's issuer (`docs/mount.md`).
//!
//! Its parts: `mount` (start and stop), `fs` (the operations the kernel
//! sends), `nodes` (inode numbers), `data` (file data through the cache),
//! `dirty` (writes held in memory until fsync or writeback), `file_lock` (a file's
//! writes one at a time, passing criticality on),
//! `kernel_locks` (criticality lent to a request that holds the kernel's
//! inode lock a critical process waits on),
//! `files` (the directory as the cache's backing device), `table` and
//! `handle` (each window's file, durably), `disk` (an emulated slow
//! disk under the files), `dirs` (directories named by options),
//! `volumes` (the files volume and the critical one), `callers` (issuers
//! and their criticality).

pub mod callers;
pub mod data;
pub mod dirs;
pub mod dirty;
pub mod disk;
pub mod file_lock;
pub mod files;
pub mod fs;
pub mod handle;
pub mod kernel_locks;
pub mod mount;
pub mod nodes;
pub mod table;
#[cfg(test)]
mod test_support;
pub mod volumes;

pub use callers::{Caller, Callers, CriticalRules};
pub use dirty::DirtyLimits;
pub use mount::{start, MountConfig, MountError, MountFront, Mounted};
