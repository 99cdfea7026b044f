//! `[param_space]` of a sweep file: the search space, each param read on its own so that every
//! mistake is named at its key, with domains misspelled and other tools' spellings of a domain
//! (`guesses`) refused.

use rtune_searchers::SearchSpace;

use super::guesses;
use crate::doc::{self, Item, Kind, Report};

/// A search space (None when any param is a mistake: each is reported at its key), and the
/// params of it that read.
pub(super) fn read_space(
    item: &Item,
    path: &str,
    report: &mut Report<'_>,
) -> (Option<SearchSpace>, SearchSpace) {
    let Kind::Table(entries) = &item.kind else {
        report.add(path, &item.origin, "must be a table of params");
        return (None, SearchSpace::new());
    };
    typo_domains(item, path, report);
    let mistaken = guesses::refuse_guesses(item, path, report) | !all_finite(item, path, report);
    if !mistaken && let Ok(space) = SearchSpace::from_value(&doc::to_value(item)) {
        return (Some(space.clone()), space);
    }
    // Param by param: every mistake is named, and the params that read are kept.
    let mut readable = SearchSpace::new();
    let mut named = mistaken;
    for (key, origin, value) in entries {
        let one = Kind::Table(vec![(key.clone(), origin.clone(), value.clone())]);
        let one = Item { origin: item.origin.clone(), kind: one };
        match SearchSpace::from_value(&doc::to_value(&one)) {
            Ok(space) => {
                for (k, param) in space.iter() {
                    readable = readable.add(k, param.clone());
                }
            }
            // Beside a guess refused above (a Ray call's string), the other params' own
            // mistakes come too.
            Err(e) if !report.names_under(&format!("{path}.{key}")) => {
                add_space_error(item, path, &e, report);
                named = true;
            }
            Err(_) => {}
        }
    }
    if !named && let Err(e) = SearchSpace::from_value(&doc::to_value(item)) {
        add_space_error(item, path, &e, report);
    }
    (None, readable)
}

/// Whether every number under `item` is finite; each one that is not is refused at its key:
/// params travel as JSON, which has none, and a bound of `inf` samples nothing a trial can use.
fn all_finite(item: &Item, path: &str, report: &mut Report<'_>) -> bool {
    match &item.kind {
        Kind::Float(x) if !x.is_finite() => {
            let message = format!("is {x}: params need finite numbers (JSON has no NaN or inf)");
            report.add(path, &item.origin, message);
            false
        }
        // Every one is looked at (and each bad one reported), not only up to the first.
        Kind::Table(entries) => {
            entries
                .iter()
                .filter(|(key, _, value)| !all_finite(value, &format!("{path}.{key}"), report))
                .count()
                == 0
        }
        Kind::Array(items) => {
            items.iter().filter(|value| !all_finite(value, path, report)).count() == 0
        }
        _ => true,
    }
}

/// `{ loguniforn = [..] }`: one key near a domain's name reads as a nested space in the
/// searchers crate; here it is a typo.
fn typo_domains(item: &Item, path: &str, report: &mut Report<'_>) {
    const DOMAINS: &[&str] = rtune_searchers::space::FORM_NAMES;
    let Kind::Table(entries) = &item.kind else { return };
    for (key, origin, value) in entries {
        let here = format!("{path}.{key}");
        if let Kind::Table(inner) = &value.kind {
            // A domain beside other keys would read as a constant table of params.
            let named: Vec<&str> =
                inner.iter().map(|(k, _, _)| k.as_str()).filter(|k| DOMAINS.contains(k)).collect();
            if !named.is_empty() && inner.len() > 1 {
                let message = format!(
                    "holds the domain{} {} beside other keys; a param is one domain (e.g. \
                     {{ {} = [..] }}), or a table of params without domain names",
                    if named.len() > 1 { "s" } else { "" },
                    doc::list(&named),
                    named[0]
                );
                report.add(&here, origin, message);
                continue;
            }
            if let [(name, name_origin, _)] = inner.as_slice()
                && !DOMAINS.contains(&name.as_str())
            {
                let hint = doc::did_you_mean(name, DOMAINS);
                if !hint.is_empty() {
                    let message =
                        format!("is not a domain{hint} (domains: {})", doc::list(DOMAINS));
                    report.add(&format!("{here}.{name}"), name_origin, message);
                    continue;
                }
            }
            typo_domains(value, &here, report);
        }
    }
}

/// Where the param at `key` of a search space is written: its domain's key for a domain (in a
/// `--set` that replaced the domain's arguments, the argument), else its own.
pub(super) fn param_origin<'i>(space: &'i Item, key: &str) -> &'i doc::Origin {
    match doc::find(space, key) {
        Some((_, Item { kind: Kind::Table(entries), .. })) if entries.len() == 1 => &entries[0].1,
        Some((origin, _)) => origin,
        None => &space.origin,
    }
}

pub(super) fn add_space_error(
    item: &Item,
    prefix: &str,
    e: &rtune_searchers::Error,
    report: &mut Report<'_>,
) {
    use rtune_searchers::Error as E;
    let key = match e {
        E::InvalidDomain { path, .. }
        | E::InvalidSpace { path, .. }
        | E::Unsupported { path, .. } => path.clone(),
        _ => String::new(),
    };
    let origin = param_origin(item, &key);
    let full = if key.is_empty() { prefix.to_owned() } else { format!("{prefix}.{key}") };
    // The error's own text starts with the path; the report names it already.
    let text = e.to_string();
    let text = text.strip_prefix(&format!("parameter `{key}`: ")).unwrap_or(&text).to_owned();
    report.add(&full, origin, text);
}
