//! The ratchet on code size (TigerBeetle's `tidy.zig` is the model): no
//! function of the product's sources (every crate's `src/`) over
//! `FN_LINES_MAX` lines and no such file over `FILE_LINES_MAX`, except those on `tidy_allowlist.txt`, each at most as
//! long as it records. The list may only shrink: an entry that is now
//! within the limit (or gone) must be removed, and one that grew past its
//! record fails. It reads rustfmt-formatted sources as text: a function is
//! from its `fn` line to the closing brace at the same indentation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FN_LINES_MAX: usize = 70;
const FILE_LINES_MAX: usize = 800;
const ALLOWLIST: &str = "tests/tidy_allowlist.txt";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The name of the function a line declares, if it does.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end]).filter(|n| !n.is_empty())
}

/// Every function of `text` with a body: (name, lines from `fn` to its brace).
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let indent = &line[..line.len() - line.trim_start().len()];
        // The signature ends with a body `{` or a `;` (no body).
        let Some(open) = (i..lines.len()).find(|&j| {
            let t = lines[j].trim_end();
            t.ends_with('{') || t.ends_with(';') || t.ends_with('}')
        }) else {
            continue;
        };
        if !lines[open].trim_end().ends_with('{') {
            continue; // no body, or all of it on one line
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j].trim_end() == close) {
            out.push((name.to_string(), end - i + 1));
        }
    }
    out
}

/// Every item over its limit: "fn PATH NAME[#N]" or "file PATH", with its lines.
fn offenders() -> BTreeMap<String, usize> {
    let root = workspace();
    let mut files = Vec::new();
    // The product's sources: every crate's src/ (tests and benches aside).
    let crates = std::fs::read_dir(root.join("crates")).expect("crates/");
    for krate in crates.flatten() {
        rust_files(&krate.path().join("src"), &mut files);
    }
    let mut found = BTreeMap::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read source");
        let rel = path
            .strip_prefix(&root)
            .expect("under the workspace")
            .display()
            .to_string();
        let lines = text.lines().count();
        if lines > FILE_LINES_MAX {
            found.insert(format!("file {rel}"), lines);
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (name, len) in functions(&text) {
            let n = seen.entry(name.clone()).or_default();
            *n += 1;
            let key = match *n {
                1 => format!("fn {rel} {name}"),
                k => format!("fn {rel} {name}#{k}"),
            };
            if len > FN_LINES_MAX {
                found.insert(key, len);
            }
        }
    }
    found
}

fn allowlist() -> BTreeMap<String, usize> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(ALLOWLIST);
    let text = std::fs::read_to_string(&path).expect("tidy allowlist");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (item, lines) = l.rsplit_once(' ').expect("ITEM LINES");
            (item.to_string(), lines.parse().expect("a line count"))
        })
        .collect()
}

#[test]
fn functions_and_files_stay_within_their_limits_and_the_allowlist_only_shrinks() {
    let found = offenders();
    let allowed = allowlist();
    let mut problems = Vec::new();
    for (item, &lines) in &found {
        match allowed.get(item) {
            None => problems.push(format!(
                "{item}: {lines} lines, over the limit ({FN_LINES_MAX} a function, \
                 {FILE_LINES_MAX} a file): split it"
            )),
            Some(&max) if lines > max => problems.push(format!(
                "{item}: {lines} lines, more than the {max} the allowlist records: split it"
            )),
            Some(_) => {}
        }
    }
    for item in allowed.keys() {
        if !found.contains_key(item) {
            problems.push(format!(
                "{item}: within the limit now (or gone): remove it from {ALLOWLIST}"
            ));
        }
    }
    assert!(
        !found.is_empty() || allowed.is_empty(),
        "the scan found nothing"
    );
    assert!(problems.is_empty(), "tidy:\n{}", problems.join("\n"));
}

#[test]
fn the_scanner_measures_functions_as_written() {
    let text = "impl X {\n    pub fn a(&self) -> u32 {\n        1\n    }\n\n    fn b();\n    pub(crate) fn c(\n        x: u32,\n    ) -> u32 {\n        x\n    }\n}\nfn d() {}\n";
    assert_eq!(
        functions(text),
        vec![("a".to_string(), 3), ("c".to_string(), 5)]
    );
    assert_eq!(fn_name("    pub const fn len(&self)"), Some("len"));
    assert_eq!(fn_name("    let f = x;"), None);
}
