//! `wcache stop [--flush]`: stop a running server through its control
//! socket, as SIGTERM does; with `--flush`, the server first refuses
//! writes (ESHUTDOWN), drains every dirty page with progress shown here,
//! and stops only once none is left (casadm's stop with flush). It waits
//! until the server is gone (its control socket removed). Wiring and
//! output only.

use std::time::{Duration, Instant};

use clap::Args;
use wcache_io::ops::protocol::Request;
use wcache_io::ops::StopDone;

use crate::limits;
use crate::ops::{call_with_progress, connect, parse, ControlArgs};
use crate::tools::AnyError;

/// How long `wcache stop` waits for the server to be gone after it agreed
/// to stop (its grace period, `--stop-timeout`, is 10 s by default).
const GONE_WAIT_MAX: Duration = Duration::from_secs(120);

/// Stop a running server (as SIGTERM); with --flush, drain it first.
#[derive(Args, Debug)]
pub struct StopArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// Destage every dirty page first, refusing writes meanwhile; the
    /// server stops only once none is left (if the drain fails, writes are
    /// accepted again and the server goes on).
    #[arg(long)]
    flush: bool,
    /// With --flush: give up when the drain makes no progress for this
    /// many seconds (a failing backing).
    #[arg(long, default_value_t = 60, value_parser = limits::timeout_s)]
    stall_timeout_s: u64,
}

pub fn stop(args: StopArgs) -> Result<(), AnyError> {
    let path = args.control.path(None);
    let mut client = connect(&path)?;
    let mut request = Request::new("stop");
    request.flush = Some(args.flush);
    request.stall_timeout_s = Some(args.stall_timeout_s);
    let answer = call_with_progress(&mut client, &request)
        .map_err(|e| format!("{e}; the server goes on serving"))?;
    let done: StopDone = parse(answer)?;
    if done.flushed {
        println!(
            "wcache stop: drained ({} pages destaged, writes refused meanwhile); stopping",
            done.destaged_pages
        );
    } else {
        println!(
            "wcache stop: stopping ({} dirty pages stay in the cache)",
            done.dirty_pages
        );
    }
    drop(client);
    let start = Instant::now();
    while path.exists() {
        if start.elapsed() > GONE_WAIT_MAX {
            return Err(format!(
                "the server agreed to stop but {} is still there after {} s",
                path.display(),
                GONE_WAIT_MAX.as_secs()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("wcache stop: stopped");
    Ok(())
}
