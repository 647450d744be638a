//! `wcache serve --config FILE`: settings come from the TOML file, the
//! command line wins over it, and a bad file is refused before any file is
//! created, with an error naming the line and the key.

mod common;

use common::{wcache, Served};

#[test]
fn settings_come_from_the_file_and_the_command_line_wins() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let control = dir.path().join("w.ctl");
    let config = dir.path().join("wcache.toml");
    std::fs::write(
        &config,
        "# a cache in memory, written through\n\
         cache = \"mem\"\n\
         cache-size = \"8M\"\n\
         export = [\"disk=mem:16M\", \"two=mem:8M\"]\n\
         write-policy = \"write-through\"\n\
         order = \"lrw\"\n\
         rate = \"linear\"\n\
         page-size = 4096\n\
         stop-timeout = 2.5\n",
    )
    .expect("config");
    let config_s = config.to_str().expect("utf8");
    let served = Served::start(&["--config", config_s, "--rate", "adaptive"], &socket);
    let (ok, out, err) = wcache(&[
        "status",
        "--control",
        control.to_str().expect("utf8"),
        "--json",
    ]);
    assert!(ok, "{out}{err}");
    let status: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(status["write_policy"], "write-through");
    assert_eq!(status["destage_order"], "lrw");
    assert_eq!(status["destage_rate"], "adaptive", "the command line wins");
    assert_eq!(status["exports"].as_array().map(Vec::len), Some(2));
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
}

#[test]
fn a_bad_file_names_the_line_and_the_key_and_touches_nothing() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let cache = dir.path().join("cache.img");
    let config = dir.path().join("wcache.toml");
    let config_s = config.to_str().expect("utf8");
    let cache_line = format!("cache = {:?}\n", cache.to_str().expect("utf8"));
    let cases = [
        (
            format!("{cache_line}cache-size = \"lots\"\n"),
            ["line 2", "\"cache-size\"", "lots"],
        ),
        (
            format!("{cache_line}\norder = \"fifo\"\n"),
            ["line 3", "\"order\"", "fifo"],
        ),
        (
            format!("{cache_line}export = [\"disk\"]\n"),
            ["line 2", "\"export\"", "NAME=BACKING"],
        ),
        (
            format!("{cache_line}block-size = 1000\n"),
            ["line 2", "\"block-size\"", "power of two"],
        ),
        (
            format!("{cache_line}cahce-size = \"1G\"\n"),
            ["line 2", "cahce-size", "cache-size"],
        ),
        (
            format!("{cache_line}workers = \"many\"\n"),
            ["line 2", "workers", "invalid type"],
        ),
        ("cache = \n".to_string(), ["line 1", "", ""]),
    ];
    for (text, needles) in cases {
        std::fs::write(&config, &text).expect("config");
        let socket = dir.path().join("w.sock");
        let (ok, out, err) = wcache(&[
            "serve",
            "--config",
            config_s,
            "--socket",
            socket.to_str().expect("utf8"),
        ]);
        assert!(!ok, "{text}: accepted: {out}");
        for needle in needles {
            assert!(err.contains(needle), "{text}: {needle:?} not in {err}");
        }
        assert!(err.contains(config_s), "{err}");
        assert!(!cache.exists(), "{text}: the cache file was created");
        assert!(!socket.exists());
    }
    let (ok, _, err) = wcache(&["serve", "--config", "/nonexistent/w.toml"]);
    assert!(!ok && err.contains("/nonexistent/w.toml"), "{err}");
}
