//! How the command line writes what it shows: durations, numbers, params, statuses, counts.
//! The bottom of the views: the model, the terminal UI, progress lines (`rtune::cli::ui`) and
//! `rtune ls`/`show` (`inspect`) all write through it, and it imports none of them.

use std::collections::BTreeMap;

use rtune_searchers::TrialStatus;

pub use rtune_driver::metrics::{number_text as number, param_text};

/// `hh:mm:ss`.
pub fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// `512 B`, `1.5 kB`, `12.0 MB`, `3.2 GB`: bytes in decimal units, as disks and links count.
pub fn bytes(n: f64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n.max(0.0);
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < units.len() {
        value /= 1000.0;
        unit += 1;
    }
    match unit {
        0 => format!("{value:.0} B"),
        _ => format!("{value:.1} {}", units[unit]),
    }
}

/// `RUNNING`, `TERMINATED`, ..: a status as the views name it (Ray's name).
pub(crate) fn status_name(status: TrialStatus) -> String {
    status.name().to_owned()
}

/// How many trials have each status, by status name.
pub fn counts(statuses: impl Iterator<Item = TrialStatus>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for status in statuses {
        *counts.entry(status_name(status)).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_in_decimal_units() {
        let shown: Vec<String> = [0.0, 999.0, 1500.0, 12e6, 3.21e9].map(bytes).into();
        assert_eq!(shown, ["0 B", "999 B", "1.5 kB", "12.0 MB", "3.2 GB"]);
    }
}
