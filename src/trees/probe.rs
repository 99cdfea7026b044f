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

/// The param a library message is about: the one it names, else the one whose absence makes
/// it go away.
fn blame(library: &Library, params: &[(String, String)], message: &str) -> Option<String> {
    blame_by_name(library, params, message).or_else(|| {
        user_keys(library, params)
            .find(|&key| {
                let without: Vec<_> = params.iter().filter(|(k, _)| k != key).cloned().collect();
                !matches!((library.try_params)(&without).refused, Some((_, m)) if m == message)
            })
            .cloned()
    })
}

/// The param a library message names (by its name or another of its names), as a word.
fn blame_by_name(library: &Library, params: &[(String, String)], message: &str) -> Option<String> {
    let mentions = |word: &str| {
        let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        message.match_indices(word).any(|(at, _)| {
            !is_word(message[..at].chars().next_back())
                && !is_word(message[at + word.len()..].chars().next())
        })
    };
    user_keys(library, params)
        .find(|key| mentions(key) || (library.other_names)(key).iter().any(|n| mentions(n)))
        .cloned()
}
