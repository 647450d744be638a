//! Output that never panics: `say!` and `say_err!` print like `println!`
//! and `eprintln!` but ignore a write error, for a server whose standard
//! output or error went away (a pipe whose reader left) and that must go
//! on serving. Tools let SIGPIPE end them instead (`main`).

/// `println!` that never panics: a server whose standard output went away
/// (a pipe whose reader left) goes on serving; its log is on stderr.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics.
macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
