//! The service lifecycle every front end runs (`wcache serve` over NBD,
//! `wcache mount` over FUSE): process settings before the first thread,
//! stop signals received synchronously, the error reporter, the control
//! socket and metrics, the bounded graceful stop, the cache's close and
//! the close report. It exists so that a front end writes only its
//! protocol: it implements `FrontEnd` and hands it to a `Service`. It must
//! never know a front end's protocol, nor make a cache decision.
//!
//! The order (a front end's command):
//! 1. `Service::prepare()` first, before any thread starts (SIGPIPE
//!    ignored, SIGINT and SIGTERM blocked, large buffers mapped);
//! 2. bind the front end's sockets and `OpsListeners::bind`, then
//!    `Cache::open` (nothing is written before every socket is bound);
//! 3. start the front end (not yet taking requests), then
//!    `Prepared::start` (error reporter, operator hooks, control socket,
//!    metrics); the front end then takes requests and says it is ready;
//! 4. `Service::wait_for_stop()` (SIGINT, SIGTERM, `wcache stop`), then
//!    `Service::stop(front_end, grace)`.

mod endpoints;
mod report;
mod signals;
mod stop;

use std::path::Path;
use std::time::Duration;

use crate::cache::{Cache, CacheError, CloseReport};
use crate::lock::{DeviceLock, LockError, LockMode};
use crate::ops::prometheus::MetricsError;
use crate::ops::{ClientsHook, ErrorReporter};

pub use endpoints::{notify_ready, OpsListeners};
pub use report::{cache_device_lines, open_report, staleness_text, volatile_write_back_warning};
pub use signals::request_stop;
pub use stop::STOP_AFTER_GRACE;

use endpoints::Endpoints;
use signals::StopSignals;

/// What a front end offers the service: a way to stop it, its clients.
pub trait FrontEnd: Send {
    /// Stop taking requests and finish those in flight, their answers
    /// going out (blocking; called on a stop thread, which the service
    /// leaves behind when the grace period ends first).
    fn stop(self: Box<Self>);
    /// The connected clients for `wcache status` (called once, at start;
    /// the hook is called at each status request, from another thread).
    fn clients(&self) -> ClientsHook;
    /// The front end's own lines of the close report (its counters),
    /// taken when the stop begins. Default: none.
    fn report(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Why a service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot listen on {what}: {source}")]
    Listen {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error("cannot start the error reporter: {0}")]
    Reporter(std::io::Error),
}

/// The data directory holds a server's sockets (and its default files):
/// it is created if missing and locked, one server at a time, for as long
/// as the lock is kept.
pub fn lock_data_dir(dir: &Path) -> Result<DeviceLock, ServiceError> {
    std::fs::create_dir_all(dir).map_err(|source| ServiceError::CreateDir {
        path: dir.display().to_string(),
        source,
    })?;
    Ok(DeviceLock::acquire(
        dir,
        LockMode::Exclusive,
        "data directory",
    )?)
}

/// A process prepared to serve: its stop signals blocked, before any
/// thread started (`Service::prepare`).
pub struct Prepared {
    signals: StopSignals,
}

/// A running service over one cache: the error reporter and the
/// operator's endpoints, until `stop`.
pub struct Service {
    signals: StopSignals,
    cache: Cache,
    reporter: ErrorReporter,
    endpoints: Endpoints,
    signal: Option<i32>,
}

impl Service {
    /// The first call of a front end's command, before any thread starts
    /// (threads inherit the blocked signals): SIGPIPE ignored, SIGINT and
    /// SIGTERM blocked (received by `wait_for_stop`), request buffers of
    /// 256 KiB and more returned to the system when freed.
    pub fn prepare() -> Prepared {
        signals::ignore_sigpipe();
        let signals = StopSignals::block();
        signals::return_large_buffers_to_the_system();
        Prepared { signals }
    }

    /// The cache served.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The banner's lines on the operator's endpoints (control, metrics).
    pub fn endpoint_lines(&self) -> Vec<String> {
        self.endpoints.lines()
    }

    /// Blocks until SIGINT or SIGTERM (or `wcache stop`, `request_stop`);
    /// returns the signal's number.
    pub fn wait_for_stop(&mut self) -> i32 {
        let signal = self.signals.wait();
        self.signal = Some(signal);
        signal
    }

    /// The bounded stop: the front end stops taking requests and those in
    /// flight finish within `grace` (a second signal ends it sooner); then
    /// what still waits is answered with an error. Then the cache closes
    /// (a clean shutdown recorded) and the close report is logged.
    pub fn stop(
        self,
        front_end: Box<dyn FrontEnd>,
        grace: Duration,
    ) -> Result<CloseReport, CacheError> {
        let stopping = format!(
            "stopping (no new connections; in-flight requests have {:.1} s \
             to finish, or until a second signal)",
            grace.as_secs_f64()
        );
        match self.signal {
            Some(signal) => tracing::info!("signal {signal}: {stopping}"),
            None => tracing::info!("{stopping}"),
        }
        let front_end_lines = front_end.report();
        self.endpoints.stop();
        stop::stop_front_end(front_end, &self.cache, grace, &self.signals);
        self.reporter.stop();
        let closed = self.cache.close_within(STOP_AFTER_GRACE)?;
        report::log_close_report(&closed, &front_end_lines);
        Ok(closed)
    }
}

impl Prepared {
    /// Starts the service over the open `cache` and the started (not yet
    /// serving) `front_end`: the error reporter, the operator's hooks
    /// (`wcache stop` stops as SIGTERM does; `status` lists the front
    /// end's clients), then the control socket and metrics on `ops`.
    pub fn start(
        self,
        cache: Cache,
        front_end: &dyn FrontEnd,
        ops: OpsListeners,
    ) -> Result<Service, ServiceError> {
        let reporter = ErrorReporter::start(cache.monitor()).map_err(ServiceError::Reporter)?;
        let operator = cache.operator();
        operator.on_stop(Box::new(request_stop));
        operator.on_clients(front_end.clients());
        let endpoints = match ops.start(operator) {
            Ok(endpoints) => endpoints,
            Err(e) => {
                reporter.stop();
                return Err(e);
            }
        };
        Ok(Service {
            signals: self.signals,
            cache,
            reporter,
            endpoints,
            signal: None,
        })
    }
}
