//! `[datasets]`: a sweep's datasets, for any builtin (Ray Train's `datasets=`), as the Rust
//! API's `TorchTrainer::datasets`, `Columns` and preprocessors give them.
//!
//! ```toml
//! [datasets]
//! train = "../../data/digits_train.parquet"   # parquet, or CSV with a header row
//! valid = "../../data/digits_valid.parquet"   # from the sweep file's folder
//! label = "digit"                           # the target column
//! # features = ["pixel_0", "pixel_1"]        # default: every column but the label
//! # preprocessor = ["impute_median", "standard_scaler"]   # fitted on `train`
//! ```
//!
//! Every other key is a dataset's name. A file that does not exist, a format rtune does not
//! read, a preprocessor it does not know: each at its key, with the rest of the file's
//! mistakes. What the files hold (columns, types) is checked once the sweep prepares them,
//! before any trial runs.

use std::path::Path;

use rtune_driver::data::{
    Chain, Columns, Dataset, MinMaxScaler, OneHotEncoder, OrdinalEncoder, Preprocessor,
    SimpleImputer, StandardScaler,
};
use rtune_driver::setting::Setting;
use rtune_driver::train::TorchTrainer;

use crate::doc::{self, Item, Kind, Report};

/// The preprocessors a sweep file names, as the reference lists them.
pub(super) const PREPROCESSORS: [&str; 7] = [
    "standard_scaler",
    "min_max_scaler",
    "impute_mean",
    "impute_median",
    "impute_most_frequent",
    "one_hot",
    "ordinal",
];

/// The keys of `[datasets]` that are not datasets.
const SETTINGS: [&str; 3] = ["label", "features", "preprocessor"];

/// `trainer` with the datasets of `item` (the `[datasets]` table), or None where it has a
/// mistake (reported).
pub(super) fn read(
    item: &Item,
    base_dir: &Path,
    trainer: TorchTrainer,
    report: &mut Report<'_>,
) -> Option<TorchTrainer> {
    let key = Setting::Datasets.key();
    let Kind::Table(entries) = &item.kind else {
        report.add(key, &item.origin, "must be a table: train = \"FILE\", label = \"COLUMN\"");
        return None;
    };
    let mut ok = true;
    let mut datasets = Vec::new();
    let (mut columns, mut label) = (Columns::new(), None);
    let mut preprocessor = None;
    for (name, _, value) in entries {
        let path = format!("{key}.{name}");
        match name.as_str() {
            "label" => match &value.kind {
                Kind::Str(column) => label = Some(column.clone()),
                other => {
                    report.add(
                        &path,
                        &value.origin,
                        format!("must be a column's name, not {}", other.describe()),
                    );
                    ok = false;
                }
            },
            "features" => match strings(value) {
                Some(names) => columns = columns.features(names),
                None => {
                    report.add(&path, &value.origin, "must be an array of column names");
                    ok = false;
                }
            },
            "preprocessor" => preprocessor = Some(value),
            _ => match dataset(value, base_dir) {
                Ok(dataset) => datasets.push((name.clone(), dataset)),
                Err(why) => {
                    // A misspelt setting reads as a dataset: say which it is near.
                    let near = doc::did_you_mean(name, &SETTINGS);
                    report.add(&path, &value.origin, format!("{why}{near}"));
                    ok = false;
                }
            },
        }
    }
    if !entries.iter().any(|(name, _, _)| name == "train") {
        let message = format!(
            "names no `train` dataset (the one trained on, and the preprocessor fitted on): add \
             train = \"FILE\" (keys other than {} are datasets)",
            doc::list(&SETTINGS)
        );
        // At the dataset that looks like it, where one does.
        let near = entries.iter().find(|(name, _, _)| {
            !SETTINGS.contains(&name.as_str())
                && rtune_driver::config::nearest(name, &["train"]).is_some()
        });
        match near {
            Some((name, origin, _)) => report.add(
                &format!("{key}.{name}"),
                origin,
                format!("{message}; did you mean `train`?"),
            ),
            None => report.add(key, &item.origin, message),
        }
        ok = false;
    }
    let preprocessor = match preprocessor {
        Some(value) => match read_preprocessor(value, label.as_deref()) {
            Ok(p) => Some(p),
            Err(why) => {
                report.add(&format!("{key}.preprocessor"), &value.origin, why);
                ok = false;
                None
            }
        },
        None => None,
    };
    if !ok {
        return None;
    }
    if let Some(label) = label {
        columns = columns.label(label);
    }
    let trainer = trainer.datasets(datasets).columns(columns);
    Some(match preprocessor {
        Some(p) => trainer.preprocessor(p),
        None => trainer,
    })
}

/// The names of the datasets a `[datasets]` table gives (none without one).
pub(super) fn names(item: Option<&Item>) -> Vec<String> {
    let Some(Item { kind: Kind::Table(entries), .. }) = item else { return Vec::new() };
    entries
        .iter()
        .map(|(name, _, _)| name.clone())
        .filter(|name| !SETTINGS.contains(&name.as_str()))
        .collect()
}

fn strings(item: &Item) -> Option<Vec<String>> {
    let Kind::Array(items) = &item.kind else { return None };
    items
        .iter()
        .map(|i| match &i.kind {
            Kind::Str(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

/// A dataset's file, by its extension, from the sweep file's folder.
fn dataset(value: &Item, base_dir: &Path) -> Result<Dataset, String> {
    let Kind::Str(file) = &value.kind else {
        return Err(format!(
            "must be a parquet or CSV file's path, not {} (or one of {} for the datasets' \
             settings)",
            value.kind.describe(),
            doc::list(&SETTINGS)
        ));
    };
    let path = base_dir.join(file);
    if !path.is_file() {
        return Err(format!(
            "is {file:?}, and {} is not a file (a relative path is from the sweep file's folder)",
            path.display()
        ));
    }
    let lower = file.to_ascii_lowercase();
    if lower.ends_with(".parquet") || lower.ends_with(".pq") {
        Ok(Dataset::parquet(path))
    } else if lower.ends_with(".csv") {
        Ok(Dataset::csv(path))
    } else {
        Err(format!(
            "is {file:?}: rtune reads parquet (.parquet) and CSV with a header row (.csv); \
             convert it to one of them"
        ))
    }
}

/// A preprocessor's name or a list of them (applied in order), for a label of `label`.
fn read_preprocessor(value: &Item, label: Option<&str>) -> Result<Preprocessor, String> {
    let names = match &value.kind {
        Kind::Str(name) => vec![name.clone()],
        _ => strings(value).ok_or_else(|| {
            format!(
                "must be a preprocessor's name or an array of them: {}",
                doc::list(&PREPROCESSORS)
            )
        })?,
    };
    let mut steps = Vec::new();
    for name in &names {
        let step: Preprocessor = match name.as_str() {
            "standard_scaler" => StandardScaler::new().into(),
            "min_max_scaler" => MinMaxScaler::new().into(),
            "impute_mean" => SimpleImputer::mean().into(),
            "impute_median" => SimpleImputer::median().into(),
            "impute_most_frequent" => SimpleImputer::most_frequent().into(),
            "one_hot" => OneHotEncoder::new().into(),
            "ordinal" => match label {
                Some(label) => OrdinalEncoder::new([label]).into(),
                None => return Err("\"ordinal\" encodes the label: give datasets.label".into()),
            },
            other => {
                return Err(format!(
                    "names {other:?}; rtune's are {}{}",
                    doc::list(&PREPROCESSORS),
                    doc::did_you_mean(other, &PREPROCESSORS)
                ));
            }
        };
        steps.push(step);
    }
    if steps.len() == 1 {
        return Ok(steps.remove(0));
    }
    Ok(steps.into_iter().fold(Chain::new(), Chain::then).into())
}
