//! Which data path the driver's page writes take: io_uring, or the threads (and why).

/// Which data path page writes of `write_async` take (`Driver::data_path`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataPath {
    /// Submitted to io_uring by the request's thread; one thread reaps the
    /// completions in batches and answers the requests.
    IoUring,
    /// The threads (run to completion, pool, record writers), and why not
    /// io_uring.
    Threads { why: String },
}

impl std::fmt::Display for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataPath::IoUring => write!(
                f,
                "io_uring (page and record writes submitted by the request's thread, completions reaped in batches; under persist-on-flush, writes under 64 KiB to a buffered cache file are written by the request's thread itself)"
            ),
            DataPath::Threads { why } => write!(f, "threads ({why})"),
        }
    }
}
