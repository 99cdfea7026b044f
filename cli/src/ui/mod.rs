//! What `rtune run` and `rtune watch` show of a sweep: one view model (`model`: the trials as
//! their events leave them) and the views built on it: the terminal UI (`tui`), plain progress
//! lines (`progress`) and the stream that serves the model to `rtune watch` (`stream`). Views
//! import the model, the model imports `format`, and nothing imports back. Here, in
//! `rtune-cli`, so that `rtune watch` runs without libtorch; `rtune run` uses them from
//! `rtune::cli::ui`.

pub use crate::format;
pub mod model;
pub mod progress;
pub mod stream;
pub mod tui;
