//! Native libraries opened at run time from the Python wheels users install (XGBoost's
//! `libxgboost.so`; LightGBM's `lib_lightgbm.so` next): where they are, and their C APIs as
//! tables of function pointers. Nothing here is linked: a process that never trains or predicts a tree
//! model never opens them, and a build needs no C++ step.
//!
//! Where: the path in the library's environment variable (`RTUNE_XGBOOST_LIB`) when set; else the wheel's folder in the `site-packages` that holds the
//! PyTorch this process runs with (found from the `libtorch_cpu.so` it has mapped, as
//! `crate::cuda` finds libtorch_cuda), which is where `make trees` installs them (`.venv`).
//!
//! A leaf: it knows nothing of workers, runs or models.

use std::path::{Path, PathBuf};

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
