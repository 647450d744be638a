//! Logs: the server's events go through `tracing` to stderr, filtered by
//! the `WCACHE_LOG` environment variable in `EnvFilter` syntax (`debug`,
//! `warn,wcache_io::ops=debug`; default `info`, with rustls' warnings
//! about its peers' quirks left out), so that an operator can raise the
//! verbosity of one subsystem. What a command prints as its
//! answer (banners, tables, progress bars) is output, not logging, and
//! stays on stdout.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The variable that sets the filter.
pub const LOG_ENV: &str = "WCACHE_LOG";
/// The variable that sets the format: `text` (default) or `json` (one
/// object a line, with the event's fields).
pub const LOG_FORMAT_ENV: &str = "WCACHE_LOG_FORMAT";

/// The filter without `WCACHE_LOG`: rustls warns at every connection of
/// a GnuTLS client (libnbd, qemu) that it ignores the IP address sent as
/// the server's name; a failed TLS handshake is logged by wcache itself.
const DEFAULT_FILTER: &str = "info,rustls=error";

/// Installs the stderr subscriber; a bad filter is reported and the default used.
pub fn init() {
    let filter = match std::env::var(LOG_ENV) {
        Ok(text) => EnvFilter::try_new(&text).unwrap_or_else(|e| {
            eprintln!(
                "wcache: {LOG_ENV}={text:?} is not a log filter ({e}); using {DEFAULT_FILTER}"
            );
            EnvFilter::new(DEFAULT_FILTER)
        }),
        Err(_) => EnvFilter::new(DEFAULT_FILTER),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match std::env::var(LOG_FORMAT_ENV).as_deref() {
        Ok("json") => {
            let _ = builder.json().try_init();
        }
        Ok("text") | Err(_) => {
            let _ = builder
                .with_ansi(std::io::stderr().is_terminal())
                .try_init();
        }
        Ok(other) => {
            let _ = builder.with_ansi(false).try_init();
            tracing::warn!(
                "{LOG_FORMAT_ENV}={other:?} is not a log format (text, json); using text"
            );
        }
    }
}
