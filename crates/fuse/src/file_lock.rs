//! A file's write lock (writes and size changes, one at a time: a partial
//! page is read, patched and written under it) that passes criticality
//! on: a critical caller that must wait for a holder that is not critical
//! makes the holder critical until the lock is free (process criticality
//! inheritance, Kim et al. §4.2.1), so the holder's writes, which the
//! critical caller waits behind, are admitted to the cache.

use std::sync::{Mutex, MutexGuard};

use wcache_io::Volume;

use crate::callers::Caller;

#[derive(Default)]
pub struct FileLock {
    lock: Mutex<()>,
    /// The holder's issuer (0: none, or the kernel's own).
    holder: Mutex<u32>,
}

pub struct FileGuard<'a> {
    _guard: MutexGuard<'a, ()>,
    owner: &'a FileLock,
}

impl Drop for FileGuard<'_> {
    fn drop(&mut self) {
        *self.owner.holder.lock().unwrap_or_else(|e| e.into_inner()) = 0;
    }
}

impl FileLock {
    /// Takes the lock for `me`; while it waits, a critical `me` lends its
    /// criticality to the holder (through `volume`'s engine).
    pub fn lock<'a>(&'a self, me: Caller, volume: &Volume) -> FileGuard<'a> {
        let guard = match self.lock.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => self.wait(me, volume),
        };
        *self.holder.lock().unwrap_or_else(|e| e.into_inner()) = me.issuer;
        FileGuard {
            _guard: guard,
            owner: self,
        }
    }

    fn wait(&self, me: Caller, volume: &Volume) -> MutexGuard<'_, ()> {
        let holder = *self.holder.lock().unwrap_or_else(|e| e.into_inner());
        let critical = me.critical || (me.issuer != 0 && volume.issuer_is_critical(me.issuer));
        let lent = critical
            && holder != 0
            && holder != me.issuer
            && !volume.issuer_is_critical(holder)
            && volume.inherit_criticality(holder).is_ok();
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if lent {
            if let Err(e) = volume.end_inherited_criticality(holder) {
                tracing::warn!("issuer {holder}: {e}");
            }
        }
        guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{memory_cache, until};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_critical_waiter_makes_the_holder_critical_until_it_has_the_lock() {
        let cache = memory_cache("cp-pi", None);
        let volume = cache.volumes()[0].clone();
        let lock = Arc::new(FileLock::default());
        let (holder, waiter) = (
            Caller {
                issuer: 100,
                critical: false,
            },
            Caller {
                issuer: 200,
                critical: true,
            },
        );
        let held = lock.lock(holder, &volume);
        let (l, v) = (Arc::clone(&lock), volume.clone());
        let t = std::thread::spawn(move || {
            let _g = l.lock(waiter, &v);
            // The holder's inheritance ended once the waiter had the lock.
            v.issuer_is_critical(100)
        });
        until("the holder inherits", || volume.issuer_is_critical(100));
        drop(held);
        assert!(!t.join().unwrap(), "inheritance ends at the hand-over");
        assert!(!volume.issuer_is_critical(100));
        // A waiter that is not critical lends nothing.
        let held = lock.lock(holder, &volume);
        let (l, v) = (Arc::clone(&lock), volume.clone());
        let t = std::thread::spawn(move || {
            drop(l.lock(
                Caller {
                    issuer: 300,
                    critical: false,
                },
                &v,
            ))
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!volume.issuer_is_critical(100));
        drop(held);
        t.join().unwrap();
        drop(volume);
        cache.close().unwrap();
    }
}
