//! The clients connected to a server, for operators: who (peer), to which
//! export, since when. A connection registers once its handshake picked an
//! export and is gone from the list when it ends, on every path (a guard).
//! It exists so that `wcache status` can say who is using the cache; it
//! must never hold its lock across I/O.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One connected client, as listed.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientInfo {
    /// `tcp ADDR` or `unix pid N`.
    pub peer: String,
    pub export: String,
    pub connected: Duration,
}

struct Entry {
    id: u64,
    peer: String,
    export: String,
    since: Instant,
}

#[derive(Default)]
struct List {
    next_id: u64,
    entries: Vec<Entry>,
}

/// The list of connected clients; cheap to clone (one list).
#[derive(Clone, Default)]
pub struct Clients(Arc<Mutex<List>>);

impl Clients {
    fn lock(&self) -> std::sync::MutexGuard<'_, List> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a client; it is listed until the returned guard is dropped.
    pub(crate) fn register(&self, peer: &str, export: &str) -> Registered {
        let mut list = self.lock();
        list.next_id += 1;
        let id = list.next_id;
        list.entries.push(Entry {
            id,
            peer: peer.to_string(),
            export: export.to_string(),
            since: Instant::now(),
        });
        Registered {
            clients: self.clone(),
            id,
        }
    }

    /// Every client connected now, oldest first.
    pub fn list(&self) -> Vec<ClientInfo> {
        self.lock()
            .entries
            .iter()
            .map(|e| ClientInfo {
                peer: e.peer.clone(),
                export: e.export.clone(),
                connected: e.since.elapsed(),
            })
            .collect()
    }
}

/// A listed client; dropping it takes the client off the list.
pub(crate) struct Registered {
    clients: Clients,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.clients.lock().entries.retain(|e| e.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_listed_until_its_guard_drops() {
        let clients = Clients::default();
        let a = clients.register("unix pid 1", "disk");
        let b = clients.register("tcp 127.0.0.1:5", "db");
        let list = clients.list();
        assert_eq!(list.len(), 2);
        assert_eq!(
            (list[0].peer.as_str(), list[0].export.as_str()),
            ("unix pid 1", "disk")
        );
        drop(a);
        let list = clients.list();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].export, "db");
        drop(b);
        assert!(clients.list().is_empty());
    }
}
