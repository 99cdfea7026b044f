//! The layout rule, checked: imports point one way.
//!
//! * rtune's top-level modules sit in the layers of [`LAYERS`]; a module may import modules of
//!   lower layers only (its own submodules aside). A new module must be given a layer here.
//! * Inside the `rtune-searchers` crate and inside `cluster::pool`, the modules import each other
//!   without cycles (ids and errors at the bottom).
//! * The CPU collectives are a crate under both the driver and the worker side; `rtune`
//!   re-exports named items of the driver, never its modules whole; no file is over 800 lines
//!   before its test module.
//!
//! References are read from the code (comments skipped): `crate::a`, `crate::{a, b::c}` and
//! `super::` chains that climb to the crate root.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The driver's modules (`rtune-driver`), lowest layer first. Edit with that crate's top-level
/// doc (`driver/src/lib.rs`) and `src/lib.rs`'s picture.
const DRIVER_LAYERS: &[&[&str]] = &[
    // Leaves: no rtune imports at all.
    &["outcome", "sys", "proto", "log", "setting"],
    // One error type for everything above (it carries a failed run's `outcome`).
    &["error"],
    // Hooks into a sweep: the callback trait and the built-in loggers.
    &["callback"],
    // Plain settings, reports and plumbing.
    &["config", "metrics", "rpc"],
    // Files on disk and in object stores: result files, checkpoint folders.
    &["storage"],
    // Datasets and their preparation, preprocessors (their parquet files go through storage); a
    // run's record (its result files, written and read back).
    &["data", "record"],
    // The resource pool, its head, node agents and client.
    &["cluster"],
    // The driver side of a worker group: attempts, launching, logs, the hub.
    &["group"],
    // What every run of the driver process shares: one runtime, hubs, the local pool.
    &["runtime"],
    // Ray Train: TorchTrainer and its run loop; the metrics endpoint (Prometheus').
    &["train", "monitor"],
    // Ray Tune: sweeps of trainers, the controller, experiments and result grids; Ray Serve's
    // part: an exported model behind the Open Inference Protocol.
    &["tune", "serve"],
];

/// The worker and model side (`rtune`), lowest layer first, all above the driver's modules
/// (which it names as `rtune_driver::..`). Edit with `src/lib.rs`'s picture.
const RTUNE_LAYERS: &[&[&str]] = &[
    // The wheels' native libraries opened at run time (where they are, their C APIs).
    &["native"],
    // Where plain data meets libtorch (errors, tensors of a table); CUDA opened at run time.
    &["torch", "cuda"],
    // NCCL behind the collective trait; a VarStore in a checkpoint; the shipped digits;
    // XGBoost's and LightGBM's C APIs.
    &["nccl", "var_store", "digits", "xgboost", "lightgbm"],
    // The worker process: TrainContext, models and optimizers, shards, command trainables.
    &["worker"],
    // A trained model: export, prediction, batch prediction; the tree trainers.
    &["model", "trees"],
    // The demo's train functions (on the public API, like a user's own).
    &["builtins"],
    // The `rtune` command line: sweep files, experiments on disk, cluster commands.
    &["cli"],
];

/// The command line's modules (`rtune-cli`), lowest layer first, all above the driver's.
const CLI_LAYERS: &[&[&str]] = &[
    // Numbers and times as the views write them; sweep files' documents and their problems.
    &["format", "doc"],
    // Exit codes, and the error a command ends with.
    &["exit"],
    // The grammar: every command and flag.
    &["args"],
    // Experiments on disk, as `ls` and `show` read them.
    &["inspect"],
    // The views of a sweep: progress lines, the watch stream, the terminal UI.
    &["ui"],
    // The commands that only read (answered by `rtune` itself).
    &["commands"],
    // `rtune`, which answers those and execs the full program for the others.
    &["front"],
    // The full program: every other command.
    &["program"],
];

/// A crate of modules in layers; `below` are the modules of the crates under it, which any of
/// its modules may import (`rtune` names the driver's through its re-exports, `crate::tune`).
struct Layered {
    src: &'static str,
    layers: &'static [&'static [&'static str]],
    below: &'static [&'static [&'static str]],
}

const LAYERED: [Layered; 3] = [
    Layered { src: "driver/src", layers: DRIVER_LAYERS, below: &[] },
    Layered { src: "cli/src", layers: CLI_LAYERS, below: DRIVER_LAYERS },
    Layered { src: "src", layers: RTUNE_LAYERS, below: DRIVER_LAYERS },
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under a crate's `src`: `cluster/pool/ids.rs` → [cluster, pool,
/// ids]; `cluster/mod.rs` → [cluster].
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> =
        rel.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn ident_at(text: &str) -> String {
    text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The first path segment of every path in a `{a::b, c, d::{e, f}}` group that starts `text`.
fn group_heads(text: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut expect) = (0, true);
    for (i, c) in text.char_indices() {
        match c {
            '{' => {
                depth += 1;
                expect = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => expect = true,
            c if expect && depth == 1 && (c.is_alphanumeric() || c == '_') => {
                heads.push(ident_at(&text[i..]));
                expect = false;
            }
            _ => {}
        }
    }
    heads
}

fn layer_in(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers.iter().position(|layer| layer.contains(&module))
}

/// The layers' sources.
fn rtune_sources() -> Vec<PathBuf> {
    LAYERED.iter().map(|c| root().join(c.src)).collect()
}

#[test]
fn rtune_modules_import_only_lower_layers() {
    let mut wrong = Vec::new();
    for layered in &LAYERED {
        check_layers(layered, &mut wrong);
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

fn check_layers(layered: &Layered, wrong: &mut Vec<String>) {
    let src = &root().join(layered.src);
    let layer_of = |module: &str| layer_in(layered.layers, module);
    let below = |module: &str| layer_in(layered.below, module).is_some();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    for file in &files {
        let module = module_path(src, file);
        // The crate root and its binaries (`main.rs`, `bin/`) are no layer's.
        let Some(top) = module.first().filter(|m| !["lib", "main", "bin"].contains(&m.as_str()))
        else {
            continue;
        };
        let Some(own) = layer_of(top) else {
            wrong.push(format!("{}: module `{top}` has no layer in LAYERS", file.display()));
            continue;
        };
        for target in references(src, file) {
            let Some(to) = target.first().filter(|t| *t != top) else { continue };
            if to.starts_with(char::is_uppercase) {
                wrong.push(format!(
                    "{}: `crate::{to}` goes through the crate root; import it from its module",
                    file.display()
                ));
                continue;
            }
            match layer_of(to) {
                None if below(to) => {}
                Some(layer) if layer < own => {}
                Some(layer) => wrong.push(format!(
                    "{}: `{top}` (layer {own}) imports `{to}` (layer {layer}); imports point \
                     down only: report upward through a trait or channel the lower layer defines",
                    file.display()
                )),
                None => {
                    wrong.push(format!("{}: `crate::{to}` is no module in LAYERS", file.display()))
                }
            }
        }
    }
}

/// Edges between the modules directly under `dir` (files or folders), from their references to
/// each other; `prefix` is the module path of `dir` in its crate.
fn sibling_graph(src: &Path, dir: &Path, skip: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let prefix = module_path(src, &dir.join("mod.rs"));
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_path(src, file);
        let Some(me) = module.get(prefix.len()).cloned() else { continue };
        if skip.contains(&me.as_str()) {
            continue;
        }
        let edges = graph.entry(me.clone()).or_default();
        for target in references(src, file) {
            if target.len() > prefix.len()
                && target[..prefix.len()] == prefix[..]
                && target[prefix.len()] != me
                && !skip.contains(&target[prefix.len()].as_str())
            {
                edges.insert(target[prefix.len()].clone());
            }
        }
    }
    graph
}

/// A cycle in `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| p == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn searchers_modules_have_no_cycles() {
    let src = root().join("searchers/src");
    let graph = sibling_graph(&src, &src, &["lib"]);
    assert!(graph.contains_key("trial") && graph.contains_key("error"), "{graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("rtune-searchers modules import each other in a cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn pool_modules_have_no_cycles() {
    let src = root().join("driver/src");
    // `mod.rs` is the pool itself (its children implement it); tests may use everything.
    let graph = sibling_graph(&src, &src.join("cluster/pool"), &["mod", "tests", "proptests"]);
    assert!(graph.contains_key("error") && graph.contains_key("ids"), "{graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("cluster::pool modules import each other in a cycle: {}", cycle.join(" → "));
    }
}

/// The checker itself finds what it must: a cycle, and an upward import.
#[test]
fn the_checks_can_fail() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("error".to_owned(), BTreeSet::from(["trial".to_owned()])),
        ("trial".to_owned(), BTreeSet::from(["metrics".to_owned()])),
        ("metrics".to_owned(), BTreeSet::from(["error".to_owned()])),
    ]
    .into();
    assert_eq!(find_cycle(&graph).unwrap(), ["error", "trial", "metrics", "error"]);
    let dir = std::env::temp_dir().join(format!("rtune_layers_{}", std::process::id()));
    std::fs::create_dir_all(dir.join("storage")).unwrap();
    let file = dir.join("storage/mod.rs");
    std::fs::write(&file, "use crate::{error::Result, train::TorchTrainer};\nfn f() { super::group::x(); }\n// crate::cluster\n").unwrap();
    let refs: Vec<String> = references(&dir, &file).into_iter().map(|p| p.join("::")).collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(refs, ["error", "group::x", "train"]);
    assert!(layer_in(DRIVER_LAYERS, "train") > layer_in(DRIVER_LAYERS, "storage"));
}

/// The file-level reader resolves a path to the file it lands in, groups included.
#[test]
fn file_references_land_in_their_files() {
    let dir = std::env::temp_dir().join(format!("rtune_files_{}", std::process::id()));
    std::fs::create_dir_all(dir.join("cli/ui")).unwrap();
    for file in ["cli/mod.rs", "cli/ui/mod.rs", "cli/ui/model.rs", "cli/inspect.rs"] {
        std::fs::write(dir.join(file), "").unwrap();
    }
    let file = dir.join("cli/inspect.rs");
    let text =
        "use super::ui::{model::{Model, Event}, format};\nfn f() { crate::cli::ui::model::x(); }\n";
    std::fs::write(&file, text).unwrap();
    let refs: BTreeSet<String> = references(&dir, &file)
        .iter()
        .filter_map(|p| module_of(&dir, p))
        .map(|m| m.join("::"))
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    // `format` is no file here: it lands in `cli::ui`, where it would be declared.
    assert_eq!(refs, BTreeSet::from(["cli::ui".to_owned(), "cli::ui::model".to_owned()]));
}

/// The module a path `crate::a::b::C` lands in: the longest prefix of it that is a module of
/// `src` (a file `a/b.rs` or `a/b/mod.rs`).
fn module_of(src: &Path, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|m| {
        let rel: PathBuf = m.iter().collect();
        src.join(&rel).with_extension("rs").is_file() || src.join(&rel).join("mod.rs").is_file()
    })
}

/// Every module path (all its segments, not only the first) this file's code names through
/// `crate::` or `super::`, groups (`{a, b::c}`) spelled out.
fn references(src: &Path, file: &Path) -> BTreeSet<Vec<String>> {
    let module = module_path(src, file);
    let mut refs = BTreeSet::new();
    let text = std::fs::read_to_string(file).unwrap();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let mut rest = line;
        while let Some(at) = rest.find("crate::").or_else(|| rest.find("super::")) {
            let standalone =
                at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
            let (mut base, mut after) = if rest[at..].starts_with("crate::") {
                (Vec::new(), &rest[at + "crate::".len()..])
            } else {
                let mut base = module.clone();
                let mut after = &rest[at..];
                while let Some(next) = after.strip_prefix("super::") {
                    base.pop();
                    after = next;
                }
                (base, after)
            };
            if standalone {
                // Segments up to a group or the end of the path.
                loop {
                    let head = ident_at(after);
                    if head.is_empty() || head == "self" {
                        break;
                    }
                    base.push(head.clone());
                    after = &after[head.len()..];
                    match after.strip_prefix("::") {
                        Some(next) => after = next,
                        None => break,
                    }
                }
                if after.starts_with('{') {
                    for head in group_heads(after) {
                        let mut path = base.clone();
                        path.push(head);
                        refs.insert(path);
                    }
                } else {
                    refs.insert(base);
                }
            }
            rest = &rest[at + 6..];
        }
    }
    refs
}

/// No two files of rtune's `src` import each other, directly or around a circle: each concern
/// sits below the ones built on it. (A module's own submodules are not its imports.)
#[test]
fn rtune_files_import_no_circle() {
    for src in rtune_sources() {
        files_import_no_circle(&src);
    }
}

fn files_import_no_circle(src: &Path) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let me = module_path(src, file);
        let edges = graph.entry(me.join("::")).or_default();
        for target in references(src, file) {
            let Some(to) = module_of(src, &target) else { continue };
            // Naming an ancestor module's item (`super::X`) or a descendant's is within one
            // module's own tree.
            if to.is_empty() || me.starts_with(&to) || to.starts_with(&me) {
                continue;
            }
            edges.insert(to.join("::"));
        }
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!("rtune's files import each other in a circle: {}", cycle.join(" → "));
    }
}

/// The most lines a file of rtune's crates may have before its test module (an inline
/// `#[cfg(test)] mod tests { .. }`): past it, a file holds more than one concern (split it).
const MAX_LINES: usize = 800;

/// The lines of `text` before its inline test module: every line counts (a test module
/// declared by `#[cfg(test)] mod name;` is one line of the file, not its end).
fn lines_before_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let inline_test_module = |i: usize| {
        lines[i].starts_with("#[cfg(test)]")
            && lines[i + 1..]
                .iter()
                .find(|l| !l.trim().is_empty() && !l.starts_with("#["))
                .is_some_and(|l| {
                    let item = l.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                    item.starts_with("mod ") && l.trim_end().ends_with('{')
                })
    };
    (0..lines.len()).find(|&i| inline_test_module(i)).unwrap_or(lines.len())
}

#[test]
fn no_file_is_too_long() {
    let mut files = Vec::new();
    for src in ["src", "driver/src", "searchers/src", "cli/src", "collective/src"] {
        rust_files(&root().join(src), &mut files);
    }
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = lines_before_tests(&std::fs::read_to_string(file).unwrap());
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines before the tests:\n{}", long.join("\n"));
}

/// The count goes past test modules declared at the top and stops at the inline one.
#[test]
fn lines_are_counted_up_to_the_inline_test_module() {
    let text = "mod a;\n#[cfg(test)]\nmod checks;\nfn f() {}\n\n#[cfg(test)]\n#[allow(x)]\nmod tests {\n}\n";
    assert_eq!(lines_before_tests(text), 5);
    assert_eq!(lines_before_tests("fn f() {}\n#[cfg(test)]\nfn helper() {}\n"), 3);
}

/// A crate's `[dependencies]` on other rtune crates, by package name.
fn rtune_dependencies(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(manifest)).unwrap();
    let deps = text.split("[dependencies]").nth(1).unwrap_or_default();
    let deps = deps.split("\n[").next().unwrap_or_default();
    deps.lines()
        .filter_map(|l| l.split(['.', ' ', '=']).next())
        .filter(|name| name.starts_with("rtune-"))
        .map(str::to_owned)
        .collect()
}

/// The CPU collectives are a crate of their own under both sides: they depend on no rtune
/// crate; the driver and the worker side (`rtune`) depend on them; and the driver names only
/// what a run's errors carry and `poll`, never a ring (the worker side builds groups).
#[test]
fn the_collectives_sit_under_driver_and_worker() {
    assert!(rtune_dependencies("collective/Cargo.toml").is_empty());
    for manifest in ["driver/Cargo.toml", "Cargo.toml"] {
        assert!(rtune_dependencies(manifest).contains("rtune-collective"), "{manifest}");
    }
    let mut files = Vec::new();
    rust_files(&root().join("driver/src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("rtune_collective::") {
            let named = ident_at(&text[at + "rtune_collective::".len()..]);
            assert!(
                ["CollectiveError", "poll"].contains(&named.as_str()),
                "{}: the driver names rtune_collective::{named}; groups are the worker side's",
                file.display()
            );
        }
    }
}

/// Every `pub use rtune_driver::..` in rtune's `src/lib.rs` names items, not driver modules:
/// what rtune promises is what it names, not everything a driver module makes `pub`.
#[test]
fn rtune_re_exports_named_items_only() {
    let driver = root().join("driver/src");
    // A driver module is found as one (what a whole-module re-export would name).
    assert_eq!(module_of(&driver, &["tune".to_owned()]), Some(vec!["tune".to_owned()]));
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let mut named = 0;
    for (at, _) in lib.match_indices("pub use rtune_driver::") {
        let rest = &lib[at + "pub use rtune_driver::".len()..];
        let statement = &rest[..rest.find(';').unwrap()];
        for path in use_paths(statement) {
            let path: Vec<String> = path.split("::").map(str::to_owned).collect();
            assert!(
                module_of(&driver, &path).is_none_or(|m| m != path),
                "src/lib.rs re-exports the driver module `{}` whole: name its items",
                path.join("::")
            );
            named += 1;
        }
    }
    assert!(named > 20, "{named} items re-exported");
}

/// The paths of a `use` tree without its root: `a::{b, c::{d, e}}` gives a::b, a::c::d, a::c::e.
fn use_paths(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else { return vec![tree] };
    let (prefix, group) = (&tree[..open], &tree[open + 1..tree.len() - 1]);
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&group[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| use_paths(p).into_iter().map(move |q| format!("{prefix}{q}")))
        .collect()
}

#[test]
fn use_trees_are_spelled_out() {
    assert_eq!(use_paths("a::{b, c::{d, e}, }"), ["a::b", "a::c::d", "a::c::e"]);
    assert_eq!(use_paths("tune::Tuner"), ["tune::Tuner"]);
}
