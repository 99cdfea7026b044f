//! Generated bad input: the shipped sweep files, mutated key by key. Every key renamed (a typo),
//! every value given one of another type, NaN or an infinity, an extreme number, or a
//! malformed `--set`. A mistake exits 2 before anything runs, names its key and where it is
//! (the file's line, or the `--set` argument), panics nowhere and leaves no folder behind; an
//! extreme number is refused so, or accepted.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};

use crate::common::text;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");

/// One mutation: the file's text, the `--set` arguments, and what the message must hold.
struct Case {
    what: String,
    text: String,
    sets: Vec<String>,
    /// Each must be in the message (one of its words, at least).
    named: Vec<Vec<String>>,
    /// A mistake for sure (else an extreme value, which may be fine).
    must_refuse: bool,
}

/// A shipped sweep file with its storage redirected to `storage`.
struct Shipped {
    name: String,
    text: String,
    /// Its param_space goes to a command, which may read any params: renamed or retyped params
    /// are no mistake there.
    command: bool,
}

fn shipped(storage: &Path) -> Result<Vec<Shipped>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sweeps");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir)?.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    files.sort();
    let mut out = Vec::new();
    for path in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
        let original = std::fs::read_to_string(&path)?;
        let storage_line = format!("storage_path = {:?}", storage.display().to_string());
        let mut lines: Vec<String> = original
            .lines()
            .map(|l| if l.starts_with("storage_path") { storage_line.clone() } else { l.into() })
            // Paths from the file's folder (its datasets) still name the shipped files from
            // the case's folder.
            .map(|l| l.replace("\"../../", &format!("\"{}/", env!("CARGO_MANIFEST_DIR"))))
            .collect();
        if !original.lines().any(|l| l.starts_with("storage_path")) {
            lines.insert(0, storage_line);
        }
        // Every line keeps its number with a comment line dropped in place of a blank one.
        let text = lines.join("\n") + "\n";
        let command = original.contains("\ncommand =") || original.contains("[trainable]\ncommand");
        let name = path.file_name().context("name")?.to_string_lossy().into_owned();
        out.push(Shipped { name, text, command });
    }
    ensure!(out.len() >= 3, "{} sweep files shipped", out.len());
    Ok(out)
}

/// `grace_period` → `grace_peroid`: the last two letters swapped (a typo, not a new word).
fn typo(key: &str) -> String {
    let mut chars: Vec<char> = key.chars().collect();
    let n = chars.len();
    if n >= 2 {
        chars.swap(n - 1, n - 2);
    }
    let typo: String = chars.into_iter().collect();
    if typo == key { format!("{key}x") } else { typo }
}

/// Every key of the file renamed, line by line: `key =` at a line's start, a key inside an
/// inline table, or a `[table]` header.
fn renamed(file: &Shipped, cases: &mut Vec<Case>) {
    let key = regex_lite_keys;
    let mut table = String::new();
    for (i, line) in file.text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.split(']').next()) {
            table = header.to_owned();
            let bad = typo(header);
            let text = replace_line(&file.text, i, &line.replacen(header, &bad, 1));
            cases.push(Case {
                what: format!("{}: [{header}] renamed [{bad}]", file.name),
                text,
                sets: Vec::new(),
                named: vec![vec![format!(":{}:", i + 1)], vec![bad, header.to_owned()]],
                must_refuse: true,
            });
            continue;
        }
        for (start, name) in key(line) {
            let path = if table.is_empty() { name.clone() } else { format!("{table}.{name}") };
            // A command may read any param name, and a sweep's `name` is data, not a key.
            if (file.command && table == "param_space" && start == 0)
                || name == "name" && start == 0
            {
                continue;
            }
            let bad = typo(&name);
            let mut changed = line.to_owned();
            changed.replace_range(start..start + name.len(), &bad);
            cases.push(Case {
                what: format!("{}: `{path}` renamed `{bad}` (line {})", file.name, i + 1),
                text: replace_line(&file.text, i, &changed),
                sets: Vec::new(),
                named: vec![vec![format!(":{}:", i + 1)], vec![bad, name.clone()]],
                must_refuse: true,
            });
        }
    }
}

/// The keys on a line with their byte offsets: the one at its start and those after `{` or `,`
/// inside inline tables (strings skipped).
fn regex_lite_keys(line: &str) -> Vec<(usize, String)> {
    let bytes = line.as_bytes();
    let mut keys = Vec::new();
    let (mut i, mut in_string, mut expect_key) = (0, false, true);
    while i < bytes.len() {
        let c = bytes[i] as char;
        if in_string {
            in_string = c != '"';
            i += 1;
            continue;
        }
        match c {
            '"' => in_string = true,
            '#' => break,
            '{' | ',' => expect_key = true,
            c if expect_key && (c.is_ascii_alphabetic() || c == '_') => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if line[i..].trim_start().starts_with('=') {
                    keys.push((start, line[start..i].to_owned()));
                }
                expect_key = false;
                continue;
            }
            c if !c.is_whitespace() => expect_key = false,
            _ => {}
        }
        i += 1;
    }
    keys
}

fn replace_line(text: &str, index: usize, with: &str) -> String {
    let lines: Vec<&str> =
        text.lines().enumerate().map(|(i, l)| if i == index { with } else { l }).collect();
    lines.join("\n") + "\n"
}

/// Every leaf value of the file, by dotted path (inline tables included).
fn leaves(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (key, value) in table {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            toml::Value::Table(inner) => leaves(&path, inner, out),
            other => out.push((path, other.clone())),
        }
    }
}

/// Values through `--set`: another type, NaN or an infinity, an extreme number, a malformed
/// value; rotating through the variants leaf by leaf.
fn retyped(file: &Shipped, cases: &mut Vec<Case>) -> Result<()> {
    let table: toml::Table = toml::from_str(&file.text)?;
    let mut all = Vec::new();
    leaves("", &table, &mut all);
    const NOT_FINITE: [&str; 3] = ["nan", "inf", "-inf"];
    const EXTREME: [&str; 6] =
        ["1e308", "-1e308", "9223372036854775807", "-9223372036854775808", "-1", "0"];
    for (n, (path, value)) in all.into_iter().enumerate() {
        if path == "storage_path" || path == "name" {
            continue;
        }
        let free = file.command && path.starts_with("param_space.");
        let set = |v: &str| vec![format!("{path}={v}")];
        let mut case = |what: &str, sets: Vec<String>, must_refuse: bool| {
            let head: Vec<&str> = path.split('.').take(2).collect();
            cases.push(Case {
                what: format!("{}: {what} ({})", file.name, sets.join(" ")),
                text: file.text.clone(),
                named: vec![vec!["--set".into()], vec![head.join(".")]],
                sets,
                must_refuse,
            });
        };
        let other_type = match &value {
            toml::Value::String(_) => "12345",
            toml::Value::Boolean(_) => "\"yes\"",
            _ => "\"text\"",
        };
        if !free {
            case("another type", set(other_type), true);
        }
        let numbers = |v: &str| match &value {
            toml::Value::Integer(_) | toml::Value::Float(_) => Some(v.to_owned()),
            toml::Value::Array(items)
                if items.first().is_some_and(|x| x.is_integer() || x.is_float()) =>
            {
                let rest: Vec<String> = items[1..].iter().map(number).collect();
                Some(format!(
                    "[{}]",
                    std::iter::once(v.to_owned()).chain(rest).collect::<Vec<_>>().join(", ")
                ))
            }
            _ => None,
        };
        if let Some(v) = numbers(NOT_FINITE[n % 3]) {
            case("not finite", set(&v), true);
        }
        if let Some(v) = numbers(EXTREME[n % EXTREME.len()]) {
            case("an extreme number", set(&v), false);
        }
        if n % 4 == 0 {
            case("a malformed value", set("{ loguniform = [0.1"), true);
        }
    }
    Ok(())
}

/// A number of a shipped array as TOML writes it.
fn number(v: &toml::Value) -> String {
    match v {
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(x) => format!("{x:?}"),
        _ => "0".into(),
    }
}

fn rtune(args: &[&str], dir: &Path) -> Result<Output> {
    Ok(Command::new(RTUNE).args(args).current_dir(dir).env_remove("RUST_LOG").output()?)
}

/// Runs `case` (a mistake with `rtune run`, an extreme value with `rtune validate`, which runs
/// nothing either way) and checks how it ended; the failure's text, if any.
fn check(case: &Case, dir: &Path, storage: &Path, index: usize) -> Result<(), String> {
    let file = dir.join(format!("case{index}/sweep.toml"));
    let fail = |why: String| format!("{}: {why}", case.what);
    std::fs::create_dir_all(file.parent().unwrap()).map_err(|e| fail(e.to_string()))?;
    std::fs::write(&file, &case.text).map_err(|e| fail(e.to_string()))?;
    let mut args = vec![if case.must_refuse { "run" } else { "validate" }, file.to_str().unwrap()];
    for set in &case.sets {
        args.extend(["--set", set.as_str()]);
    }
    args.push("--no-tui");
    if !case.must_refuse {
        args.pop();
    }
    let out = rtune(&args, dir).map_err(|e| fail(e.to_string()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE") {
        return Err(fail(format!("a panic:\n{}", text(&out))));
    }
    if storage.exists() {
        return Err(fail(format!("{} was made:\n{}", storage.display(), text(&out))));
    }
    match out.status.code() {
        Some(0) if !case.must_refuse => Ok(()),
        Some(2) => {
            match case.named.iter().find(|any| !any.iter().any(|n| stderr.contains(n.as_str()))) {
                Some(missing) => Err(fail(format!("the message lacks {missing:?}:\n{stderr}"))),
                None => Ok(()),
            }
        }
        code => Err(fail(format!("exit {code:?}, not 2:\n{}", text(&out)))),
    }
}

pub fn mutated_sweep_files_are_refused_before_anything_runs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = dir.path().join("results");
    let mut cases = Vec::new();
    for file in shipped(&storage)? {
        renamed(&file, &mut cases);
        retyped(&file, &mut cases)?;
    }
    let refused = cases.iter().filter(|c| c.must_refuse).count();
    ensure!(refused >= 150, "only {refused} mistakes generated");
    // Four at a time: each is a process that loads libtorch.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    if let Err(why) = check(case, dir.path(), &storage, i) {
                        failures.lock().unwrap().push(why);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    ensure!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    Ok(())
}
