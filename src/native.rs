//! Native libraries opened at run time from the Python wheels users install (XGBoost's
//! `libxgboost.so`, LightGBM's `lib_lightgbm.so`): where they are, their C APIs as tables of
//! function pointers, and what they say through their log callbacks. Nothing here is linked: a process that never trains or predicts a tree
//! model never opens them, and a build needs no C++ step.
//!
//! Where: the path in the library's environment variable (`RTUNE_XGBOOST_LIB`,
//! `RTUNE_LIGHTGBM_LIB`) when set; else the wheel's folder in the `site-packages` that holds the
//! PyTorch this process runs with (found from the `libtorch_cpu.so` it has mapped, as
//! `crate::cuda` finds libtorch_cuda), which is where `make trees` installs them (`.venv`).
//!
//! A leaf: it knows nothing of workers, runs or models.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use rtune_driver::sys::cuda_probe::TORCH_CPU;

/// A wheel's library: what it is called and where the wheel puts it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wheel {
    /// The library's name, as messages say it.
    pub(crate) library: &'static str,
    /// The PyPI package and version rtune is built for.
    pub(crate) package: &'static str,
    pub(crate) version: &'static str,
    /// The library's path inside `site-packages`.
    pub(crate) path: &'static str,
    /// The variable that names another path.
    pub(crate) env: &'static str,
}

impl Wheel {
    /// Where this process should open it from (module docs), or why it cannot know.
    pub(crate) fn locate(&self) -> Result<PathBuf, String> {
        if let Some(path) = std::env::var_os(self.env).filter(|p| !p.is_empty()) {
            return Ok(PathBuf::from(path));
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let torch_lib = loaded_library_dir(&maps, TORCH_CPU)
            .ok_or_else(|| format!("{TORCH_CPU} is not loaded, so site-packages is unknown"))?;
        // site-packages/torch/lib -> site-packages
        let site = torch_lib
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| format!("{} is not a wheel's torch/lib folder", torch_lib.display()))?;
        Ok(site.join(self.path))
    }

    /// Opens the library (never closed: its functions are kept in a table for the life of the
    /// process), or one message saying what is missing and how to install it.
    pub(crate) fn open(&self) -> Result<libloading::Library, String> {
        let path = self.locate().map_err(|why| self.missing(&why))?;
        if !path.is_file() {
            return Err(self.missing(&format!("{} does not exist", path.display())));
        }
        // SAFETY: the wheels' libraries have no initialisers with preconditions beyond a C++
        // runtime, which this process (libtorch's) has.
        unsafe { libloading::Library::new(&path) }
            .map_err(|e| self.missing(&format!("{}: {}", path.display(), dl_error(&e))))
    }

    /// The message for a library that is not there.
    fn missing(&self, why: &str) -> String {
        format!(
            "{library} is not installed: rtune opens it from the `{package}=={version}` wheel \
             (`make trees` installs it into .venv; or `pip install {package}=={version}` beside \
             the PyTorch rtune runs with), or from the path in ${env}; {why}",
            library = self.library,
            package = self.package,
            version = self.version,
            env = self.env,
        )
    }
}

/// What a library says through its log callback: a bounded tail of its lines, kept for whoever
/// reads them back (a probe's refusals are warnings to the libraries), and said in rtune's log
/// (its warnings as warnings) unless a [`Quiet`] is held.
pub(crate) struct Log {
    library: &'static str,
    lines: Mutex<Vec<String>>,
    quiet: AtomicUsize,
}

impl Log {
    pub(crate) const fn new(library: &'static str) -> Log {
        Log { library, lines: Mutex::new(Vec::new()), quiet: AtomicUsize::new(0) }
    }

    /// One line the library said.
    pub(crate) fn line(&self, text: &str) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        if self.quiet.load(Ordering::SeqCst) == 0 {
            match text.contains("WARNING") || text.contains("[Warning]") {
                true => tracing::warn!("{}: {text}", self.library),
                false => tracing::info!("{}: {text}", self.library),
            }
        }
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() >= 256 {
            lines.remove(0);
        }
        lines.push(text.to_owned());
    }

    /// The lines since the last call, oldest first.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.lines.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// While the answer is held, lines are kept, not logged: a probe says its refusals as the
    /// sweep file's mistakes instead.
    pub(crate) fn quiet(&'static self) -> Quiet {
        self.quiet.fetch_add(1, Ordering::SeqCst);
        Quiet(self)
    }
}

/// See [`Log::quiet`].
pub(crate) struct Quiet(&'static Log);

impl Drop for Quiet {
    fn drop(&mut self) {
        self.0.quiet.fetch_sub(1, Ordering::SeqCst);
    }
}

/// While one is held, this process's stderr goes nowhere: LightGBM writes each error it raises
/// to stderr as well as returning it, and a probe's errors are said as the sweep file's
/// mistakes instead. (Held by the command line's probe only, before anything else runs.)
pub(crate) struct HiddenStderr {
    saved: libc::c_int,
}

impl HiddenStderr {
    /// None where stderr could not be moved (it is then left as it is).
    pub(crate) fn new() -> Option<HiddenStderr> {
        // SAFETY: plain descriptor calls; fd 2 is restored from `saved` when dropped.
        unsafe {
            let saved = libc::dup(2);
            if saved < 0 {
                return None;
            }
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if null < 0 {
                libc::close(saved);
                return None;
            }
            libc::dup2(null, 2);
            libc::close(null);
            Some(HiddenStderr { saved })
        }
    }
}

impl Drop for HiddenStderr {
    fn drop(&mut self) {
        // SAFETY: `saved` is the stderr `new` moved away, put back once.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
    }
}

/// The folder of the first mapping of a file named `name` in a `/proc/<pid>/maps` text.
pub(crate) fn loaded_library_dir(maps: &str, name: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(Path::new)
        .find(|path| path.file_name().is_some_and(|f| f == name))
        .and_then(Path::parent)
        .map(Path::to_owned)
}

/// libloading's error with the loader's own words (`dlerror`), which it keeps as the source.
pub(crate) fn dl_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(source) => source.to_string(),
        None => e.to_string(),
    }
}

/// A C API as a struct of function pointers, read from an open library by their names, with
/// the library kept beside them.
macro_rules! c_api {
    ($(#[$meta:meta])* $api:ident { $($f:ident: fn($($a:ty),* $(,)?) -> $r:ty;)* }) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        pub(crate) struct $api {
            $(pub(crate) $f: unsafe extern "C" fn($($a),*) -> $r,)*
            _library: libloading::Library,
        }

        impl $api {
            /// Reads every function from `library`, or names the first it lacks.
            #[allow(non_snake_case)]
            fn read(library: libloading::Library) -> std::result::Result<Self, String> {
                // SAFETY: each symbol is read with the signature of its C declaration.
                unsafe {
                    $(
                        let $f = *library
                            .get::<unsafe extern "C" fn($($a),*) -> $r>(
                                concat!(stringify!($f), "\0").as_bytes(),
                            )
                            .map_err(|e| format!(
                                "it has no {}: {}", stringify!($f), $crate::native::dl_error(&e)
                            ))?;
                    )*
                    Ok($api { $($f,)* _library: library })
                }
            }
        }
    };
}
pub(crate) use c_api;
