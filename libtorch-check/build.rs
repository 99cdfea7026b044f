//! Checks that `LIBTORCH` names a PyTorch 2.11.0 `torch` folder (or a libtorch distribution of
//! that version) and stops the build with one line naming the fix when it does not.

use std::path::{Path, PathBuf};

/// The PyTorch release that tch 0.24 is written against.
const TORCH_VERSION: &str = "2.11.0";
const FIX: &str = "run `make libtorch` in the rtune checkout (installs torch==2.11.0 into .venv), \
                   or point LIBTORCH at a PyTorch 2.11.0 torch folder (outside the checkout: \
                   `pip install torch==2.11.0` into a venv makes one, see docs/crate.md)";

fn main() {
    println!("cargo::rerun-if-env-changed=LIBTORCH");
    if let Err(message) = check() {
        println!("cargo::error={message}");
    }
}

fn check() -> Result<(), String> {
    let Some(dir) = std::env::var_os("LIBTORCH").map(PathBuf::from) else {
        return Err(format!("libtorch: LIBTORCH is not set; {FIX}"));
    };
    let version_py = dir.join("version.py");
    let build_version = dir.join("build-version");
    // Rerun when the file the version came from changes. A missing file reruns every build, so
    // only the one that exists is watched (both while neither does: the build fails anyway).
    let found = if let Ok(text) = std::fs::read_to_string(&version_py) {
        println!("cargo::rerun-if-changed={}", version_py.display());
        python_version(&text)
            .ok_or_else(|| format!("libtorch: no __version__ in {}; {FIX}", version_py.display()))?
    } else if let Ok(text) = std::fs::read_to_string(&build_version) {
        println!("cargo::rerun-if-changed={}", build_version.display());
        text.trim().to_owned()
    } else {
        println!("cargo::rerun-if-changed={}", version_py.display());
        println!("cargo::rerun-if-changed={}", build_version.display());
        return Err(format!("libtorch: not found at {} (no .venv yet?); {FIX}", shown(&dir)));
    };
    let release = found.split_once('+').map_or(found.as_str(), |(release, _)| release);
    if release != TORCH_VERSION {
        return Err(format!(
            "libtorch: {} holds PyTorch {found}, rtune (tch 0.24) needs exactly {TORCH_VERSION}; {FIX}",
            shown(&dir)
        ));
    }
    Ok(())
}

/// `__version__ = '2.11.0+cu130'` from torch/version.py.
fn python_version(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("__version__")?.trim_start().strip_prefix('=')?;
        Some(rest.trim().trim_matches(|c| c == '\'' || c == '"').to_owned())
    })
}

fn shown(dir: &Path) -> String {
    format!("LIBTORCH={}", dir.display())
}
