//! The control socket's protocol, version 1: one JSON object per line each
//! way (`docs/operations.md` is its reference). It exists so that the
//! server and every client agree on one parser and one set of error codes.
//! Parsing never panics: any byte string gives a `Command` or a
//! `ProtocolError` that names what is wrong.

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks (`"v"` of every message).
pub const PROTOCOL_VERSION: u32 = 1;
/// The longest request line accepted, newline excluded.
pub const REQUEST_BYTES_MAX: usize = 64 * 1024;

/// A request as sent: `{"v":1,"cmd":"set","key":"destage-order","value":"lrw"}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub v: u32,
    pub cmd: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<String>,
    /// `flush`: give up after this many seconds without progress (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_timeout_s: Option<u64>,
    /// `critical-issuer`: the issuer (the `issuer` tag of its requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<u32>,
    /// `critical-issuer`: set (true) or clear (false) its criticality hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical: Option<bool>,
    /// `stop`: drain every dirty page first, refusing writes meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush: Option<bool>,
}

impl Request {
    pub fn new(cmd: &str) -> Request {
        Request {
            v: PROTOCOL_VERSION,
            cmd: cmd.to_string(),
            ..Request::default()
        }
    }

    /// The request as one line, newline included.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }
}

/// A request understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Status,
    Stats,
    Flush {
        export: Option<String>,
        stall_timeout_s: u64,
    },
    Set {
        key: String,
        value: String,
    },
    /// An application consistency point (journaled write-back).
    ConsistencyPoint,
    /// Set or clear the criticality hint of an issuer (request-oriented admission).
    CriticalIssuer {
        issuer: u32,
        critical: bool,
    },
    /// Add (true) or remove (false) a rule that makes a front end's callers
    /// critical: `by` is `pid`, `command` (a name, `*` ends a prefix) or
    /// `cgroup` (a path, its subtree too). Front ends that know their
    /// callers' processes only (`wcache mount`).
    CriticalCaller {
        by: String,
        value: String,
        critical: bool,
    },
    /// Stop the server as SIGTERM does; with `flush`, first drain every
    /// dirty page while writes are refused.
    Stop {
        flush: bool,
        stall_timeout_s: u64,
    },
}

impl Command {
    /// The command's name on the wire (`status`, `set`, ...), for the log.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Status => "status",
            Command::Stats => "stats",
            Command::Flush { .. } => "flush",
            Command::Set { .. } => "set",
            Command::ConsistencyPoint => "consistency-point",
            Command::CriticalIssuer { .. } => "critical-issuer",
            Command::CriticalCaller { .. } => "critical-caller",
            Command::Stop { .. } => "stop",
        }
    }
}

/// Every command name, for error messages.
pub const COMMANDS: &str =
    "status, stats, flush, set, consistency-point, critical-issuer, critical-caller, stop";

/// Why a request was not carried out. `code` is stable; the message is for people.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("not a request object: {0}")]
    BadJson(String),
    #[error("protocol version {0} is not supported; this server speaks {PROTOCOL_VERSION}")]
    Version(u32),
    #[error("unknown command {0:?}; valid: {COMMANDS}")]
    UnknownCommand(String),
    #[error("{cmd}: field {field:?} is missing")]
    Missing {
        cmd: &'static str,
        field: &'static str,
    },
    #[error("request line longer than {REQUEST_BYTES_MAX} bytes")]
    TooLong,
    #[error("the connection ended in the middle of a request (no newline)")]
    Incomplete,
    #[error("{0} is not supported yet by this server (reserved for a later version)")]
    NotSupported(&'static str),
    #[error("permission denied: uid {peer} is not the server's uid {server} (nor root)")]
    PermissionDenied { peer: u32, server: u32 },
    #[error("too many control connections (at most {0}); try again")]
    Busy(usize),
}

impl ProtocolError {
    pub fn code(&self) -> &'static str {
        match self {
            ProtocolError::BadJson(_) | ProtocolError::Missing { .. } => "bad-request",
            ProtocolError::Version(_) => "unsupported-version",
            ProtocolError::UnknownCommand(_) => "unknown-command",
            ProtocolError::TooLong => "too-long",
            ProtocolError::Incomplete => "incomplete",
            ProtocolError::NotSupported(_) => "not-supported",
            ProtocolError::PermissionDenied { .. } => "permission-denied",
            ProtocolError::Busy(_) => "busy",
        }
    }
}

/// Parses one request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Command, ProtocolError> {
    let request: Request =
        serde_json::from_slice(line).map_err(|e| ProtocolError::BadJson(e.to_string()))?;
    if request.v != PROTOCOL_VERSION {
        return Err(ProtocolError::Version(request.v));
    }
    let need = |field: Option<String>, cmd: &'static str, name: &'static str| {
        field.ok_or(ProtocolError::Missing { cmd, field: name })
    };
    Ok(match request.cmd.as_str() {
        "status" => Command::Status,
        "stats" => Command::Stats,
        "flush" => Command::Flush {
            export: request.export,
            stall_timeout_s: request.stall_timeout_s.unwrap_or(60).max(1),
        },
        "set" => Command::Set {
            key: need(request.key, "set", "key")?,
            value: need(request.value, "set", "value")?,
        },
        "consistency-point" => Command::ConsistencyPoint,
        "critical-issuer" => Command::CriticalIssuer {
            issuer: request.issuer.ok_or(ProtocolError::Missing {
                cmd: "critical-issuer",
                field: "issuer",
            })?,
            critical: request.critical.ok_or(ProtocolError::Missing {
                cmd: "critical-issuer",
                field: "critical",
            })?,
        },
        "critical-caller" => Command::CriticalCaller {
            by: need(request.key, "critical-caller", "key")?,
            value: need(request.value, "critical-caller", "value")?,
            critical: request.critical.ok_or(ProtocolError::Missing {
                cmd: "critical-caller",
                field: "critical",
            })?,
        },
        "stop" => Command::Stop {
            flush: request.flush.unwrap_or(false),
            stall_timeout_s: request.stall_timeout_s.unwrap_or(60).max(1),
        },
        other => return Err(ProtocolError::UnknownCommand(other.to_string())),
    })
}

/// A response line: `{"v":1,"ok":true,"result":…}`,
/// `{"v":1,"ok":false,"error":{"code":…,"message":…}}`, or (streamed
/// before the final line of `flush` and of a `set` that drains)
/// `{"v":1,"progress":…}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

impl Response {
    pub fn ok(result: impl Serialize) -> Response {
        Response {
            v: PROTOCOL_VERSION,
            ok: Some(true),
            result: Some(serde_json::to_value(result).unwrap_or(serde_json::Value::Null)),
            error: None,
            progress: None,
        }
    }

    pub fn error(code: &str, message: String) -> Response {
        Response {
            v: PROTOCOL_VERSION,
            ok: Some(false),
            result: None,
            error: Some(ErrorBody {
                code: code.to_string(),
                message,
            }),
            progress: None,
        }
    }

    pub fn progress(progress: impl Serialize) -> Response {
        Response {
            v: PROTOCOL_VERSION,
            ok: None,
            result: None,
            error: None,
            progress: Some(serde_json::to_value(progress).unwrap_or(serde_json::Value::Null)),
        }
    }

    /// The response as one line, newline included.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// True for the last line of an answer (anything but progress).
    pub fn is_final(&self) -> bool {
        self.ok.is_some()
    }
}

impl From<&ProtocolError> for Response {
    fn from(e: &ProtocolError) -> Response {
        Response::error(e.code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_name_the_problem() {
        assert_eq!(
            parse_request(br#"{"v":1,"cmd":"status"}"#),
            Ok(Command::Status)
        );
        assert_eq!(
            parse_request(br#"{"v":1,"cmd":"set","key":"order","value":"lrw"}"#),
            Ok(Command::Set {
                key: "order".into(),
                value: "lrw".into()
            })
        );
        assert_eq!(
            parse_request(br#"{"v":1,"cmd":"critical-issuer","issuer":7,"critical":true}"#),
            Ok(Command::CriticalIssuer {
                issuer: 7,
                critical: true
            })
        );
        let cases: [(&[u8], &str); 9] = [
            (b"", "bad-request"),
            (b"{", "bad-request"),
            (br#"{"v":"1","cmd":"status"}"#, "bad-request"),
            (br#"{"v":1,"cmd":"status","x":1}"#, "bad-request"),
            (br#"{"v":2,"cmd":"status"}"#, "unsupported-version"),
            (br#"{"v":1,"cmd":"reboot"}"#, "unknown-command"),
            (br#"{"v":1,"cmd":"set","key":"order"}"#, "bad-request"),
            (
                br#"{"v":1,"cmd":"critical-issuer","issuer":-1,"critical":true}"#,
                "bad-request",
            ),
            (
                br#"{"v":1,"cmd":"critical-issuer","critical":true}"#,
                "bad-request",
            ),
        ];
        for (line, code) in cases {
            let e = parse_request(line).expect_err("refused");
            assert_eq!(e.code(), code, "{}: {e}", String::from_utf8_lossy(line));
        }
        let e = parse_request(br#"{"v":1,"cmd":"set","key":"order"}"#).expect_err("refused");
        assert!(e.to_string().contains("\"value\""), "{e}");
    }

    #[test]
    fn a_request_round_trips_through_its_line() {
        let mut r = Request::new("flush");
        r.export = Some("disk".into());
        let line = r.to_line();
        assert!(line.ends_with('\n'));
        assert_eq!(
            parse_request(line.trim_end().as_bytes()),
            Ok(Command::Flush {
                export: Some("disk".into()),
                stall_timeout_s: 60
            })
        );
    }
}
