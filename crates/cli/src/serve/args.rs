//! The options of `wcache serve`, each also a key of its config file
//! (`config`) under the same name, and each that can change while
//! serving also a `wcache set` key of that name (tests check both).
//! Declarations only: values are parsed in `crate::args`, `crate::limits`
//! (the numbers' ranges) and `serve`.

use std::path::PathBuf;

use clap::Args;

use crate::cache_args::CacheArgs;
use crate::limits;

/// Serve cached volumes over NBD (with no arguments: a demo in ./wcache-data
/// with a 1 GiB cache file in front of an 8 GiB emulated 10K RPM disk).
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Read settings from this TOML file, keys named as these options
    /// (`cache-size = "1G"`, `export = ["disk=FILE"]`); options given on
    /// the command line win (docs/operations.md, "Config file").
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Unix socket to listen on (default, when no --listen: DATA_DIR/wcache.sock).
    #[arg(long)]
    pub(crate) socket: Option<PathBuf>,
    /// TCP address to listen on, e.g. 127.0.0.1:10809.
    #[arg(long)]
    pub(crate) listen: Option<String>,
    /// TLS on the TCP listener (--listen), as nbdkit's --tls: off; on
    /// (clients may upgrade with NBD_OPT_STARTTLS); require (every client
    /// must, before anything else). The Unix socket stays plaintext.
    #[arg(long, default_value = "off", value_parser = ["off", "on", "require"])]
    pub(crate) tls: String,
    /// With --tls on or require: a directory holding server-cert.pem,
    /// server-key.pem and (for --tls-verify-peer) ca-cert.pem, laid out as
    /// nbdkit's --tls-certificates.
    #[arg(long, value_name = "DIR")]
    pub(crate) tls_certificates: Option<PathBuf>,
    /// With --tls on or require: every TLS client must present a
    /// certificate signed by DIR/ca-cert.pem (as nbdkit's --tls-verify-peer).
    #[arg(long)]
    pub(crate) tls_verify_peer: bool,
    /// Directory for the default cache, backing and socket.
    #[arg(long, default_value = "wcache-data")]
    pub(crate) data_dir: PathBuf,
    /// Backing of the single export `disk`: FILE, nbd://HOST[:PORT]/NAME,
    /// nbd+unix:///NAME?socket=PATH, rbd:POOL/IMAGE[:conf=PATH][:keyring=PATH][:id=NAME]
    /// (a Ceph RBD image through librbd, its exclusive lock held),
    /// emulated-MODEL:FILE (MODEL: hdd, raid10, raid5, raid5-md, ssd, nvram;
    /// the simulator's model run in real time), mem:SIZE.
    /// Default: emulated-hdd:DATA_DIR/backing.img.
    #[arg(long)]
    pub(crate) backing: Option<String>,
    /// An export NAME=BACKING (repeat for several volumes sharing one cache).
    #[arg(long = "export", value_name = "NAME=BACKING")]
    pub(crate) exports: Vec<String>,
    /// Size of backing files created because they do not exist.
    #[arg(long, default_value = "8G")]
    pub(crate) backing_size: String,
    /// How backing file writes become durable: fdatasync, dsync, nvram.
    #[arg(long, default_value = "fdatasync")]
    pub(crate) backing_sync: String,
    /// An NBD backing that is away (broken connection, restarting server)
    /// is reconnected with backoff; a request that needs it waits this long
    /// before it fails with EIO (cached reads and writes with room go on).
    /// An RBD backing: librados' connect, OSD and monitor timeouts.
    #[arg(long, default_value = "30s")]
    pub(crate) backing_timeout: String,
    /// The admission policy of one export, EXPORT=POLICY, in place of
    /// --admission for its writes (repeat for several exports).
    #[arg(long = "export-admission", value_name = "EXPORT=POLICY")]
    pub(crate) export_admissions: Vec<String>,
    /// An export whose writes the volume admission policy admits (the
    /// paper's WAL volume; repeat for several).
    #[arg(long = "critical", value_name = "EXPORT")]
    pub(crate) critical_exports: Vec<String>,
    /// write-back-journaled (required there, for every export): where the
    /// export's backing journal lives: a file or device of its own
    /// (EXPORT=PATH, or any backing spec; a missing file is created; keep
    /// it on the backing's storage), or the backing's last bytes
    /// (EXPORT=backing-end: they must hold no data; the export ends before them).
    #[arg(long = "journal", value_name = "EXPORT=PATH|backing-end")]
    pub(crate) journals: Vec<String>,
    /// Smallest block the NBD clients may address (a power of two up to 64 KiB).
    #[arg(long, default_value_t = 512, value_parser = limits::block_size)]
    pub(crate) block_size: u32,
    /// NBD worker threads (requests in service at once over all connections; 1 to 1024).
    #[arg(long, default_value_t = 32, value_parser = limits::threads)]
    pub(crate) workers: usize,
    /// Microseconds a connection polls its socket before sleeping while its
    /// client sends requests back to back (saves a thread wake-up per
    /// request at low queue depth, at the cost of up to this much CPU per
    /// request; at most 10000); 0 turns polling off.
    #[arg(long, default_value_t = 50, value_parser = limits::poll_us)]
    pub(crate) poll_us: u64,
    /// BENCHMARKS ONLY: allow write-back with a cache in process memory
    /// (`--cache mem`). Acknowledged writes are lost when the process exits
    /// before they are destaged, and on any crash.
    #[arg(long)]
    pub(crate) volatile_write_back_for_benchmarks: bool,
    /// Mirror the cache device to a `wcache replica` on another host
    /// (HOST:PORT): a flush returns once both hosts hold every earlier
    /// write (docs/replication.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) replicate_to: Option<String>,
    /// The cache's replication state file (cache id, epoch, role).
    /// Default: the cache file's path with `.replica` added.
    #[arg(long, value_name = "FILE")]
    pub(crate) replica_state: Option<PathBuf>,
    /// A replication peer that does not answer (connect, hello, flush)
    /// within this is lost; the cache goes on as --on-peer-lost says.
    #[arg(long, default_value = "5s")]
    pub(crate) peer_timeout: String,
    /// While the peer is away or resyncing: write-through (drain, then take
    /// writes through to the backing; write-back's policy only) or
    /// write-back (go on alone, the unprotected amount shown in status).
    #[arg(long, default_value = "write-through")]
    pub(crate) on_peer_lost: String,
    /// TLS on the replication link, both ways: this directory's
    /// `ca-cert.pem` signs the peer's certificate, and `client-cert.pem`
    /// and `client-key.pem` are this host's (the peer requires them).
    /// Without it the link is plaintext: a private network only.
    #[arg(long, value_name = "DIR")]
    pub(crate) replicate_tls_certificates: Option<PathBuf>,
    /// Start even when the peer cannot be reached (degraded). The operator
    /// asserts that the peer did not take this cache over.
    #[arg(long)]
    pub(crate) start_without_peer: bool,
    /// Serve a replica's copy of a cache: its primary is lost (stopped or
    /// fenced). Raises the cache's epoch, so that the old primary is
    /// refused by any peer of the new one; the copy is recovered as after a
    /// crash and its dirty pages destaged to the backing.
    #[arg(long)]
    pub(crate) takeover: bool,
    /// The cache, its policies and the service's endpoints, as `wcache mount` has them.
    #[command(flatten)]
    pub(crate) cache_opts: CacheArgs,
}
