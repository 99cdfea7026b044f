//! What a sweep file asks for, as `rtune validate` prints it (every param searched or constant,
//! the trainable's params the file leaves at their defaults, the metrics it reports), and the
//! trainables a binary offers, as `rtune builtins` lists them.

use rtune_searchers::{Param, SearchSpace, Value};

use rtune_driver::metrics::number_text;
use rtune_driver::setting::Setting;

use super::registry::{Trainable, Trainables};
use super::sweep::SweepSpec;
use crate::doc::value_text as toml_value;

/// Each leaf param of `space` (dotted keys for groups of params): whether it is searched, and
/// how it is written.
fn leaves(space: &SearchSpace, prefix: &str, out: &mut Vec<(String, &'static str, String)>) {
    for (key, param) in space.iter() {
        let key = if prefix.is_empty() { key.to_owned() } else { format!("{prefix}.{key}") };
        match param {
            Param::Const(v) => out.push((key, "constant", toml_value(v))),
            Param::Sample(domain) => out.push((key, "searched", toml_value(&domain.to_value()))),
            Param::Grid(values) => {
                let grid =
                    format!("{{ grid_search = {} }}", toml_value(&Value::List(values.clone())));
                out.push((key, "searched", grid));
            }
            Param::Nested(inner) => leaves(inner, &key, out),
            Param::Dependent(_) => out.push((key, "derived", "from other params".into())),
        }
    }
}

/// Rows of three columns, the first two padded.
fn rows(rows: &[(String, &str, String)]) -> String {
    let key = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let kind = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, what, text)| format!("  {k:<key$}  {what:<kind$}  {text}").trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The metrics `t` reports, as a sentence's end: `loss, val_loss (and rtune's
/// training_iteration, ..)`, or that it does not say.
fn metrics(t: Option<&Trainable>) -> String {
    let auto: Vec<&str> = rtune_driver::metrics::AUTO_METRICS
        .into_iter()
        .filter(|m| *m != "checkpoint_dir_name" && *m != "timestamp")
        .collect();
    match t.filter(|t| !t.metrics.is_empty()) {
        Some(t) => format!("{} (and rtune's {})", t.metrics.join(", "), auto.join(", ")),
        None => format!(
            "whatever it reports (not declared: the sweep's metric names are checked at its \
             first report), and rtune's {}",
            auto.join(", ")
        ),
    }
}

/// Where the sweep `new` differs from `old` in what decides what a sweep records (its
/// trainable, params, metric and mode, how many trials, its seed, the kinds of searcher and
/// scheduler, its name): each key as the file writes it, with the old value and the new.
pub(super) fn recorded_differences(
    old: &SweepSpec,
    new: &SweepSpec,
) -> Vec<(String, String, String)> {
    let text = |v: Option<&str>| v.map_or("nothing".to_owned(), |v| format!("{v:?}"));
    let metric = |s: &SweepSpec| {
        let objectives = &s.tune.objectives;
        match (&s.tune.metric, s.tune.mode) {
            (Some(m), Some(mode)) => (format!("{m:?}"), format!("{:?}", mode_name(mode))),
            _ if !objectives.is_empty() => (
                format!("{:?}", objectives.iter().map(|o| o.metric.as_str()).collect::<Vec<_>>()),
                format!("{:?}", objectives.iter().map(|o| mode_name(o.mode)).collect::<Vec<_>>()),
            ),
            _ => ("nothing".into(), "nothing".into()),
        }
    };
    let samples = |s: &SweepSpec| s.tune.num_samples.written();
    let (old_metric, new_metric) = (metric(old), metric(new));
    let mut pairs = vec![
        (
            "trainable.builtin".to_owned(),
            text(old.builtin.as_deref()),
            text(new.builtin.as_deref()),
        ),
        (Setting::Command.key().into(), text(old.command.as_deref()), text(new.command.as_deref())),
        (Setting::Metric.key().into(), old_metric.0, new_metric.0),
        (Setting::Mode.key().into(), old_metric.1, new_metric.1),
        (Setting::NumSamples.key().into(), samples(old), samples(new)),
        (Setting::Seed.key().into(), old.tune.seed.to_string(), new.tune.seed.to_string()),
        (
            Setting::SearchAlg.key().into(),
            format!("{:?}", old.search.kind),
            format!("{:?}", new.search.kind),
        ),
        (
            Setting::Scheduler.key().into(),
            format!("{:?}", old.scheduler.kind),
            format!("{:?}", new.scheduler.kind),
        ),
        ("name".into(), text(old.run.name.as_deref()), text(new.run.name.as_deref())),
    ];
    let (mut was, mut is) = (Vec::new(), Vec::new());
    leaves(&old.space, "", &mut was);
    leaves(&new.space, "", &mut is);
    // Each param once: the old sweep's, then those only the new one has.
    let mut keys: Vec<&String> = Vec::new();
    for (key, _, _) in was.iter().chain(&is) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    for key in keys {
        let find = |leaves: &[(String, &str, String)]| {
            leaves.iter().find(|(k, _, _)| k == key).map_or("nothing".into(), |(_, _, v)| v.clone())
        };
        pairs.push((format!("param_space.{key}"), find(&was), find(&is)));
    }
    pairs.retain(|(_, was, is)| was != is);
    pairs
}

fn mode_name(mode: rtune_searchers::Mode) -> &'static str {
    match mode {
        rtune_searchers::Mode::Max => "max",
        rtune_searchers::Mode::Min => "min",
    }
}

/// `rtune validate`'s plan of `spec`: its params, the trainable's defaults it keeps, and what
/// the trainable reports.
pub(super) fn plan(spec: &SweepSpec, registry: &Trainables) -> String {
    // A tree library's trainable reports what its probe found.
    let trainable = spec.builtin.as_deref().and_then(|b| registry.get(b)).map(|t| {
        match spec.reports.is_empty() {
            true => t.clone(),
            false => t.reporting(spec.reports.clone()),
        }
    });
    let trainable = trainable.as_ref();
    let mut params = Vec::new();
    leaves(&spec.space, "", &mut params);
    if let Some(t) = trainable {
        for key in t.defaults.keys() {
            if spec.space.get(key).is_none()
                && let Some(v) = t.defaults.value(key)
            {
                params.push((key.to_owned(), "default", toml_value(v)));
            }
        }
    }
    let who = spec.builtin.as_deref().map_or("the command".to_owned(), |b| format!("`{b}`"));
    let mut text = String::from("params (searched, constant, or the trainable's default):\n");
    text.push_str(&if params.is_empty() { "  none".into() } else { rows(&params) });
    text.push_str(&format!("\nmetrics {who} reports: {}", metrics(trainable)));
    text
}

/// `rtune builtins`: each trainable of `registry`, what it is, the params it reads (with their
/// defaults and ranges) and the metrics it reports.
pub(super) fn builtins(registry: &Trainables) -> String {
    let mut out = Vec::new();
    for name in registry.names() {
        let t = registry.get(name).expect("a name the registry lists");
        let mut text = format!("{name}: {}\n", t.about);
        let params: Vec<(String, &str, String)> = t
            .defaults
            .keys()
            .filter_map(|k| {
                let default = toml_value(t.defaults.value(k)?);
                let range =
                    t.ranges.iter().find(|(p, _)| p == k).map_or(String::new(), |(_, r)| {
                        format!("  ({} to {})", number_text(*r.start()), number_text(*r.end()))
                    });
                Some((k.to_owned(), "default", format!("{default}{range}")))
            })
            .collect();
        if params.is_empty() {
            text.push_str("  params: not declared (every param is passed on)\n");
        } else {
            text.push_str(&rows(&params));
            text.push('\n');
        }
        text.push_str(&format!("  reports: {}", metrics(Some(t))));
        out.push(text);
    }
    out.join("\n\n")
}
