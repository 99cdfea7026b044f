//! The last step of `make demo`: the best model of the demo sweep, as `rtune export` wrote it,
//! predicts the held-out test set of the shipped 8x8 digits.
//!
//! `make demo` first runs the sweep (examples/sweeps/digits_tpe_asha.toml: 16 trials of a
//! 2-worker data-parallel MLP, TPE over learning rate, width and batch size, ASHA stopping the
//! weak trials), then exports its best checkpoint, then runs this with the export's folder:
//!   demo rtune_results/<sweep>/best-model
//! Expected: test accuracy of at least 95% (about 96%) on the 271 test images.

use std::path::PathBuf;

use anyhow::{Context, Result};
use rtune::Params;
use rtune::builtins::{DIGITS_SPLIT_SEED, digits_mlp, predictor_accuracy};
use rtune::digits::Digits;
use rtune::model::TorchPredictor;

fn main() -> Result<()> {
    rtune::init();
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .context("usage: demo EXPORT_DIR (the folder `rtune export` wrote; `make demo` runs all)")?
        .into();
    // The export carries the params the model was trained with: rebuild the same model.
    let params_file = dir.join("params.json");
    let params: Params = serde_json::from_slice(
        &std::fs::read(&params_file)
            .with_context(|| format!("reading {}", params_file.display()))?,
    )?;
    let hidden = params.get::<i64>("hidden")?;
    let predictor = TorchPredictor::from_export(&dir, |p| digits_mlp(p, hidden))?;
    let test = Digits::split(DIGITS_SPLIT_SEED)?.test;
    let accuracy = predictor_accuracy(&predictor, &test)?;
    println!(
        "the exported model ({}) predicts the held-out test set: {:.2}% of {} images right",
        dir.display(),
        100.0 * accuracy,
        test.len()
    );
    anyhow::ensure!(accuracy >= 0.95, "test accuracy {accuracy:.4} is below the 95% target");
    Ok(())
}
