//! The server's side of NBD_OPT_STARTTLS: which mode a TCP connection is
//! offered, and the upgrade of a connection to TLS once the handshake
//! (`proto::Handshake`) has acknowledged STARTTLS. It exists so that the
//! moment the bytes switch to TLS is in one place; it must never let a
//! byte the client sent in plaintext be read as if it came over TLS.

use super::*;
use crate::tls::TlsStream;

/// TLS for the server's TCP connections (`ServerConfig::tls`), as
/// nbdkit's `--tls=off|on|require`.
#[derive(Debug, Clone, Default)]
pub enum ServerTls {
    /// STARTTLS is refused (`NBD_REP_ERR_POLICY`).
    #[default]
    Off,
    /// A client may upgrade with STARTTLS, or stay in plaintext.
    On(Arc<rustls::ServerConfig>),
    /// Every client must upgrade before anything else (the spec's FORCEDTLS).
    Require(Arc<rustls::ServerConfig>),
}

impl ServerTls {
    /// The handshake's mode.
    pub fn mode(&self) -> TlsMode {
        match self {
            ServerTls::Off => TlsMode::Off,
            ServerTls::On(_) => TlsMode::On,
            ServerTls::Require(_) => TlsMode::Require,
        }
    }
}

/// Runs the TLS handshake on the connection after STARTTLS was
/// acknowledged (the ACK is sent), then puts TLS under `reader` and
/// `writer`. `Err`: close the connection (the reason is logged).
pub(super) fn upgrade(
    tls: &ServerTls,
    reader: &mut BufReader<ReadHalf>,
    writer: &mut Socket,
) -> Result<(), ()> {
    let (ServerTls::On(config) | ServerTls::Require(config)) = tls else {
        unreachable!("STARTTLS is acknowledged only with TLS on");
    };
    let peer = writer.peer();
    if !reader.buffer().is_empty() {
        // The client sent on without waiting for the reply to STARTTLS:
        // those bytes came in plaintext and cannot be part of TLS.
        tracing::info!(peer = %peer, "NBD client sent data after NBD_OPT_STARTTLS before its reply");
        return Err(());
    }
    let Socket::Tcp(tcp) = &*writer else {
        unreachable!("TLS is offered on TCP connections only");
    };
    let stream = tcp
        .try_clone()
        .and_then(|tcp| TlsStream::server(tcp, Arc::clone(config)))
        .and_then(|stream| stream.handshake().map(|()| stream));
    let stream = match stream {
        Ok(stream) => stream,
        Err(error) => {
            tracing::info!(peer = %peer, %error, "NBD TLS handshake failed");
            return Err(());
        }
    };
    let Ok(read_side) = stream.try_clone() else {
        return Err(());
    };
    *reader = BufReader::with_capacity(
        READ_BUFFER_BYTES,
        ReadHalf {
            socket: Socket::Tls(read_side),
            poll_budget: Duration::ZERO,
            poll_next: true,
        },
    );
    tracing::debug!(peer = %peer, tls = %stream.negotiated(), "NBD connection upgraded to TLS");
    *writer = Socket::Tls(stream);
    Ok(())
}
