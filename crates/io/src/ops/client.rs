//! The client side of the control socket, for `wcache status`, `stats`,
//! `flush`, `set` and for tests: one connection, a request at a time, the
//! progress lines handed to a callback, the final line returned. It exists
//! so that the CLI and the tests speak the protocol through the same code
//! as each other, and can tell "no server" (then the CLI works offline)
//! from a server that answered with an error.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::ops::protocol::{Request, Response};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No server holds this socket (missing, or nobody listening).
    #[error("no server at {path}: {source}")]
    NoServer {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("control socket {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("control socket {path}: the server closed the connection before answering")]
    Closed { path: PathBuf },
    #[error("control socket {path}: unreadable answer {line:?}: {reason}")]
    BadResponse {
        path: PathBuf,
        line: String,
        reason: String,
    },
    /// The server answered with an error.
    #[error("{message} ({code})")]
    Remote { code: String, message: String },
}

/// One connection to a control socket.
pub struct ControlClient {
    path: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

impl ControlClient {
    /// Connects; a missing socket or one nobody listens on is `NoServer`.
    pub fn connect(path: &Path) -> Result<ControlClient, ClientError> {
        let writer = UnixStream::connect(path).map_err(|source| {
            let none = matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            );
            if none {
                ClientError::NoServer {
                    path: path.to_path_buf(),
                    source,
                }
            } else {
                ClientError::Io {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        let reader = writer.try_clone().map_err(|source| ClientError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(ControlClient {
            path: path.to_path_buf(),
            writer,
            reader: BufReader::new(reader),
        })
    }

    /// Sends `request`; progress lines go to `progress`; returns the final
    /// result, or the server's error as `Remote`.
    pub fn call(
        &mut self,
        request: &Request,
        progress: &mut dyn FnMut(&serde_json::Value),
    ) -> Result<serde_json::Value, ClientError> {
        self.send_raw(request.to_line().as_bytes())?;
        loop {
            let response = self.read_response()?;
            if let Some(p) = &response.progress {
                progress(p);
            }
            if !response.is_final() {
                continue;
            }
            if let Some(e) = response.error {
                return Err(ClientError::Remote {
                    code: e.code,
                    message: e.message,
                });
            }
            return Ok(response.result.unwrap_or(serde_json::Value::Null));
        }
    }

    /// Sends bytes as they are (tests of malformed requests).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.writer
            .write_all(bytes)
            .map_err(|source| ClientError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Closes the sending half (the server sees end of input).
    pub fn shutdown_write(&mut self) {
        let _ = self.writer.shutdown(std::net::Shutdown::Write);
    }

    /// Reads one response line.
    pub fn read_response(&mut self) -> Result<Response, ClientError> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|source| ClientError::Io {
                path: self.path.clone(),
                source,
            })?;
        if n == 0 {
            return Err(ClientError::Closed {
                path: self.path.clone(),
            });
        }
        serde_json::from_str(&line).map_err(|e| ClientError::BadResponse {
            path: self.path.clone(),
            line: line.trim_end().to_string(),
            reason: e.to_string(),
        })
    }
}
