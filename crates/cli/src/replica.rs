//! `wcache replica`: keep a copy of a primary's cache device on this host
//! (`wcache serve --replicate-to`), for a takeover when the primary is
//! lost (`wcache serve --takeover` on the copy). Wiring only: the peer is
//! `wcache_io::replica::Peer`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use clap::Args;
use wcache_io::replica::{state, LinkTls, Peer, PeerOptions};

type AnyError = Box<dyn std::error::Error>;

/// Keep a copy of a primary's cache device (docs/replication.md).
#[derive(Args, Debug)]
pub struct ReplicaArgs {
    /// This host's copy of the primary's cache device: a file (created at
    /// the primary's size) or a block device of the same size.
    #[arg(long)]
    cache: PathBuf,
    /// Address the primary connects to, e.g. 10.0.0.2:10810.
    #[arg(long)]
    listen: String,
    /// The copy's replication state file. Default: the copy's path with
    /// `.replica` added.
    #[arg(long, value_name = "FILE")]
    replica_state: Option<PathBuf>,
    /// A primary silent for this long is gone (it tests the link every second).
    #[arg(long, default_value = "5s")]
    peer_timeout: String,
    /// TLS on the link, both ways: `server-cert.pem` and `server-key.pem`
    /// are this host's, and primaries must show a certificate signed by
    /// `ca-cert.pem` (plaintext is refused). Without it the link is
    /// plaintext: a private network only.
    #[arg(long, value_name = "DIR")]
    tls_certificates: Option<PathBuf>,
    /// Mirror the next primary that connects, whatever this copy held
    /// (another cache, a newer epoch, a copy that was taken over): its
    /// content is replaced by the primary's.
    #[arg(long)]
    force: bool,
}

pub fn replica(args: ReplicaArgs) -> Result<(), AnyError> {
    let timeout = crate::serve::replication::peer_timeout_arg(&args.peer_timeout)?;
    let state_path = args
        .replica_state
        .clone()
        .unwrap_or_else(|| state::default_path(&args.cache));
    let tls = match &args.tls_certificates {
        Some(dir) => LinkTls::server(dir)
            .map_err(|e| format!("--tls-certificates {}: {e}", dir.display()))?,
        None => LinkTls::Off,
    };
    let listener = TcpListener::bind(&args.listen)
        .map_err(|e| format!("--listen {}: cannot listen there: {e}", args.listen))?;
    let mut peer = Peer::open(PeerOptions {
        cache: args.cache.clone(),
        state_path: state_path.clone(),
        tls,
        timeout,
        force: args.force,
    })?;
    say!(
        "wcache replica: keeping a copy of the primary's cache in {} (state {}), listening on {}",
        args.cache.display(),
        state_path.display(),
        listener
            .local_addr()
            .map_or(args.listen.clone(), |a| a.to_string())
    );
    let stop = AtomicBool::new(false);
    peer.serve(&listener, &stop)?;
    Ok(())
}
