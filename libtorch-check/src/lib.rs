//! Nothing to call: this crate exists for its build script, which checks the libtorch that
//! `LIBTORCH` points at before torch-sys compiles against it.
//!
//! Why a crate of its own: rtune's own build script can only run after torch-sys's (it needs
//! torch-sys's `DEP_TCH_LIBTORCH_LIB`), and torch-sys neither checks the version of a `LIBTORCH`
//! folder nor fails readably when the folder is missing (it dies in the C++ compiler). This crate
//! has no dependencies, so cargo runs its build script within a second of starting, long before
//! torch-sys's build script has even been compiled, and its one-line error is what the user sees.
