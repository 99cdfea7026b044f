//! The probe both libraries' params go through before any trial runs: the params set on a
//! booster over a few rows that boosts one round, refusing what the library does not take, each
//! at its key (`param_space.<key>`), every mistake and not only the first the library stops at,
//! and saying which metrics a round reports.

use rtune_cli::program::Probed;
use rtune_searchers::Params;

use super::{LibraryParams, Schedule};

/// A library's refusal: the param it was setting when it said so (None: while boosting), and
/// its message.
pub(super) type Refusal = (Option<String>, String);

/// What one try of params gave.
pub(super) struct Tried {
    /// The names the library said it does not know.
    pub(super) unknown: Vec<String>,
    pub(super) refused: Option<Refusal>,
    /// The evaluation metrics a round reports, by the library's names (`mlogloss`).
    pub(super) metrics: Vec<String>,
}

/// What the probe knows of a library.
pub(super) struct Library {
    /// Opens it, or says why it cannot be.
    pub(super) open: fn() -> Result<(), String>,
    /// Its params of a trial's (rtune's added), and those rtune refuses.
    pub(super) params: fn(&Params) -> LibraryParams,
    /// What is said of a name it does not know.
    pub(super) unknown: &'static str,
    /// The params rtune adds, never a user's mistake.
    pub(super) added: &'static [&'static str],
    /// A param's other names, which the library's messages may use.
    pub(super) other_names: fn(&str) -> Vec<String>,
    /// Sets the params on a booster over a few rows and boosts a round.
    pub(super) try_params: fn(&[(String, String)]) -> Tried,
}

/// Why `library` refuses `params`, each at its key; empty when it takes them. A message that
/// names no param is blamed on the one whose absence makes it go away.
pub(super) fn probe(library: &Library, params: &Params) -> Probed {
    let refused =
        |message: String| Probed { problems: vec![(String::new(), message)], metrics: Vec::new() };
    if let Err(e) = (library.open)() {
        return refused(e);
    }
    if let Err(problem) = Schedule::of(params) {
        return Probed { problems: vec![problem], metrics: Vec::new() };
    }
    let LibraryParams { taken: mut params, refused: mut problems, .. } = (library.params)(params);
    // Each refusal's param is left out and the rest tried again, so that every mistake is
    // found, not only the first the library stops at.
    let metrics = loop {
        let Tried { unknown, refused, metrics } = (library.try_params)(&params);
        for name in unknown {
            if !problems.iter().any(|(k, _)| *k == name) {
                problems.push((name, library.unknown.to_owned()));
            }
        }
        let (key, message) = match refused {
            None => break metrics,
            Some((Some(key), message)) => (Some(key), message),
            Some((None, message)) => (blame(library, &params, &message), message),
        };
        let Some(key) = key else {
            problems.push((String::new(), message));
            break Vec::new();
        };
        params.retain(|(k, _)| *k != key);
        problems.push((key, message));
    };
    Probed { problems, metrics }
}

/// The params a user gave (not the ones rtune adds).
fn user_keys<'a>(
    library: &'a Library,
    params: &'a [(String, String)],
) -> impl Iterator<Item = &'a String> {
    params.iter().map(|(k, _)| k).filter(|k| !library.added.contains(&k.as_str()))
}

/// The param a library message is about: the one it names (of several, the one whose absence
/// leaves nothing refused: "Multiclass objective and metrics don't match" is the metric's when
/// the objective is right), else the one whose absence makes it go away.
fn blame(library: &Library, params: &[(String, String)], message: &str) -> Option<String> {
    let without = |key: &String| -> Vec<(String, String)> {
        params.iter().filter(|(k, _)| k != key).cloned().collect()
    };
    let named = named_in(library, params, message);
    match named.as_slice() {
        [] => user_keys(library, params)
            .find(|&key| {
                !matches!((library.try_params)(&without(key)).refused, Some((_, m)) if m == message)
            })
            .cloned(),
        [one] => Some(one.clone()),
        [first, ..] => named
            .iter()
            .find(|key| (library.try_params)(&without(key)).refused.is_none())
            .or(Some(first))
            .cloned(),
    }
}

/// The params a library message names (by their names or other names, a word each, or its
/// plural), in the order given.
fn named_in(library: &Library, params: &[(String, String)], message: &str) -> Vec<String> {
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mentions = |word: &str| {
        [word.to_owned(), format!("{word}s")].iter().any(|word| {
            message.match_indices(word.as_str()).any(|(at, _)| {
                !is_word(message[..at].chars().next_back())
                    && !is_word(message[at + word.len()..].chars().next())
            })
        })
    };
    user_keys(library, params)
        .filter(|key| mentions(key) || (library.other_names)(key).iter().any(|n| mentions(n)))
        .cloned()
        .collect()
}
