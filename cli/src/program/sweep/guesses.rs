//! Search domains written the way other tools write them, which `param_space` would otherwise
//! take as constants and search nothing: a string that reads as a Ray Tune call
//! (`"tune.loguniform(1e-4, 1e-1)"`), and a table whose keys read as a domain (Ray's `type`,
//! `lower`, `upper`, `sample_from`; W&B's `distribution`, `min`, `max`, `values`, `value`;
//! Optuna's `low`, `high`, `log`). Each is refused at its key with the rtune spelling of the
//! same domain; a constant meant as written is said explicitly with `{ constant = .. }`.

use crate::doc::{Item, Kind, Report};
use rtune_searchers::space::FORM_NAMES;

/// The keys a domain written as a table has, in one tool or another.
const DOMAIN_KEYS: &[&str] = &[
    "type",
    "lower",
    "upper",
    "q",
    "base",
    "values",
    "categories",
    "sample_from",
    "mean",
    "sd",
    "distribution",
    "min",
    "max",
    "value",
    "mu",
    "sigma",
    "low",
    "high",
    "log",
];

/// W&B's distributions, as rtune names the same domain.
const WANDB: &[(&str, &str)] = &[
    ("uniform", "uniform"),
    ("log_uniform_values", "loguniform"),
    ("int_uniform", "randint"),
    ("q_uniform", "quniform"),
    ("q_log_uniform_values", "qloguniform"),
    ("normal", "randn"),
    ("q_normal", "qrandn"),
    ("categorical", "choice"),
];

/// Refuses, under the search space `item` (at `path`), every param written as another tool's
/// domain; whether there was one.
pub(super) fn refuse_guesses(item: &Item, path: &str, report: &mut Report<'_>) -> bool {
    let Kind::Table(entries) = &item.kind else { return false };
    let mut found = false;
    for (key, origin, value) in entries {
        let here = format!("{path}.{key}");
        let refusal = match &value.kind {
            Kind::Str(text) => ray_call(key, text),
            // A domain of rtune's: its arguments (and a constant's value) are as meant.
            Kind::Table(inner) if inner.len() == 1 && FORM_NAMES.contains(&inner[0].0.as_str()) => {
                None
            }
            Kind::Table(inner) => {
                let refusal = domain_table(key, inner);
                found |= refusal.is_none() && refuse_guesses(value, &here, report);
                refusal
            }
            _ => None,
        };
        if let Some(message) = refusal {
            report.add(&here, origin, message);
            found = true;
        }
    }
    found
}

/// The refusal of `"tune.loguniform(1e-4, 1e-1)"` as the value of `key`, if `text` reads as a
/// Ray Tune call.
fn ray_call(key: &str, text: &str) -> Option<String> {
    let call = text.trim();
    let call = call.strip_prefix("ray.").unwrap_or(call);
    let call = call.strip_prefix("tune.").unwrap_or(call);
    let (name, rest) = call.split_once('(')?;
    let args = rest.trim_end().strip_suffix(')')?.trim();
    let name = name.trim();
    if name != "sample_from" && (name == "constant" || !FORM_NAMES.contains(&name)) {
        return None;
    }
    let instead = if name == "sample_from" {
        no_lambdas(key)
    } else {
        let args = args.replace('\'', "\"").replace("True", "true").replace("False", "false");
        // Keyword arguments (`lower=1e-4`) by their values, in order.
        let values: Vec<&str> = if args.starts_with('[') {
            vec![args.as_str()]
        } else {
            args.split(',').map(|a| a.rsplit_once('=').map_or(a, |(_, v)| v).trim()).collect()
        };
        let list = match values.as_slice() {
            [one] if one.starts_with('[') => (*one).to_owned(),
            _ => format!("[{}]", values.join(", ")),
        };
        format!("write `{key} = {{ {name} = {list} }}`")
    };
    Some(format!(
        "is the string {text:?}, which reads as a Ray Tune call: a trial would get that string, \
         and nothing would be searched; {instead} (a string meant as written: `{key} = {{ \
         constant = {text:?} }}`)"
    ))
}

fn no_lambdas(key: &str) -> String {
    format!(
        "rtune runs no Python in the sweep file, so there is no sample_from: write the value \
         (`{key} = 32`) or a domain (`{key} = {{ choice = [16, 32, 64] }}`)"
    )
}

/// The refusal of a table of `key` whose keys read as a domain (see the module docs), if they do.
fn domain_table(key: &str, inner: &[(String, crate::doc::Origin, Item)]) -> Option<String> {
    let get = |names: &[&str]| {
        inner.iter().find(|(k, _, _)| names.contains(&k.as_str())).map(|(_, _, item)| item)
    };
    let text_of = |names: &[&str]| match get(names).map(|i| &i.kind) {
        Some(Kind::Str(s)) => Some(s.as_str()),
        _ => None,
    };
    if !inner.iter().all(|(k, _, _)| DOMAIN_KEYS.contains(&k.as_str())) {
        return None;
    }
    let typed = text_of(&["type"])
        .filter(|t| FORM_NAMES.contains(t) || *t == "sample_from")
        .map(str::to_owned)
        .or_else(|| {
            let named = text_of(&["distribution"])?;
            WANDB.iter().find(|(w, _)| *w == named).map(|(_, ours)| (*ours).to_owned())
        });
    let shaped = ["sample_from", "values", "categories", "value", "lower", "upper", "min", "max"]
        .iter()
        .chain(&["low", "high", "distribution"])
        .any(|k| get(&[k]).is_some());
    if typed.is_none() && !shaped {
        return None;
    }
    let keys: Vec<&str> = inner.iter().map(|(k, _, _)| k.as_str()).collect();
    let instead = if get(&["sample_from"]).is_some() || typed.as_deref() == Some("sample_from") {
        no_lambdas(key)
    } else if let Some(value) = get(&["value"]) {
        format!("write `{key} = {}`", toml_text(value))
    } else if let Some(values) = get(&["values", "categories"]) {
        let form = if typed.as_deref() == Some("grid_search") { "grid_search" } else { "choice" };
        format!("write `{key} = {{ {form} = {} }}`", toml_text(values))
    } else {
        let low = get(&["lower", "min", "low"]);
        let high = get(&["upper", "max", "high"]);
        let log = matches!(get(&["log"]).map(|i| &i.kind), Some(Kind::Bool(true)));
        let ints = [low, high].iter().all(|b| matches!(b.map(|i| &i.kind), Some(Kind::Int(_))));
        let mut form = typed.unwrap_or_else(|| {
            match (log, ints) {
                (true, true) => "lograndint",
                (true, false) => "loguniform",
                (false, true) => "randint",
                (false, false) => "uniform",
            }
            .to_owned()
        });
        let q = get(&["q"]);
        if q.is_some() && !form.starts_with('q') {
            form = format!("q{form}");
        }
        let mut args: Vec<String> = if form.ends_with("randn") {
            [get(&["mean", "mu"]), get(&["sd", "sigma"])].iter().map(|a| arg(*a)).collect()
        } else {
            [low, high].iter().map(|a| arg(*a)).collect()
        };
        args.extend(q.map(toml_text));
        format!("write `{key} = {{ {form} = [{}] }}`", args.join(", "))
    };
    Some(format!(
        "is a table whose keys ({}) read as a search domain, but it would be taken as a \
         constant table of params, and nothing would be searched; {instead} (a table meant as \
         written: `{key} = {{ constant = {{ .. }} }}`)",
        keys.join(", ")
    ))
}

fn arg(item: Option<&Item>) -> String {
    item.map_or("..".into(), toml_text)
}

/// A value as TOML writes it.
fn toml_text(item: &Item) -> String {
    crate::doc::value_text(&crate::doc::to_value(item))
}

#[cfg(test)]
mod tests {
    use crate::doc::Source;
    use crate::program::sweep::SweepSpec;

    /// The problems of a command trainable's sweep with `space` as its param_space.
    fn problems(space: &str) -> String {
        let text = format!("[trainable]\ncommand = [\"true\"]\n[param_space]\n{space}\n");
        let source = Source { name: "sweep.toml".into(), text };
        match SweepSpec::read(&source, &[], &crate::program::registry::declared_builtins()) {
            Ok(spec) => format!("valid: {:?}", spec.space),
            Err(p) => p.to_string(),
        }
    }

    /// Each tool's spelling of a domain gets rtune's, at its key.
    #[test]
    fn other_tools_domains_get_rtunes_spelling() {
        let cases = [
            ("lr = \"tune.loguniform(1e-4, 1e-1)\"", "`lr = { loguniform = [1e-4, 1e-1] }`"),
            ("lr = \"tune.uniform(lower=0.1, upper=0.5)\"", "`lr = { uniform = [0.1, 0.5] }`"),
            ("bs = \"tune.choice([16, 32])\"", "`bs = { choice = [16, 32] }`"),
            ("o = \"tune.grid_search(['a', 'b'])\"", "`o = { grid_search = [\"a\", \"b\"] }`"),
            ("bs = \"tune.sample_from(lambda _: 32)\"", "there is no sample_from"),
            (
                "wd = { type = \"loguniform\", lower = 1e-5, upper = 1e-2 }",
                "`wd = { loguniform = [1e-5, 0.01] }`",
            ),
            ("bs = { sample_from = \"lambda _: 32\" }", "there is no sample_from"),
            ("n = { type = \"randint\", lower = 1, upper = 9 }", "`n = { randint = [1, 9] }`"),
            (
                "lr = { distribution = \"log_uniform_values\", min = 1e-4, max = 0.1 }",
                "`lr = { loguniform = [0.0001, 0.1] }`",
            ),
            ("opt = { values = [\"adam\", \"sgd\"] }", "`opt = { choice = [\"adam\", \"sgd\"] }`"),
            ("e = { value = 12 }", "`e = 12`"),
            ("lr = { low = 1e-5, high = 1e-1, log = true }", "`lr = { loguniform = [1e-5, 0.1] }`"),
            ("x = { min = 1, max = 8, q = 2 }", "`x = { qrandint = [1, 8, 2] }`"),
            ("model.lr = { lower = 0.1, upper = 0.9 }", "`param_space.model.lr`"),
        ];
        for (space, wanted) in cases {
            let text = problems(space);
            assert!(text.contains(wanted), "{space}: {text}");
            assert!(text.contains("nothing would be searched"), "{space}: {text}");
        }
    }

    /// What rtune spells as a domain, and constants said to be constants, stay valid.
    #[test]
    fn rtunes_own_and_explicit_constants_are_kept() {
        for space in [
            "lr = { loguniform = [1e-4, 1e-1] }",
            "note = \"a plain string\"",
            "call = { constant = \"tune.loguniform(1e-4, 1e-1)\" }",
            "cfg = { constant = { type = \"loguniform\", lower = 1, upper = 2 } }",
            "optimizer = { type = \"adam\", lr = { loguniform = [1e-4, 1e-1] } }",
            "layers = { sizes = [64, 64] }",
        ] {
            let text = problems(space);
            assert!(text.starts_with("valid"), "{space}: {text}");
        }
    }
}
