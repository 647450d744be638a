//! `wcache serve`: cached volumes over NBD on real devices.
//!
//! This module exists to wire the pieces together: it turns the arguments
//! into a `CacheConfig`, opens the cache with the lifecycle every front end
//! uses (`wcache_io::cache`: devices from their specs, format or recovery,
//! refusal of another configuration's dirty cache without `--force`, one
//! `Driver` with a volume per `--export`), serves each volume over NBD
//! through a thin `Export` adapter, and runs the service every front end
//! runs (`wcache_io::service`: signals, the bounded stop on SIGTERM or
//! SIGINT, the control socket, metrics, the close report). A cache file or
//! block device is persistent and write-back by default; a cache in
//! process memory (`--cache mem`) keeps nothing, so write-back on it needs
//! the loud benchmark-only flag. It must never make cache decisions (the
//! engine does), move bytes itself (the driver does), open, format or
//! recover a cache other than through the lifecycle, nor stop other than
//! through the service. Its parts: `args` (the options), `config` (the
//! same from a TOML file), `settings` (options to a `CacheConfig`),
//! `listeners` (the sockets and the service manager's readiness),
//! `nbd_volume` (a volume as an NBD export).

mod args;
mod config;
mod listeners;
mod nbd_volume;
pub(crate) mod replication;
pub(crate) mod settings;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wcache_io::ops::{ClientStatus, ClientsHook};
use wcache_io::service::{self, FrontEnd, Service, ServiceError};
use wcache_io::{Cache, CacheConfig, Volume};
use wcache_nbd::tls::{self, ClientAuth, TlsError};
use wcache_nbd::{Server, ServerConfig, ServerTls};

pub use args::ServeArgs;
use listeners::Listeners;
use nbd_volume::NbdVolume;
use settings::cache_config;

type AnyError = Box<dyn std::error::Error>;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--volatile-write-back-for-benchmarks means write-back, but --write-policy is {0}")]
    ConflictingPolicy(String),
    #[error("cannot listen on {what}: {source}")]
    Listen {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("--{option} {value}: no export is called {name:?} (the exports: {exports})")]
    UnknownExport {
        option: &'static str,
        value: String,
        name: String,
        exports: String,
    },
    #[error("--export-admission {0:?}: expected EXPORT=POLICY, e.g. db=cp-pi-ioi")]
    ExportAdmission(String),
    #[error(
        "--tls {0} needs --tls-certificates DIR (a directory holding server-cert.pem and \
         server-key.pem, docs/nbd.md \"TLS\")"
    )]
    TlsCertificatesNeeded(String),
    #[error("--tls {0} applies to the TCP listener, and there is none: add --listen HOST:PORT")]
    TlsWithoutListen(String),
    #[error("--tls-verify-peer needs --tls on or --tls require")]
    TlsVerifyPeerWithoutTls,
    #[error("--tls-certificates: {0}")]
    Tls(#[from] TlsError),
}

/// The NBD server as the service's front end.
struct NbdFrontEnd(Server);

impl FrontEnd for NbdFrontEnd {
    fn stop(self: Box<Self>) {
        self.0.stop();
    }

    fn clients(&self) -> ClientsHook {
        let clients = self.0.clients();
        Box::new(move || {
            let list = clients.list().into_iter();
            list.map(|c| ClientStatus {
                peer: c.peer,
                export: c.export,
                connected_s: c.connected.as_secs_f64(),
            })
            .collect()
        })
    }

    fn report(&self) -> Vec<String> {
        let served = self.0.stats();
        vec![format!(
            "NBD: {} requests served, {} run on their connection's reader thread",
            served.requests_served, served.requests_inline
        )]
    }
}

/// `given`: the ids of the options given on the command line (they win over `--config`).
pub fn serve(args: ServeArgs, given: &[String]) -> Result<(), AnyError> {
    let args = match args.config.clone() {
        Some(path) => config::apply(args, &path, given)?,
        None => args,
    };
    let prepared = Service::prepare();
    // Every setting is checked before any file is touched.
    let mut config = cache_config(&args)?;
    config.replicate = replication::mirror_options(&args, &config)?;
    config.check()?;
    let tls = nbd_tls(&args)?;
    if config.is_volatile_write_back() {
        for line in service::volatile_write_back_warning() {
            say_err!("{line}");
        }
    }
    let defaults_used =
        args.cache_opts.cache.is_none() || (args.backing.is_none() && args.exports.is_empty());
    let default_socket = args.socket.is_none() && args.listen.is_none();
    // The data directory holds this server's sockets (and the default
    // files): one server at a time.
    let mut _dir_lock = None;
    if defaults_used
        || default_socket
        || (args.socket.is_none() && args.cache_opts.control.is_none())
    {
        _dir_lock = Some(service::lock_data_dir(&args.data_dir).map_err(ServeError::from)?);
    }
    let mut listeners = Listeners::bind(&args)?;
    let socket = listeners.socket();
    if let Err(e) = replication::check_or_take_over(&args, &config) {
        listeners.discard();
        return Err(e);
    }
    let cache = match Cache::open(&config) {
        Ok(cache) => cache,
        Err(e) => {
            listeners.discard();
            return Err(e.into());
        }
    };
    for line in service::open_report(&cache, &config) {
        say!("{line}");
    }
    let mut server = NbdFrontEnd(start_nbd_server(&args, &cache, tls)?);
    let mut service = prepared
        .start(cache, &server, listeners.take_ops())
        .map_err(ServeError::from)?;
    let cache = service.cache();
    listeners.serve(&mut server.0, cache.volumes(), |uris| {
        print_banner(&args, &config, cache, socket.as_deref(), uris);
        for line in service.endpoint_lines() {
            say!("{line}");
        }
    })?;
    service.wait_for_stop();
    let grace = Duration::from_secs_f64(args.cache_opts.stop_timeout);
    service.stop(Box::new(server), grace)?;
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The NBD server's TLS from `--tls`, `--tls-certificates` and
/// `--tls-verify-peer`, its files read and checked: a start that cannot
/// serve TLS is refused before any device is touched.
fn nbd_tls(args: &ServeArgs) -> Result<ServerTls, ServeError> {
    if args.tls == "off" {
        if args.tls_verify_peer {
            return Err(ServeError::TlsVerifyPeerWithoutTls);
        }
        return Ok(ServerTls::Off);
    }
    let Some(dir) = &args.tls_certificates else {
        return Err(ServeError::TlsCertificatesNeeded(args.tls.clone()));
    };
    if args.listen.is_none() {
        return Err(ServeError::TlsWithoutListen(args.tls.clone()));
    }
    let clients = match args.tls_verify_peer {
        true => ClientAuth::Required,
        false => ClientAuth::None,
    };
    let config = tls::server_config(dir, clients)?;
    Ok(match args.tls.as_str() {
        "require" => ServerTls::Require(config),
        _ => ServerTls::On(config),
    })
}

/// The NBD server over the cache's volumes (not yet listening).
fn start_nbd_server(args: &ServeArgs, cache: &Cache, tls: ServerTls) -> Result<Server, AnyError> {
    let mut builder = Server::builder();
    for volume in cache.volumes() {
        builder = builder.export(volume.name(), Arc::new(NbdVolume(volume.clone())));
    }
    let server_config = ServerConfig {
        workers_count: args.workers,
        receive_poll: Duration::from_micros(args.poll_us),
        tls,
        ..ServerConfig::default()
    };
    Ok(builder.config(server_config).start()?)
}

/// What is served where, and how to attach it.
fn print_banner(
    args: &ServeArgs,
    config: &CacheConfig,
    cache: &Cache,
    socket: Option<&Path>,
    uris: &[String],
) {
    let volumes = cache.volumes();
    say!(
        "wcache: serving {} export(s), write policy {}, destage order {}, admission {}{}",
        volumes.len(),
        config.engine.write_policy.name(),
        args.cache_opts.order,
        args.cache_opts.admission,
        match config.engine.sequential_cutoff_bytes {
            0 => String::new(),
            n => format!(" (sequential cutoff {n} bytes)"),
        }
    );
    say!(
        "  staleness: {}",
        service::staleness_text(&config.engine.staleness)
    );
    if args.cache_opts.persist_on_flush {
        let within = if args.cache_opts.flush_interval > 0.0 {
            format!(", or within about {} s", args.cache_opts.flush_interval)
        } else {
            String::new()
        };
        say!(
            "wcache: persist-on-flush: writes are durable after FLUSH or FUA{within} (a power \
             loss may lose acknowledged writes not yet flushed; a process crash loses none)"
        );
    }
    for line in service::cache_device_lines(cache) {
        say!("{line}");
    }
    for (i, v) in volumes.iter().enumerate() {
        let id = i as u16;
        let own = config
            .engine
            .volume_admissions
            .iter()
            .rev()
            .find(|(n, _)| *n == id);
        say!(
            "  export {}: {} ({} MiB){}{}",
            v.name(),
            v.backing_name(),
            v.backing_size_bytes() >> 20,
            own.map(|(_, p)| format!(", admission {p}"))
                .unwrap_or_default(),
            if config.engine.critical_volumes.contains(&id) {
                ", critical"
            } else {
                ""
            }
        );
        let tail = v.backing_size_bytes() - v.size_bytes();
        if tail > 0 {
            say!(
                "    note: its last {tail} bytes are less than one {}-byte block and are not exported",
                args.block_size
            );
        }
    }
    print_attach(volumes, socket, uris);
}

/// The NBD URIs, and how to attach the first.
fn print_attach(volumes: &[Volume], socket: Option<&Path>, uris: &[String]) {
    for uri in uris {
        say!("  NBD URI: {uri}");
    }
    if let Some(uri) = uris.first() {
        say!("Attach it (as root where noted):");
        if uri.starts_with("nbds:") {
            say!("  nbdinfo '{uri}?tls-certificates=DIR'   (DIR: the client's ca-cert.pem, client-cert.pem, client-key.pem)");
        } else {
            say!("  nbdinfo '{uri}'");
        }
        say!("  mkdir -p /mnt/wcache /mnt/disk && nbdfuse /mnt/wcache '{uri}' &");
        say!("    then: dev=$(losetup -f --show /mnt/wcache/nbd); mkfs.ext4 $dev; mount $dev /mnt/disk");
        if let Some(path) = socket {
            let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            say!(
                "  nbd-client -unix {} /dev/nbd0 -N {}   (needs the nbd kernel module)",
                abs.display(),
                volumes[0].name()
            );
        }
        say!("  qemu-system-x86_64 -drive file={uri},format=raw,if=virtio ...");
        say!(
            "Stop with Ctrl-C or SIGTERM (in-flight requests finish first, within --stop-timeout)."
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    /// `wcache serve`'s arguments alone, for parsing in tests.
    #[derive(Parser)]
    pub(crate) struct Serve {
        #[command(flatten)]
        pub(crate) args: ServeArgs,
    }

    #[test]
    fn critical_exports_and_export_admissions_become_volume_numbers() {
        let args = Serve::parse_from([
            "serve",
            "--export",
            "db=/tmp/db.img",
            "--export",
            "wal=/tmp/wal.img",
            "--admission",
            "volume",
            "--critical",
            "wal",
            "--export-admission",
            "db=cp-pi-ioi",
        ])
        .args;
        let config = cache_config(&args).expect("valid");
        assert_eq!(config.engine.admission, "volume");
        assert_eq!(config.engine.critical_volumes, vec![1]);
        assert_eq!(
            config.engine.volume_admissions,
            vec![(0, "cp-pi-ioi".to_string())]
        );
    }
}
