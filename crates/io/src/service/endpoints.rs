//! What the world sees of a running service besides its front end: the
//! control socket, the Prometheus metrics endpoint, and the service
//! manager's notifications (systemd's Type=notify). They are bound before
//! the cache is opened (a socket that cannot be bound refuses the start
//! before any device is written) and started once it is open. It must
//! never serve a front end's protocol.

use std::net::TcpListener;
use std::path::Path;

use sd_notify::NotifyState;

use super::ServiceError;
use crate::ops::control::{ControlListener, ControlServer};
use crate::ops::prometheus::MetricsServer;
use crate::ops::Operator;

/// The operator's sockets, bound and not yet serving.
pub struct OpsListeners {
    control: ControlListener,
    metrics: Option<TcpListener>,
}

impl OpsListeners {
    /// Binds the metrics address, if asked, then the control socket (a
    /// socket file is replaced only when nothing answers on it).
    pub fn bind(control: &Path, metrics: Option<&str>) -> Result<OpsListeners, ServiceError> {
        let metrics = match metrics {
            Some(addr) => Some(
                TcpListener::bind(addr).map_err(|source| ServiceError::Listen {
                    what: format!("metrics address {addr}"),
                    source,
                })?,
            ),
            None => None,
        };
        let control = ControlListener::bind(control).map_err(|source| ServiceError::Listen {
            what: format!("control socket {}", control.display()),
            source,
        })?;
        Ok(OpsListeners { control, metrics })
    }

    /// Removes the bound socket's file (a start refused after binding).
    pub fn discard(self) {
        self.control.discard();
    }

    /// Puts the control socket in place and serves metrics, through `operator`.
    pub(super) fn start(self, operator: Operator) -> Result<Endpoints, ServiceError> {
        let metrics = match self.metrics {
            Some(listener) => Some(MetricsServer::start(listener, operator.clone())?),
            None => None,
        };
        let what = format!("control socket {}", self.control.path().display());
        let control = self
            .control
            .start(operator)
            .map_err(|source| ServiceError::Listen { what, source })?;
        Ok(Endpoints { control, metrics })
    }
}

/// The operator's endpoints of a running service: the control socket and,
/// when asked, the metrics endpoint.
pub(super) struct Endpoints {
    control: ControlServer,
    metrics: Option<MetricsServer>,
}

impl Endpoints {
    /// The banner's lines on where to operate the service.
    pub(super) fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "  control: {} (wcache status|stats|flush|set --control PATH)",
            self.control.path().display()
        )];
        if let Some(m) = &self.metrics {
            lines.push(format!("  metrics: http://{}/metrics", m.addr()));
        }
        lines
    }

    pub(super) fn stop(self) {
        self.control.stop();
        if let Some(m) = self.metrics {
            m.stop();
        }
    }
}

/// Tells the service manager (systemd, when it set NOTIFY_SOCKET) that the
/// service is ready, with a status line. A failure is logged, never fatal.
pub fn notify_ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Tells the service manager that the service is stopping.
pub(super) fn notify_stopping() {
    notify(&[NotifyState::Stopping]);
}

fn notify(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
    }
}
