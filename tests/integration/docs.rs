//! The README and the guide (`docs/`) show sweep files and commands; every one of them works, so
//! that none rots:
//!
//! * a whole sweep file (a `toml` block with a `[trainable]`) passes `rtune validate`;
//! * a fragment of one, preceded by `<!-- base: FILE -->`, passes it merged into that shipped
//!   sweep file (its top-level keys replace the file's, its tables the file's tables);
//! * a `toml` block that is no sweep file says so (`<!-- not a sweep file: .. -->`);
//! * a block preceded by `<!-- file: PATH -->` is that file of the checkout, word for word
//!   (docs/crate.md shows the template crate `examples/own-crate` so);
//! * every `rtune` command line of a `sh` block parses as `rtune` reads its arguments, every
//!   `make` target is the Makefile's, every `--example` is one cargo builds;
//! * every page with a `rust` block is compiled as doc tests (`src/lib.rs`' `pages`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;

use crate::common::text;
use crate::storage::S3Server;

const RTUNE: &str = env!("CARGO_BIN_EXE_rtune");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A fenced block of a page: its language, its text, the comment line just above it, and where.
struct Block {
    lang: String,
    text: String,
    note: Option<String>,
    at: String,
}

fn pages() -> Result<Vec<PathBuf>> {
    let mut pages = vec![Path::new(ROOT).join("README.md")];
    for entry in std::fs::read_dir(Path::new(ROOT).join("docs"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    Ok(pages)
}

fn blocks(page: &Path) -> Result<Vec<Block>> {
    let text = std::fs::read_to_string(page)?;
    let name = page.strip_prefix(ROOT).unwrap_or(page).display().to_string();
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    let mut last_line = "";
    for (n, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => {
                let note = last_line.trim().strip_prefix("<!--").map(|c| c.trim_end_matches("-->"));
                open = Some(Block {
                    lang: lang.trim().to_owned(),
                    text: String::new(),
                    note: note.map(|c| c.trim().to_owned()),
                    at: format!("{name}:{}", n + 1),
                });
            }
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
        last_line = line;
    }
    ensure!(open.is_none(), "{name}: a code block is never closed");
    Ok(blocks)
}

/// Lines up to the first table header, and each table (header line and its lines) in order.
fn sections(text: &str) -> (Vec<String>, Vec<(String, Vec<String>)>) {
    let (mut top, mut tables) = (Vec::new(), Vec::<(String, Vec<String>)>::new());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') && !trimmed.starts_with("[[") {
            let header = trimmed.split(']').next().unwrap_or_default().to_owned() + "]";
            tables.push((header, vec![line.to_owned()]));
        } else if let Some((_, lines)) = tables.last_mut() {
            lines.push(line.to_owned());
        } else {
            top.push(line.to_owned());
        }
    }
    (top, tables)
}

fn key_of(line: &str) -> Option<&str> {
    let line = line.trim_start();
    (!line.starts_with('#')).then(|| line.split('=').next()).flatten().map(str::trim)
}

/// `fragment` merged into `base`: its top-level keys replace the base's, its tables replace
/// the base's of the same name (or are added).
fn merged(base: &str, fragment: &str) -> String {
    let (mut top, mut tables) = sections(base);
    let (their_top, their_tables) = sections(fragment);
    for line in their_top {
        if let Some(key) = key_of(&line).filter(|k| !k.is_empty()) {
            top.retain(|l| key_of(l) != Some(key));
            top.push(line);
        }
    }
    for (header, lines) in their_tables {
        match tables.iter_mut().find(|(h, _)| *h == header) {
            Some((_, ours)) => *ours = lines,
            None => tables.push((header, lines)),
        }
    }
    let mut text = top.join("\n") + "\n";
    for (_, lines) in tables {
        text += &(lines.join("\n") + "\n");
    }
    text
}

/// `rtune validate` of `sweep`, written as a sweep file in `dir` (where its relative paths are
/// read from); the experiment would go to a fresh folder, or, when its `storage_path` is an
/// `s3://` URL, to a bucket of that name on an S3 server of its own (moto's), which stands in
/// for the store endpoint the page names.
fn validate(sweep: &str, dir: &Path, at: &str) -> Result<()> {
    let cwd = tempfile::tempdir()?;
    let mut command = Command::new(RTUNE);
    command.current_dir(cwd.path());
    command.env("RTUNE_STORAGE_PATH", cwd.path()).env("RTUNE_STAGING", cwd.path());
    let bucket = sweep.lines().find_map(|l| {
        let url = l.trim().strip_prefix("storage_path = \"s3://")?;
        url.split(['/', '"']).next().map(str::to_owned)
    });
    let mut sweep = sweep.to_owned();
    let _server = match bucket {
        Some(bucket) => {
            let server = S3Server::start()?;
            server.boto3(&format!("s3.create_bucket(Bucket='{bucket}')"))?;
            sweep = with_endpoint(&sweep, &server.endpoint);
            command.envs(server.env());
            Some(server)
        }
        None => None,
    };
    let file = tempfile::Builder::new().prefix(".docs-check-").suffix(".toml").tempfile_in(dir)?;
    std::fs::write(file.path(), &sweep)?;
    let out = command.arg("validate").arg(file.path()).output()?;
    ensure!(out.status.success(), "{at}: `rtune validate` refuses it:\n{}\n{sweep}", text(&out));
    Ok(())
}

/// `sweep` with every `endpoint = ".."` of it (the store's) made `endpoint`.
fn with_endpoint(sweep: &str, endpoint: &str) -> String {
    let mut text = String::new();
    let mut rest = sweep;
    while let Some(at) = rest.find("endpoint = \"") {
        let value = at + "endpoint = \"".len();
        let end = rest[value..].find('"').map_or(rest.len(), |e| value + e);
        text += &rest[..value];
        text += endpoint;
        rest = &rest[end..];
    }
    text + rest
}

fn check_sweep_file(block: &Block) -> Result<()> {
    match block.note.as_deref() {
        Some(note) if note.starts_with("not a sweep file") => Ok(()),
        Some(note) if note.starts_with("base:") => {
            let base = Path::new(ROOT).join(note["base:".len()..].trim());
            let text = std::fs::read_to_string(&base)
                .with_context(|| format!("{}: its base {}", block.at, base.display()))?;
            validate(&merged(&text, &block.text), base.parent().unwrap(), &block.at)
        }
        _ if block.text.contains("[trainable]") => {
            validate(&block.text, tempfile::tempdir()?.path(), &block.at)
        }
        _ => bail!(
            "{}: a sweep-file fragment with no `<!-- base: examples/sweeps/FILE.toml -->` above \
             it (or `<!-- not a sweep file: WHAT -->`)",
            block.at
        ),
    }
}

/// A command line's words as a shell splits them (quotes kept together, `# comments` and
/// leading `NAME=value` assignments left out).
fn words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '#') if !started => break,
            (None, '"' | '\'') => (quote, started) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (_, c) => (word, started) = (word + &c.to_string(), true),
        }
    }
    if started {
        words.push(word);
    }
    let assignment = |w: &String| w.split_once('=').is_some_and(|(k, _)| is_env_name(k));
    words.into_iter().skip_while(assignment).collect()
}

fn is_env_name(k: &str) -> bool {
    !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn check_commands(block: &Block, makefile: &str, cargo: &str) -> Result<usize> {
    let mut checked = 0;
    let text = block.text.replace("\\\n", " ");
    for line in text.lines() {
        let words = words(line);
        match words.first().map(String::as_str) {
            Some("rtune") => {
                rtune_cli::args::Cli::try_parse_from(&words)
                    .map_err(|e| anyhow::anyhow!("{}: `{}`: {e}", block.at, line.trim()))?;
                checked += 1;
            }
            Some("make") => {
                for target in &words[1..] {
                    let rule = format!("\n{target}:");
                    ensure!(makefile.contains(&rule), "{}: no make target `{target}`", block.at);
                }
                checked += 1;
            }
            _ => {}
        }
        if let Some(at) = words.iter().position(|w| w == "--example") {
            let example = words.get(at + 1).context("--example without a name")?;
            let named = format!("name = \"{example}\"");
            let file = Path::new(ROOT).join("examples").join(format!("{example}.rs"));
            ensure!(
                file.is_file() || cargo.contains(&named),
                "{}: no example `{example}`",
                block.at
            );
            checked += 1;
        }
    }
    Ok(checked)
}

pub fn sweep_files_and_commands_in_the_docs_work() -> Result<()> {
    let makefile = std::fs::read_to_string(Path::new(ROOT).join("Makefile"))?;
    let cargo = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml"))?;
    let (mut sweep_files, mut commands, mut files) = (0, 0, 0);
    let lib = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs"))?;
    for page in pages()? {
        let blocks = blocks(&page)?;
        if blocks.iter().any(|b| b.lang.starts_with("rust")) {
            let name = page.strip_prefix(ROOT).unwrap_or(&page).display().to_string();
            let included = format!("include_str!(\"../{name}\")");
            ensure!(lib.contains(&included), "{name}'s Rust is not compiled: src/lib.rs' pages");
        }
        for block in blocks {
            if let Some(path) = block.note.as_deref().and_then(|n| n.strip_prefix("file:")) {
                check_file(&block, path.trim())?;
                files += 1;
                continue;
            }
            match block.lang.split([',', ' ']).next().unwrap_or_default() {
                "toml" => {
                    check_sweep_file(&block)?;
                    sweep_files += 1;
                }
                "sh" => commands += check_commands(&block, &makefile, &cargo)?,
                _ => {}
            }
        }
    }
    // The pages hold some of each: the check found them.
    ensure!(
        sweep_files >= 6 && commands >= 15 && files >= 4,
        "{sweep_files} sweep files, {commands} commands, {files} files"
    );
    Ok(())
}

/// A block that shows a file of the checkout is that file.
fn check_file(block: &Block, path: &str) -> Result<()> {
    let file = Path::new(ROOT).join(path);
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("{}: shows {path}, which cannot be read", block.at))?;
    ensure!(
        text == block.text,
        "{}: not what {path} holds; copy the file into the page again:\n{text}",
        block.at
    );
    Ok(())
}

/// The checks themselves refuse what they must: a mistaken key, a flag `rtune` does not have,
/// a fragment with no base.
pub fn the_docs_checks_refuse_mistakes() -> Result<()> {
    let base =
        std::fs::read_to_string(Path::new(ROOT).join("examples/sweeps/synthetic_asha.toml"))?;
    let dir = tempfile::tempdir()?;
    validate(&base, dir.path(), "base")?;
    let wrong = merged(&base, "[tune]\nmetric = \"score\"\nmode = \"maximum\"\n");
    ensure!(validate(&wrong, dir.path(), "wrong").is_err(), "a wrong mode passed:\n{wrong}");
    let block = |text: &str, note: Option<&str>| Block {
        lang: "sh".into(),
        text: text.into(),
        note: note.map(Into::into),
        at: "test".into(),
    };
    ensure!(check_commands(&block("rtune run --no-such-flag x.toml\n", None), "", "").is_err());
    ensure!(check_commands(&block("make no-such-target\n", None), "\ntest:", "").is_err());
    let ok = block("A=1 rtune ls dir --format json   # a comment\n", None);
    ensure!(check_commands(&ok, "", "")? == 1);
    let shown = Block { lang: "toml".into(), ..block("[workspace]\n", None) };
    ensure!(check_file(&shown, "examples/own-crate/Cargo.toml").is_err(), "a wrong copy passed");
    let fragment = Block { lang: "toml".into(), ..block("[run]\nsync_period_s = 5\n", None) };
    ensure!(check_sweep_file(&fragment).is_err(), "a fragment with no base passed");
    Ok(())
}
