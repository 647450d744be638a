//! The listening sockets of `wcache serve` (the NBD Unix socket and TCP
//! address, and the operator's: `wcache_io::service::OpsListeners`): bound
//! before the cache is opened, so that a socket that cannot be bound
//! refuses the start before any device is written, and put in place once
//! it is open. A socket file is replaced only when nothing answers on it.
//! Once the NBD socket is in place the service manager is told the server
//! is ready (systemd's Type=notify). Wiring only.

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use wcache_io::lock::socket_answering;
use wcache_io::service::{notify_ready, OpsListeners};
use wcache_io::Volume;
use wcache_nbd::Server;

use crate::serve::{ServeArgs, ServeError};
use crate::tools::AnyError;

/// The listening sockets, bound before the cache is opened so that a
/// socket that cannot be bound refuses the start before any device is
/// written (recovery rewrites the superblock). The Unix socket is bound
/// under a temporary name beside its path and renamed into place once the
/// cache is open, so that its appearance still means "ready".
pub(crate) struct Listeners {
    /// (path, temporary path, listener)
    unix: Option<(PathBuf, PathBuf, UnixListener)>,
    tcp: Option<(String, TcpListener)>,
    /// `nbds` when the TCP listener offers TLS, else `nbd`.
    tcp_scheme: &'static str,
    ops: Option<OpsListeners>,
}

impl Listeners {
    pub(crate) fn bind(args: &ServeArgs) -> Result<Listeners, ServeError> {
        let socket = match (&args.socket, &args.listen) {
            (Some(s), _) => Some(s.clone()),
            (None, None) => Some(args.data_dir.join("wcache.sock")),
            (None, Some(_)) => None,
        };
        let control = match (&args.cache_opts.control, &socket) {
            (Some(path), _) => path.clone(),
            (None, Some(path)) if args.socket.is_some() => path.with_extension("ctl"),
            (None, _) => args.data_dir.join("wcache.ctl"),
        };
        let mut listeners = Listeners {
            unix: None,
            tcp: None,
            tcp_scheme: if args.tls == "off" { "nbd" } else { "nbds" },
            ops: None,
        };
        if let Some(path) = socket {
            if let Some(holder) = socket_answering(&path) {
                return Err(ServeError::Listen {
                    what: path.display().to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AddrInUse,
                        format!("{holder} answers on it: refused, nothing was touched"),
                    ),
                });
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let temp = path.with_file_name(format!(
                ".{}.{}",
                name.unwrap_or_default(),
                std::process::id()
            ));
            let _ = std::fs::remove_file(&temp);
            let listener = UnixListener::bind(&temp).map_err(|source| ServeError::Listen {
                what: path.display().to_string(),
                source,
            })?;
            listeners.unix = Some((path, temp, listener));
        }
        if let Some(addr) = &args.listen {
            let listener = TcpListener::bind(addr).map_err(|source| ServeError::Listen {
                what: addr.clone(),
                source,
            })?;
            listeners.tcp = Some((addr.clone(), listener));
        }
        match OpsListeners::bind(&control, args.cache_opts.metrics.as_deref()) {
            Ok(bound) => listeners.ops = Some(bound),
            Err(e) => {
                listeners.discard();
                return Err(e.into());
            }
        }
        Ok(listeners)
    }

    /// The Unix socket's path, if there is one.
    pub(crate) fn socket(&self) -> Option<PathBuf> {
        self.unix.as_ref().map(|(path, _, _)| path.clone())
    }

    /// Remove the bound sockets' files (a start refused after binding).
    pub(crate) fn discard(mut self) {
        if let Some((_, temp, _)) = &self.unix {
            let _ = std::fs::remove_file(temp);
        }
        if let Some(ops) = self.ops.take() {
            ops.discard();
        }
    }

    /// The operator's sockets, for the service to start (before the NBD
    /// socket is put in place, whose appearance means ready).
    pub(crate) fn take_ops(&mut self) -> OpsListeners {
        self.ops.take().expect("bound in Listeners::bind")
    }

    /// Hand the sockets to `server`, `announce` the URIs of the volumes,
    /// then put the Unix socket in place: whoever sees it appear finds the
    /// announcement already written.
    pub(crate) fn serve(
        self,
        server: &mut Server,
        volumes: &[Volume],
        announce: impl FnOnce(&[String]),
    ) -> Result<(), AnyError> {
        let mut uris = Vec::new();
        let mut publish = None;
        if let Some((path, temp, listener)) = self.unix {
            server.listen_unix(listener)?;
            let abs = match (path.parent(), path.file_name()) {
                (Some(dir), Some(name)) => std::fs::canonicalize(if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                })
                .map(|d| d.join(name))
                .unwrap_or_else(|_| path.clone()),
                _ => path.clone(),
            };
            for v in volumes {
                uris.push(format!("nbd+unix:///{}?socket={}", v.name(), abs.display()));
            }
            publish = Some((path, temp));
        }
        if let Some((addr, listener)) = self.tcp {
            let local = listener.local_addr().map(|a| a.to_string()).unwrap_or(addr);
            server.listen_tcp(listener)?;
            for v in volumes {
                uris.push(format!("{}://{local}/{}", self.tcp_scheme, v.name()));
            }
        }
        announce(&uris);
        if let Some((path, temp)) = publish {
            let _ = std::fs::remove_file(&path);
            std::fs::rename(&temp, &path).map_err(|source| ServeError::Listen {
                what: path.display().to_string(),
                source,
            })?;
        }
        notify_ready(&format!("serving {} export(s)", volumes.len()));
        Ok(())
    }
}
