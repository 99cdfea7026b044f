//! `rtune ls`: the experiments under a storage folder, one line each.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use rtune_driver::tune::experiment::can_restore;
use rtune_driver::tune::{ResultGrid, SweepState, sweep_state};

use super::{state_line, status_counts, storage_roots, sweep_label, text_table};
use crate::args::Format;
use crate::format::number;

/// `rtune ls [DIR]`: one line per experiment under `dir` (or under each storage root that
/// exists), as a table or JSON.
pub fn ls(dir: Option<&Path>, format: Format) -> Result<()> {
    let roots = match dir {
        Some(dir) => {
            if !dir.is_dir() {
                bail!(
                    "{} is not a folder (give a storage path, e.g. rtune_results)",
                    dir.display()
                );
            }
            vec![dir.to_owned()]
        }
        None => storage_roots().into_iter().filter(|r| r.is_dir()).collect(),
    };
    let mut rows = Vec::new();
    for root in &roots {
        let entries =
            std::fs::read_dir(root).with_context(|| format!("cannot list {}", root.display()))?;
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        paths.sort();
        rows.extend(paths.into_iter().filter(|p| can_restore(p)).map(|p| listed(&p)));
    }
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Format::Csv => bail!("ls writes a table or JSON (--format table|json)"),
        Format::Table if rows.is_empty() => {
            let shown: Vec<String> = if roots.is_empty() {
                storage_roots().iter().map(|r| r.display().to_string()).collect()
            } else {
                roots.iter().map(|r| r.display().to_string()).collect()
            };
            println!("no experiments in {}", shown.join(" or "));
        }
        Format::Table => {
            let table: Vec<Vec<String>> = rows
                .iter()
                .map(|row| match &row.read {
                    Read::Grid { trials, sweep, status, metric, best, front } => {
                        let status: Vec<String> =
                            status.iter().map(|(s, n)| format!("{n} {s}")).collect();
                        let best = match (metric, best, front) {
                            (Some(metric), Some(best), _) => {
                                format!("{metric}={}", number(*best))
                            }
                            (_, _, Some(n)) => format!("Pareto front of {n}"),
                            _ => "-".into(),
                        };
                        let row = [row.path.clone(), trials.to_string(), (*sweep).into()];
                        [&row[..], &[status.join(", "), best]].concat()
                    }
                    Read::Unreadable { error } => {
                        vec![
                            row.path.clone(),
                            "?".into(),
                            "?".into(),
                            format!("unreadable: {error}"),
                            "-".into(),
                        ]
                    }
                })
                .collect();
            let headers = ["experiment", "trials", "sweep", "status", "best"].map(String::from);
            println!("{}", text_table(&headers, &table));
            for row in &rows {
                if let Read::Grid { sweep: "interrupted" | "stopped", .. } = row.read {
                    let path = Path::new(&row.path);
                    println!("{}", state_line(path, &sweep_state(path)));
                }
            }
        }
    }
    Ok(())
}

/// One experiment as `ls` lists it (and its JSON writes it).
#[derive(serde::Serialize)]
struct Listed {
    path: String,
    #[serde(flatten)]
    read: Read,
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Read {
    /// Its trials, their count by status, and the best value of the sweep's metric.
    Grid {
        trials: usize,
        /// `running`, `interrupted` or `finished` (`sweep_label`).
        sweep: &'static str,
        status: BTreeMap<String, usize>,
        metric: Option<String>,
        best: Option<f64>,
        /// A multi-objective sweep's: the number of trials on its Pareto front.
        #[serde(skip_serializing_if = "Option::is_none")]
        front: Option<usize>,
    },
    Unreadable {
        error: String,
    },
}

fn listed(path: &Path) -> Listed {
    let read = match ResultGrid::from_path(path) {
        Ok(grid) => {
            let state = sweep_state(path);
            let status = status_counts(&grid, matches!(state, SweepState::Finished));
            Read::Grid {
                sweep: sweep_label(&state),
                trials: status.values().sum(),
                status,
                best: grid.objectives.metric().and_then(|m| grid.best_result().ok()?.last(m)),
                front: (grid.objectives.len() > 1)
                    .then(|| grid.pareto_front().map_or(0, |f| f.len())),
                metric: grid.objectives.metric().map(str::to_owned),
            }
        }
        Err(e) => Read::Unreadable { error: e.to_string() },
    };
    Listed { path: path.display().to_string(), read }
}
