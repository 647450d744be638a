//! wcache-nbd: the NBD protocol: the server, and the codec NBD backings share with it.
//!
//! This crate exists so that cached volumes can be served to any NBD client
//! (the Linux kernel, qemu, libnbd tools, fio). `proto` is the pure codec and
//! handshake state machine (no I/O), with the client's side in `proto::client`
//! (wcache-io's NBD backing speaks through it); `server` moves bytes between
//! sockets (`socket`) and `Export`s with std threads; `export` defines what a
//! volume must offer; `tls` is STARTTLS's configuration and stream (the
//! replication link uses them too).
//! It must never trust a length sent by a client: see `docs/nbd.md`.

pub mod clients;
pub mod export;
pub mod proto;
pub mod server;
mod socket;
pub mod tls;

pub use clients::{ClientInfo, Clients};
pub use export::{AsyncWrite, Export, ExportError, MemExport, WriteBatch, WriteDone};
pub use proto::NbdErrno;
/// The rustls this crate's TLS is built on, for users of `tls`.
pub use rustls;
pub use server::{Server, ServerBuilder, ServerConfig, ServerError, ServerStats, ServerTls};

// The Rust sample in docs/nbd.md runs as a doctest, so that it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/nbd.md")]
pub struct NbdMdDoctests;
