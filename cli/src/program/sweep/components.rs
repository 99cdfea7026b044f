//! The sweep file's searchers and schedulers (`tune.search`, `tune.scheduler`): each kind is one
//! table, one row per option (its name in the file, and its builder's setter, whose argument is
//! the type the file must write). Reading the file and building the searcher or scheduler both
//! go by that table, so an option is known to both or to neither: a new option is one row.

use rtune_searchers::{
    Asha, BasicVariant, Bohb, CmaEs, Fifo, Gp, HyperBand, MedianStopping, Nsga2, Params, Pbt,
    SearchSpace, Searcher, Tpe, TrialScheduler, Value,
};

use super::space::{add_space_error, read_space};
use super::{SweepSpec, find_key};
use crate::doc::{self, Item, Kind, Origin, Report, Typed};
use rtune_driver::tune::Samples;

/// A searcher or scheduler by kind, with its options as written.
#[derive(Debug, Clone)]
pub struct Component {
    pub kind: String,
    options: Vec<(String, Opt)>,
}

impl Component {
    /// A kind with no options written.
    pub(super) fn plain(kind: &str) -> Component {
        Component { kind: kind.to_owned(), options: Vec::new() }
    }

    fn has(&self, option: &str) -> bool {
        self.options.iter().any(|(name, _)| name == option)
    }

    /// A string option's value (`time_attr`).
    pub fn text(&self, option: &str) -> Option<&str> {
        self.options.iter().find_map(|(name, value)| match value {
            Opt::Str(s) if name == option => Some(s.as_str()),
            _ => None,
        })
    }
}

/// An option's value, read as its type.
#[derive(Debug, Clone)]
enum Opt {
    Num(f64),
    Count(usize),
    Bool(bool),
    Str(String),
    Pair(f64, f64),
    Space(Box<SearchSpace>),
    Points(Vec<Params>),
    Nums(Vec<f64>),
}

/// An option's type, as the sweep file must write it.
#[derive(Clone, Copy)]
pub(super) enum Ty {
    Num,
    /// An integer >= 0.
    Count,
    Bool,
    Str,
    Pair,
    Space,
    /// An array of tables of params.
    Points,
    /// An array of numbers.
    Nums,
}

/// How an option is set on the builder `B`, by the type the file must write it as.
enum Setter<B> {
    Num(fn(B, f64) -> B),
    Count(fn(B, usize) -> B),
    Bool(fn(B, bool) -> B),
    Str(fn(B, String) -> B),
    Pair(fn(B, f64, f64) -> B),
    Space(fn(B, SearchSpace) -> B),
    Points(fn(B, Vec<Params>) -> B),
    Nums(fn(B, Vec<f64>) -> B),
}

impl<B> Setter<B> {
    fn ty(&self) -> Ty {
        match self {
            Setter::Num(_) => Ty::Num,
            Setter::Count(_) => Ty::Count,
            Setter::Bool(_) => Ty::Bool,
            Setter::Str(_) => Ty::Str,
            Setter::Pair(_) => Ty::Pair,
            Setter::Space(_) => Ty::Space,
            Setter::Points(_) => Ty::Points,
            Setter::Nums(_) => Ty::Nums,
        }
    }

    /// Sets `opt` on `builder`; `opt` was read as this setter's type (`read_component`).
    fn set(&self, builder: B, opt: &Opt) -> B {
        match (self, opt) {
            (Setter::Num(f), Opt::Num(x)) => f(builder, *x),
            (Setter::Count(f), Opt::Count(n)) => f(builder, *n),
            (Setter::Bool(f), Opt::Bool(b)) => f(builder, *b),
            (Setter::Str(f), Opt::Str(s)) => f(builder, s.clone()),
            (Setter::Pair(f), Opt::Pair(a, b)) => f(builder, *a, *b),
            (Setter::Space(f), Opt::Space(space)) => f(builder, (**space).clone()),
            (Setter::Points(f), Opt::Points(points)) => f(builder, points.clone()),
            (Setter::Nums(f), Opt::Nums(values)) => f(builder, values.clone()),
            _ => unreachable!("an option is read as the type of its setter"),
        }
    }
}

/// What a searcher or scheduler is built from besides its options.
pub(super) struct Context<'s> {
    pub space: &'s SearchSpace,
    pub seed: u64,
    pub num_samples: Samples,
}

/// One kind of searcher (`T = dyn Searcher`) or scheduler (`T = dyn TrialScheduler`): its name
/// in the file, how its builder starts, one row per option, and what it becomes.
struct Table<B: 'static, T: ?Sized> {
    name: &'static str,
    start: fn(&Context<'_>) -> B,
    options: &'static [(&'static str, Setter<B>)],
    finish: fn(B) -> Box<T>,
}

/// A kind's `Table` with its builder's type erased, for the lists of kinds.
pub(super) trait Blueprint<T: ?Sized>: Sync {
    fn name(&self) -> &'static str;
    fn options(&self) -> Vec<(&'static str, Ty)>;
    fn build(&self, context: &Context<'_>, component: &Component) -> Box<T>;
}

impl<B: 'static, T: ?Sized + 'static> Blueprint<T> for Table<B, T> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn options(&self) -> Vec<(&'static str, Ty)> {
        self.options.iter().map(|(name, setter)| (*name, setter.ty())).collect()
    }

    fn build(&self, context: &Context<'_>, component: &Component) -> Box<T> {
        let mut builder = (self.start)(context);
        for (name, opt) in &component.options {
            let (_, setter) = self
                .options
                .iter()
                .find(|(n, _)| n == name)
                .expect("an option is read only when its kind has it");
            builder = setter.set(builder, opt);
        }
        (self.finish)(builder)
    }
}

/// `num_samples` for a searcher: until stopped is every sample there is.
fn samples(context: &Context<'_>) -> u64 {
    context.num_samples.limit().unwrap_or(u64::MAX)
}

static RANDOM: Table<BasicVariant, dyn Searcher> = Table {
    name: "random",
    start: |c| {
        BasicVariant::new(c.space.clone())
            .expect("the space was checked when read")
            .num_samples(samples(c))
            .seed(c.seed)
    },
    options: &[
        ("points_to_evaluate", Setter::Points(|s, p| s.points_to_evaluate(p))),
        ("evaluated_rewards", Setter::Nums(|s, r| s.evaluated_rewards(r))),
    ],
    finish: |s| Box::new(s),
};

static TPE: Table<Tpe, dyn Searcher> = Table {
    name: "tpe",
    start: |c| Tpe::new().seed(c.seed),
    options: &[
        ("points_to_evaluate", Setter::Points(|s, p| s.points_to_evaluate(p))),
        ("evaluated_rewards", Setter::Nums(|s, r| s.evaluated_rewards(r))),
        ("n_startup_trials", Setter::Count(Tpe::n_startup_trials)),
        ("n_ei_candidates", Setter::Count(Tpe::n_ei_candidates)),
        ("prior_weight", Setter::Num(Tpe::prior_weight)),
        ("consider_magic_clip", Setter::Bool(Tpe::consider_magic_clip)),
        ("consider_endpoints", Setter::Bool(Tpe::consider_endpoints)),
        ("constant_liar", Setter::Bool(Tpe::constant_liar)),
        ("multivariate", Setter::Bool(Tpe::multivariate)),
    ],
    finish: |s| Box::new(s),
};

static BOHB: Table<Bohb, dyn Searcher> = Table {
    name: "bohb",
    start: |c| Bohb::new().seed(c.seed),
    options: &[
        ("time_attr", Setter::Str(|s, a| s.time_attr(a))),
        ("top_n_percent", Setter::Num(Bohb::top_n_percent)),
        ("min_points_in_model", Setter::Count(Bohb::min_points_in_model)),
        ("num_samples", Setter::Count(Bohb::num_samples)),
        ("random_fraction", Setter::Num(Bohb::random_fraction)),
        ("bandwidth_factor", Setter::Num(Bohb::bandwidth_factor)),
        ("min_bandwidth", Setter::Num(Bohb::min_bandwidth)),
    ],
    finish: |s| Box::new(s),
};

static NSGA2: Table<Nsga2, dyn Searcher> = Table {
    name: "nsga2",
    start: |c| Nsga2::new().seed(c.seed),
    options: &[
        ("population_size", Setter::Count(Nsga2::population_size)),
        ("mutation_prob", Setter::Num(Nsga2::mutation_prob)),
        ("crossover_prob", Setter::Num(Nsga2::crossover_prob)),
        ("swapping_prob", Setter::Num(Nsga2::swapping_prob)),
    ],
    finish: |s| Box::new(s),
};

static CMAES: Table<CmaEs, dyn Searcher> = Table {
    name: "cmaes",
    start: |c| CmaEs::new().seed(c.seed),
    options: &[
        ("restart", Setter::Str(CmaEs::restart_named)),
        ("popsize", Setter::Count(CmaEs::popsize)),
        ("sigma0", Setter::Num(CmaEs::sigma0)),
    ],
    finish: |s| Box::new(s),
};

static GP: Table<Gp, dyn Searcher> = Table {
    name: "gp",
    start: |c| Gp::new().seed(c.seed),
    options: &[
        ("n_startup_trials", Setter::Count(Gp::n_startup_trials)),
        ("n_candidates", Setter::Count(Gp::n_candidates)),
    ],
    finish: |s| Box::new(s),
};

/// The searchers a sweep file can name.
pub(super) static SEARCHERS: &[&dyn Blueprint<dyn Searcher>] =
    &[&RANDOM, &TPE, &BOHB, &NSGA2, &CMAES, &GP];

static FIFO: Table<Fifo, dyn TrialScheduler> =
    Table { name: "fifo", start: |_| Fifo::new(), options: &[], finish: |s| Box::new(s) };

static ASHA: Table<Asha, dyn TrialScheduler> = Table {
    name: "asha",
    start: |c| Asha::new().seed(c.seed),
    options: &[
        ("time_attr", Setter::Str(|s, a| s.time_attr(a))),
        ("max_t", Setter::Num(|s, x| s.max_t(x))),
        ("grace_period", Setter::Num(|s, x| s.grace_period(x))),
        ("reduction_factor", Setter::Num(|s, x| s.reduction_factor(x))),
        ("brackets", Setter::Count(Asha::brackets)),
        ("stop_last_trials", Setter::Bool(Asha::stop_last_trials)),
    ],
    finish: |s| Box::new(s),
};

static HYPERBAND: Table<HyperBand, dyn TrialScheduler> = Table {
    name: "hyperband",
    start: |_| HyperBand::new(),
    options: &[
        ("time_attr", Setter::Str(|s, a| s.time_attr(a))),
        ("max_t", Setter::Num(|s, x| s.max_t(x))),
        ("reduction_factor", Setter::Num(|s, x| s.reduction_factor(x))),
        ("stop_last_trials", Setter::Bool(HyperBand::stop_last_trials)),
        ("aggressive_first", Setter::Bool(HyperBand::aggressive_first)),
    ],
    finish: |s| Box::new(s),
};

static MEDIAN_STOPPING: Table<MedianStopping, dyn TrialScheduler> = Table {
    name: "median_stopping",
    start: |_| MedianStopping::new(),
    options: &[
        ("time_attr", Setter::Str(|s, a| s.time_attr(a))),
        ("grace_period", Setter::Num(|s, x| s.grace_period(x))),
        ("min_samples_required", Setter::Count(MedianStopping::min_samples_required)),
        ("min_time_slice", Setter::Num(|s, x| s.min_time_slice(x))),
        ("hard_stop", Setter::Bool(MedianStopping::hard_stop)),
    ],
    finish: |s| Box::new(s),
};

static PBT: Table<Pbt, dyn TrialScheduler> = Table {
    name: "pbt",
    start: |c| Pbt::new().seed(c.seed),
    options: &[
        ("time_attr", Setter::Str(|s, a| s.time_attr(a))),
        ("perturbation_interval", Setter::Num(|s, x| s.perturbation_interval(x))),
        ("burn_in_period", Setter::Num(|s, x| s.burn_in_period(x))),
        ("hyperparam_mutations", Setter::Space(Pbt::hyperparam_mutations)),
        ("quantile_fraction", Setter::Num(Pbt::quantile_fraction)),
        ("resample_probability", Setter::Num(Pbt::resample_probability)),
        ("perturbation_factors", Setter::Pair(Pbt::perturbation_factors)),
    ],
    finish: |s| Box::new(s),
};

/// `search = "auto"`, the default: the searcher a sweep file gets when it names none.
pub(super) const AUTO: &str = "auto";

/// What `search = "auto"` runs for this space, these settings and this scheduler, and why (for
/// the start line): [`rtune_searchers::auto`], PBT being a scheduler that explores itself.
pub(super) fn auto(
    space: &SearchSpace,
    tune: &rtune_driver::tune::TuneSettings,
    scheduler: &str,
) -> (&'static str, String) {
    let budget = tune.num_samples.limit();
    let constrained = !tune.constraints.is_empty();
    rtune_searchers::auto(space, tune.objectives().len(), budget, scheduler == "pbt", constrained)
}

/// The schedulers a sweep file can name.
pub(super) static SCHEDULERS: &[&dyn Blueprint<dyn TrialScheduler>] =
    &[&FIFO, &ASHA, &HYPERBAND, &MEDIAN_STOPPING, &PBT];

/// The kind of `kinds` named `name` (read from the file, so there is one).
fn blueprint<'k, T: ?Sized>(kinds: &'k [&'k dyn Blueprint<T>], name: &str) -> &'k dyn Blueprint<T> {
    *kinds.iter().find(|k| k.name() == name).expect("a component's kind is read from its table")
}

/// What a sweep's searcher and scheduler are built from: its space, its settings, and the two
/// components as the file gives them.
pub(super) struct Tuning<'s> {
    pub space: &'s SearchSpace,
    pub tune: &'s rtune_driver::tune::TuneSettings,
    pub search: &'s Component,
    pub scheduler: &'s Component,
}

impl Tuning<'_> {
    fn context(&self) -> Context<'_> {
        Context { space: self.space, seed: self.tune.seed, num_samples: self.tune.num_samples }
    }

    /// The searcher the file asks for, built anew (it holds state, one per sweep); None for
    /// random search without known points, which is the Tuner's own.
    pub fn searcher(&self) -> Option<Box<dyn Searcher>> {
        if self.search.kind == RANDOM.name && !self.search.has("points_to_evaluate") {
            return None;
        }
        Some(blueprint(SEARCHERS, &self.search.kind).build(&self.context(), self.search))
    }

    /// The scheduler the file asks for, built anew.
    pub fn scheduler(&self) -> Option<Box<dyn TrialScheduler>> {
        Some(blueprint(SCHEDULERS, &self.scheduler.kind).build(&self.context(), self.scheduler))
    }
}

impl SweepSpec {
    fn tuning(&self) -> Tuning<'_> {
        Tuning {
            space: &self.space,
            tune: &self.tune,
            search: &self.search,
            scheduler: &self.scheduler,
        }
    }

    /// The searcher as people read it: `tpe`, or `gp (search = "auto": 4 numeric params and
    /// 50 trials)`.
    pub fn search_said(&self) -> String {
        match &self.auto {
            Some(why) => format!("{} (search = \"auto\": {why})", self.search.kind),
            None => self.search.kind.clone(),
        }
    }

    /// The searcher the file asks for, built anew (see `Tuning::searcher`).
    pub fn searcher(&self) -> Option<Box<dyn Searcher>> {
        self.tuning().searcher()
    }

    /// The scheduler the file asks for, built anew.
    pub fn scheduler(&self) -> Option<Box<dyn TrialScheduler>> {
        self.tuning().scheduler()
    }
}

/// Reads `tune.<key>`: a kind of `kinds` by name, or a table with `type = NAME` and that kind's
/// options, each checked against the kind's table (an option it does not know is an error
/// naming its options, never dropped).
pub(super) fn read_component<T: ?Sized>(
    item: Option<&Item>,
    key: &'static str,
    kinds: &[&dyn Blueprint<T>],
    default: &str,
    report: &mut Report<'_>,
) -> Option<Component> {
    let path = format!("tune.{key}");
    let mut names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    // The default may be a name of its own (the searchers' `auto`), which takes no options.
    if !names.contains(&default) {
        names.insert(0, default);
    }
    let Some(item) = item else {
        return Some(Component::plain(default));
    };
    let check_kind = |kind: &str, origin: &Origin, at: &str, report: &mut Report<'_>| {
        let found = kinds.iter().find(|k| k.name() == kind).map(|k| k.options());
        let found = found.or_else(|| (kind == default).then(Vec::new));
        if found.is_none() {
            let message = format!(
                "is {kind:?}; allowed: {}{}",
                doc::list(&names),
                doc::did_you_mean(kind, &names)
            );
            report.add(at, origin, message);
        }
        found
    };
    match &item.kind {
        Kind::Str(kind) => {
            check_kind(kind, &item.origin, &path, report)?;
            Some(Component { kind: kind.clone(), options: Vec::new() })
        }
        Kind::Table(entries) => {
            let Some((_, type_origin, type_item)) = entries.iter().find(|(k, _, _)| k == "type")
            else {
                let message = format!(
                    "needs type = one of {} (e.g. {{ type = \"{}\" }})",
                    doc::list(&names),
                    kinds.get(1).map_or(default, |k| k.name())
                );
                report.add(&path, &item.origin, message);
                return None;
            };
            let Kind::Str(kind) = &type_item.kind else {
                report.add(&format!("{path}.type"), type_origin, "must be a string");
                return None;
            };
            let allowed = check_kind(kind, &type_item.origin, &format!("{path}.type"), report)?;
            let mut options = Vec::new();
            let mut bad = false;
            for (name, origin, value) in entries.iter().filter(|(k, _, _)| k != "type") {
                let option_path = format!("{path}.{name}");
                let Some(&(_, ty)) = allowed.iter().find(|(n, _)| n == name) else {
                    let option_names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
                    let message = if option_names.is_empty() {
                        format!("is not an option of {key} `{kind}`, which takes none")
                    } else {
                        format!(
                            "is not an option of {key} `{kind}`; its options: {}{}",
                            doc::list(&option_names),
                            doc::did_you_mean(name, &option_names)
                        )
                    };
                    report.add(&option_path, origin, message);
                    bad = true;
                    continue;
                };
                match read_opt(value, ty, &option_path, report) {
                    Some(opt) => options.push((name.clone(), opt)),
                    None => bad = true,
                }
            }
            (!bad).then(|| Component { kind: kind.clone(), options })
        }
        other => {
            let message = format!(
                "must be a name ({}) or a table with type = NAME and options, not {}",
                doc::list(&names),
                other.describe()
            );
            report.add(&path, &item.origin, message);
            None
        }
    }
}

/// An option's value as its type asks: an error at its key when it is not.
fn read_opt(value: &Item, ty: Ty, path: &str, report: &mut Report<'_>) -> Option<Opt> {
    let opt = match (ty, &value.kind) {
        (Ty::Num, Kind::Int(i)) => Some(Opt::Num(*i as f64)),
        (Ty::Num, Kind::Float(x)) => Some(Opt::Num(*x)),
        (Ty::Count, Kind::Int(i)) => usize::try_from(*i).ok().map(Opt::Count),
        (Ty::Bool, Kind::Bool(b)) => Some(Opt::Bool(*b)),
        (Ty::Str, Kind::Str(s)) => Some(Opt::Str(s.clone())),
        (Ty::Pair, Kind::Array(items)) => match items.as_slice() {
            [a, b] => match (f64::read(&a.kind), f64::read(&b.kind)) {
                (Some(a), Some(b)) => Some(Opt::Pair(a, b)),
                _ => None,
            },
            _ => None,
        },
        (Ty::Space, Kind::Table(_)) => {
            return read_space(value, path, report).0.map(|s| Opt::Space(Box::new(s)));
        }
        (Ty::Points, Kind::Array(items)) => items
            .iter()
            .map(|item| match doc::to_value(item) {
                Value::Map(m) if matches!(item.kind, Kind::Table(_)) => Some(Params::from(m)),
                _ => None,
            })
            .collect::<Option<Vec<Params>>>()
            .map(Opt::Points),
        (Ty::Nums, Kind::Array(items)) => {
            items.iter().map(|i| f64::read(&i.kind)).collect::<Option<Vec<f64>>>().map(Opt::Nums)
        }
        _ => None,
    };
    if opt.is_none() {
        let want = match ty {
            Ty::Num => "a number",
            Ty::Count => "a count (an integer >= 0)",
            Ty::Bool => "true or false",
            Ty::Str => "a string",
            Ty::Pair => "two numbers, e.g. [1.2, 0.8]",
            Ty::Space => "a table of params (a search space)",
            Ty::Points => "a list of tables of params, e.g. [{ lr = 0.01, hidden = 64 }]",
            Ty::Nums => "a list of numbers, e.g. [0.91, 0.87]",
        };
        report.add(path, &value.origin, format!("must be {want}, not {}", value.kind.describe()));
    }
    opt
}

/// Builds the searcher and scheduler once, with the metric, so that settings they refuse are
/// reported at their keys before anything starts.
pub(super) fn check_components(spec: &Tuning<'_>, root: &Item, report: &mut Report<'_>) {
    let place = |section: &str, setting: &str| -> Origin {
        doc::find(root, &format!("tune.{section}.{setting}"))
            .or_else(|| doc::find(root, &format!("tune.{section}")))
            .map_or(root.origin.clone(), |(o, _)| o.clone())
    };
    // Handed the space as the Tuner will: one that models it refuses what it cannot model (a
    // grid_search), which is the param_space's mistake.
    let mut searcher = spec.searcher();
    if let Some(s) = searcher.as_mut()
        && let Err(e) = s.set_space(spec.space)
    {
        let param_space = find_key(root, "param_space").unwrap_or(root);
        add_space_error(param_space, "param_space", &e, report);
        searcher = None;
    }
    // BOHB's budgets are the scheduler's: one key for both.
    let scheduler_attr = match spec.scheduler.kind.as_str() {
        "fifo" => None,
        _ => Some(spec.scheduler.text("time_attr").unwrap_or("training_iteration")),
    };
    if spec.search.kind == "bohb"
        && let Some(theirs) = scheduler_attr
    {
        let ours = spec.search.text("time_attr").unwrap_or("training_iteration");
        if ours != theirs {
            report.add(
                "tune.search.time_attr",
                &place("search", "time_attr"),
                format!(
                    "BOHB's budgets are `{ours}` but the scheduler's time_attr is `{theirs}`; \
                     give both the same key"
                ),
            );
        }
    }
    let objectives = spec.tune.objectives();
    let target = objectives.single();
    let mut checks: Vec<(&str, rtune_searchers::Result<()>)> = Vec::new();
    // (Several objectives with a searcher or scheduler that takes one are named when read.)
    if let Some(mut searcher) = searcher {
        let metric = match target {
            Some(one) => searcher.set_metric(&one.metric, one.mode),
            None if !objectives.several().is_empty() => {
                match searcher.set_objectives(objectives.several()) {
                    Err(rtune_searchers::Error::SingleObjective { .. }) => Ok(()),
                    other => other,
                }
            }
            None => Ok(()),
        };
        let constraints = &spec.tune.constraints;
        let constrained = match constraints.is_empty() {
            true => Ok(()),
            false => searcher.set_constraints(constraints),
        };
        checks.push(("search", searcher.validate().and(metric).and(constrained)));
    }
    if let Some(mut scheduler) = spec.scheduler() {
        let metric = target.map_or(Ok(()), |one| scheduler.set_metric(&one.metric, one.mode));
        checks.push(("scheduler", scheduler.validate().and(metric)));
    }
    for (section, result) in checks {
        if let Err(e) = result {
            let setting = match &e {
                rtune_searchers::Error::InvalidConfig { setting, .. } => *setting,
                _ => "",
            };
            let key = if setting.is_empty() {
                format!("tune.{section}")
            } else {
                format!("tune.{section}.{setting}")
            };
            report.add(&key, &place(section, setting), e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of each type, as a sweep file could write it.
    fn sample(ty: Ty) -> Opt {
        match ty {
            Ty::Num => Opt::Num(2.0),
            Ty::Count => Opt::Count(2),
            Ty::Bool => Opt::Bool(true),
            Ty::Str => Opt::Str("training_iteration".into()),
            Ty::Pair => Opt::Pair(1.2, 0.8),
            Ty::Space => Opt::Space(Box::new(SearchSpace::new().add("x", 1.0))),
            Ty::Points => Opt::Points(vec![Params::new().with("x", 1.0)]),
            Ty::Nums => Opt::Nums(vec![0.5]),
        }
    }

    /// Every option of every kind, read as its table says, is set by its own row: the tables
    /// that read the file are the ones that build, so no option can be read and then dropped.
    #[test]
    fn every_option_read_is_an_option_built() {
        let space = SearchSpace::new().add("x", 1.0);
        let context = Context { space: &space, seed: 3, num_samples: Samples::Count(4) };
        fn check<T: ?Sized>(kinds: &[&dyn Blueprint<T>], context: &Context<'_>) {
            for kind in kinds {
                let options = kind.options();
                let mut names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
                names.sort_unstable();
                names.dedup();
                assert_eq!(names.len(), options.len(), "{}: an option twice", kind.name());
                let options =
                    options.into_iter().map(|(name, ty)| (name.to_owned(), sample(ty))).collect();
                let component = Component { kind: kind.name().into(), options };
                let _built = kind.build(context, &component);
            }
        }
        check(SEARCHERS, &context);
        check(SCHEDULERS, &context);
        let names: Vec<&str> = SCHEDULERS.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["fifo", "asha", "hyperband", "median_stopping", "pbt"]);
    }
}
