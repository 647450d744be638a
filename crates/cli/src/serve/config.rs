//! `wcache serve --config FILE`: every setting of `wcache serve` from a
//! TOML file, keys named as the long options (`cache-size = "1G"`,
//! `export = ["disk=/dev/sdb"]`). An option given on the command line wins
//! over the file. It exists so that a service (systemd, `docs/wcache.service`)
//! runs from a file an operator can read and diff. Every value is checked
//! here with the parser the option uses, and every error names the file,
//! the line and the key; it must never touch a device.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;
use wcache_core::config::ConsistencyPoints;
use wcache_core::policy::admission::ADMISSIONS;
use wcache_core::policy::destage_order::DESTAGE_ORDERS;
use wcache_core::policy::destage_rate::DESTAGE_RATES;
use wcache_core::policy::registry::Registry;
use wcache_core::policy::write_policy::WRITE_POLICIES;

use crate::args::{duration_ns_arg, export_args, size_arg, sync_arg};
use crate::cache_args::CacheArgs;
use crate::limits;
use crate::serve::settings::cache_sync_arg;
use crate::serve::ServeArgs;

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("--config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key or a wrong type (the message has the line).
    #[error("--config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("--config {path}, line {line}, key {key:?}: {message}")]
    Value {
        path: String,
        line: usize,
        key: String,
        message: String,
    },
}

/// A size as a string with a unit ("64K") or a number of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

impl From<Size> for String {
    fn from(size: Size) -> String {
        match size {
            Size::Bytes(n) => n.to_string(),
            Size::Text(text) => text,
        }
    }
}

/// The file: the keys of `wcache serve`'s long options.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ServeFile {
    socket: Option<Spanned<PathBuf>>,
    listen: Option<Spanned<String>>,
    tls: Option<Spanned<String>>,
    tls_certificates: Option<Spanned<PathBuf>>,
    tls_verify_peer: Option<Spanned<bool>>,
    control: Option<Spanned<PathBuf>>,
    metrics: Option<Spanned<String>>,
    data_dir: Option<Spanned<PathBuf>>,
    cache: Option<Spanned<String>>,
    cache_size: Option<Spanned<Size>>,
    cache_sync: Option<Spanned<String>>,
    direct: Option<Spanned<bool>>,
    cache_format: Option<Spanned<u32>>,
    persist_on_flush: Option<Spanned<bool>>,
    flush_interval: Option<Spanned<f64>>,
    backing: Option<Spanned<String>>,
    #[serde(rename = "export")]
    exports: Option<Spanned<Vec<String>>>,
    backing_size: Option<Spanned<Size>>,
    backing_sync: Option<Spanned<String>>,
    backing_timeout: Option<Spanned<String>>,
    write_policy: Option<Spanned<String>>,
    force: Option<Spanned<bool>>,
    order: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
    low_threshold: Option<Spanned<f64>>,
    high_threshold: Option<Spanned<f64>>,
    destages_max: Option<Spanned<u32>>,
    admission: Option<Spanned<String>>,
    #[serde(rename = "export-admission")]
    export_admissions: Option<Spanned<Vec<String>>>,
    #[serde(rename = "critical")]
    critical_exports: Option<Spanned<Vec<String>>>,
    sequential_cutoff: Option<Spanned<Size>>,
    max_dirty_age: Option<Spanned<String>>,
    idle_after: Option<Spanned<String>>,
    idle_destages: Option<Spanned<u32>>,
    journal_size: Option<Spanned<Size>>,
    #[serde(rename = "journal")]
    journals: Option<Spanned<Vec<String>>>,
    commit_size: Option<Spanned<Size>>,
    commit_age: Option<Spanned<String>>,
    consistency_points: Option<Spanned<String>>,
    page_size: Option<Spanned<u64>>,
    group_size: Option<Spanned<u64>>,
    block_size: Option<Spanned<u32>>,
    workers: Option<Spanned<usize>>,
    poll_us: Option<Spanned<u64>>,
    io_threads: Option<Spanned<usize>>,
    no_io_uring: Option<Spanned<bool>>,
    stop_timeout: Option<Spanned<f64>>,
    volatile_write_back_for_benchmarks: Option<Spanned<bool>>,
    replicate_to: Option<Spanned<String>>,
    replica_state: Option<Spanned<PathBuf>>,
    peer_timeout: Option<Spanned<String>>,
    on_peer_lost: Option<Spanned<String>>,
    start_without_peer: Option<Spanned<bool>>,
    replicate_tls_certificates: Option<Spanned<PathBuf>>,
    takeover: Option<Spanned<bool>>,
}

type Check<T> = fn(&T) -> Result<(), String>;

fn cache_format(v: &u32) -> Result<(), String> {
    if (2..=3).contains(v) {
        Ok(())
    } else {
        Err(format!("{v} is not a cache format: 2 or 3"))
    }
}

fn peer_timeout() -> impl Fn(&String) -> Result<(), String> {
    |text| {
        crate::serve::replication::peer_timeout_arg(text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

fn on_peer_lost() -> impl Fn(&String) -> Result<(), String> {
    |text| {
        crate::serve::replication::on_peer_lost_arg(text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

fn no_check<T>(_: &T) -> Result<(), String> {
    Ok(())
}
fn size(option: &'static str) -> impl Fn(&String) -> Result<(), String> {
    move |text| {
        size_arg(option, text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
fn duration(option: &'static str) -> impl Fn(&String) -> Result<(), String> {
    move |text| {
        duration_ns_arg(option, text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
fn sync(option: &'static str) -> impl Fn(&String) -> Result<(), String> {
    move |text| {
        sync_arg(option, text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
/// `cache-sync`: a sync mode or `auto`, as `--cache-sync` takes it.
fn cache_sync() -> impl Fn(&String) -> Result<(), String> {
    |text| {
        cache_sync_arg(text, false)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
/// A name of `registry`'s family (a write policy, destage order, ...).
fn registered<P: ?Sized, A>(
    registry: &'static Registry<P, A>,
) -> impl Fn(&String) -> Result<(), String> {
    move |text| registry.find(text).map(|_| ()).map_err(|e| e.to_string())
}
#[allow(clippy::ptr_arg)] // `merge!` passes each key its field's own type
fn exports(list: &Vec<String>) -> Result<(), String> {
    export_args(list).map(|_| ()).map_err(|e| e.to_string())
}
fn tls_mode(mode: &String) -> Result<(), String> {
    match mode.as_str() {
        "off" | "on" | "require" => Ok(()),
        _ => Err(format!("{mode:?}: valid: off, on, require")),
    }
}
fn points(name: &String) -> Result<(), String> {
    ConsistencyPoints::from_name(name)
        .map(|_| ())
        .ok_or_else(|| format!("{name:?}: valid: {}", ConsistencyPoints::NAMES))
}
/// A number checked by the parser its option uses (`crate::limits`).
fn within<T: ToString, U>(
    parse: fn(&str) -> Result<U, String>,
) -> impl Fn(&T) -> Result<(), String> {
    move |n| parse(&n.to_string()).map(|_| ())
}

/// The 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(0, |t| t.matches('\n').count()) + 1
}

/// The file's key of `ServeArgs` field `field`.
fn key_name(field: &str) -> String {
    match field {
        "exports" => "export".into(),
        "export_admissions" => "export-admission".into(),
        "critical_exports" => "critical".into(),
        "journals" => "journal".into(),
        _ => field.replace('_', "-"),
    }
}

/// Applies `file` to `args`: each key set in the file, checked, and used
/// unless its option was given on the command line (`given`: clap ids).
macro_rules! merge {
    ($file:ident, $args:ident, $given:ident, $err:ident; $($field:ident: $set:ident, $check:expr;)*) => {$(
        if let Some(v) = $file.$field.take() {
            let span = v.span();
            let value = v.into_inner().into();
            ($check)(&value).map_err(|message| $err(span.start, stringify!($field), message))?;
            if !$given.iter().any(|g| g == stringify!($field)) {
                merge!(@$set $args.$field, value);
            }
        }
    )*};
    (@opt $target:expr, $value:expr) => { $target = Some($value) };
    (@val $target:expr, $value:expr) => { $target = $value };
}

/// `args` with the settings of the TOML file at `path` that the command
/// line did not give.
pub fn apply(
    mut args: ServeArgs,
    path: &Path,
    given: &[String],
) -> Result<ServeArgs, ConfigFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let mut file: ServeFile = toml::from_str(&text).map_err(|e| ConfigFileError::Parse {
        path: shown.clone(),
        message: e.to_string().trim_end().to_string(),
    })?;
    let err = |offset: usize, field: &str, message: String| ConfigFileError::Value {
        path: shown.clone(),
        line: line_of(&text, offset),
        key: key_name(field),
        message,
    };
    apply_cache_opts(&mut file, &mut args.cache_opts, given, &err)?;
    merge!(file, args, given, err;
        socket: opt, no_check as Check<PathBuf>;
        listen: opt, no_check as Check<String>;
        tls: val, tls_mode;
        tls_certificates: opt, no_check as Check<PathBuf>;
        tls_verify_peer: val, no_check as Check<bool>;
        data_dir: val, no_check as Check<PathBuf>;
        backing: opt, no_check as Check<String>;
        exports: val, exports;
        backing_size: val, size("backing-size");
        backing_sync: val, sync("backing-sync");
        backing_timeout: val, duration("backing-timeout");
        export_admissions: val, no_check as Check<Vec<String>>;
        critical_exports: val, no_check as Check<Vec<String>>;
        journals: val, no_check as Check<Vec<String>>;
        block_size: val, within(limits::block_size);
        workers: val, within(limits::threads);
        poll_us: val, within(limits::poll_us);
        volatile_write_back_for_benchmarks: val, no_check as Check<bool>;
        replicate_to: opt, no_check as Check<String>;
        replica_state: opt, no_check as Check<PathBuf>;
        peer_timeout: val, peer_timeout();
        on_peer_lost: val, on_peer_lost();
        start_without_peer: val, no_check as Check<bool>;
        replicate_tls_certificates: opt, no_check as Check<PathBuf>;
        takeover: val, no_check as Check<bool>;
    );
    Ok(args)
}

/// The cache options' keys of `file` (`apply`, every front end's).
fn apply_cache_opts(
    file: &mut ServeFile,
    opts: &mut CacheArgs,
    given: &[String],
    err: &dyn Fn(usize, &str, String) -> ConfigFileError,
) -> Result<(), ConfigFileError> {
    merge!(file, opts, given, err;
        control: opt, no_check as Check<PathBuf>;
        metrics: opt, no_check as Check<String>;
        cache: opt, no_check as Check<String>;
        cache_size: opt, size("cache-size");
        cache_sync: val, cache_sync();
        direct: val, no_check as Check<bool>;
        cache_format: opt, cache_format;
        persist_on_flush: val, no_check as Check<bool>;
        flush_interval: val, within(limits::flush_interval);
        write_policy: opt, registered(&WRITE_POLICIES);
        force: val, no_check as Check<bool>;
        order: val, registered(&DESTAGE_ORDERS);
        rate: val, registered(&DESTAGE_RATES);
        low_threshold: val, no_check as Check<f64>;
        high_threshold: val, no_check as Check<f64>;
        destages_max: val, within(limits::destages);
        admission: val, registered(&ADMISSIONS);
        sequential_cutoff: val, size("sequential-cutoff");
        max_dirty_age: val, duration("max-dirty-age");
        idle_after: val, duration("idle-after");
        idle_destages: val, no_check as Check<u32>;
        journal_size: val, size("journal-size");
        commit_size: val, size("commit-size");
        commit_age: val, duration("commit-age");
        consistency_points: val, points;
        page_size: val, no_check as Check<u64>;
        group_size: val, no_check as Check<u64>;
        io_threads: val, within(limits::threads);
        no_io_uring: val, no_check as Check<bool>;
        stop_timeout: val, within(limits::stop_timeout);
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::tests::Serve;
    use clap::Parser;

    #[test]
    fn every_serve_option_is_a_config_key_of_the_same_name() {
        use clap::CommandFactory;
        let command = Serve::command();
        let mut checked = 0;
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            if long == "config" || long == "help" {
                continue;
            }
            // Any value: a wrong type is another error, an unknown key this one.
            match toml::from_str::<ServeFile>(&format!("{long} = 0")) {
                Ok(_) => {}
                Err(e) => assert!(
                    !e.to_string().contains("unknown field"),
                    "--{long} has no config key: {e}"
                ),
            }
            checked += 1;
        }
        assert!(checked > 40, "only {checked} options seen");
        let e = toml::from_str::<ServeFile>("no-such-option = 0")
            .err()
            .expect("an unknown key is refused");
        assert!(e.to_string().contains("unknown field"), "{e}");
    }

    #[test]
    fn every_online_setting_is_a_serve_option_of_the_same_name() {
        use clap::CommandFactory;
        let command = Serve::command();
        let longs: Vec<&str> = command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .collect();
        for key in wcache_io::ops::SET_KEYS {
            assert!(
                longs.contains(key),
                "`wcache set {key}` has no `wcache serve --{key}`"
            );
            let e = toml::from_str::<ServeFile>(&format!("{key} = 0")).err();
            assert!(
                e.is_none_or(|e| !e.to_string().contains("unknown field")),
                "`wcache set {key}` has no config key"
            );
        }
    }

    #[test]
    fn the_example_in_docs_is_valid_and_applied() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wcache.toml");
        let args = Serve::parse_from(["serve"]).args;
        let args = apply(args, &path, &[]).expect("docs/wcache.toml");
        assert_eq!(args.cache_opts.cache.as_deref(), Some("/dev/nvme0n1p3"));
        assert_eq!(args.exports.len(), 2);
        assert_eq!(args.cache_opts.group_size, 262144);
        assert_eq!(args.cache_opts.metrics.as_deref(), Some("127.0.0.1:9187"));
        let given = ["order".to_string()];
        let args = Serve::parse_from(["serve", "--order", "lrw"]).args;
        let applied = apply(args, &path, &given).expect("valid");
        assert_eq!(applied.cache_opts.order, "lrw");
    }
}
