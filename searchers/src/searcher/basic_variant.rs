//! Random and grid search (Ray's `BasicVariantGenerator`): every grid combination is repeated
//! `num_samples` times, with the random domains resampled for each trial. The combinations are
//! enumerated as Ray does: grid axes sorted by key path, the first axis varying fastest; the
//! whole grid is walked once per sample. Deterministic under a seed; `Finished` after the last.
//!
//! `points_to_evaluate` come first, in order, as in Ray: each point counts as one of the
//! `num_samples`, its missing domains are drawn at random and the grid axes it leaves open are
//! walked (so a point without a grid value runs once per value). With `evaluated_rewards` the
//! points are known already and are not run: random search learns nothing from them, so they
//! only take no sample away (Ray's `BasicVariantGenerator` has no `evaluated_rewards`; this
//! accepts them so that any sweep can be warm-started the same way).

use serde::{Deserialize, Serialize};

use super::points::{PointValues, Points};
use super::{Searcher, SearcherState, Suggestion, wrong_state};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Mode};
use crate::params::Params;
use crate::rng::SearchRng;
use crate::space::{Param, SearchSpace};
use crate::trial::TrialId;
use crate::value::Value;

const NAME: &str = "BasicVariant";

/// Random + grid search.
#[derive(Clone, Debug)]
pub struct BasicVariant {
    space: SearchSpace,
    num_samples: u64,
    seed: u64,
    /// Grid axes in Ray's order: (sampled-leaf index, number of values).
    axes: Vec<(usize, usize)>,
    grid_size: u64,
    points: Points,
    state: BasicVariantState,
}

/// The evolving part of a [`BasicVariant`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BasicVariantState {
    rng: SearchRng,
    /// Index of the next variant: the points' variants first, then sample-major
    /// (`sample * grid_size + grid combination`).
    next: u64,
}

impl BasicVariant {
    /// A searcher over `space` (validated here) with `num_samples = 1` and seed 0.
    pub fn new(space: SearchSpace) -> Result<Self> {
        space.validate()?;
        let mut axes: Vec<(Vec<&str>, usize, usize)> = Vec::new();
        let mut sampled = 0;
        for leaf in space.leaves() {
            match leaf.param {
                Param::Grid(values) => {
                    axes.push((leaf.path.clone(), sampled, values.len()));
                    sampled += 1;
                }
                Param::Sample(_) => sampled += 1,
                _ => {}
            }
        }
        axes.sort_by(|a, b| a.0.cmp(&b.0));
        let mut grid_size: u64 = 1;
        for (path, _, len) in &axes {
            grid_size = grid_size.checked_mul(*len as u64).ok_or_else(|| {
                Error::space(path.join("."), "the grid has more than 2^64 combinations")
            })?;
        }
        let axes = axes.into_iter().map(|(_, i, n)| (i, n)).collect();
        Ok(Self {
            space,
            num_samples: 1,
            seed: 0,
            axes,
            grid_size,
            points: Points::new(NAME),
            state: BasicVariantState { rng: SearchRng::seed_from_u64(0), next: 0 },
        })
    }

    /// Parameter sets to run first, in order (Ray's `points_to_evaluate`); each counts as one
    /// of the `num_samples`. A point may give only some parameters: its missing domains are
    /// drawn, the grid axes it leaves open are walked. A point that does not fit the space (a
    /// key it does not have, a value outside its domain) is an [`Error::InvalidConfig`] for
    /// `points_to_evaluate` from [`Searcher::validate`] and [`Searcher::suggest`], naming the
    /// point, the key, the value and what would fit.
    pub fn points_to_evaluate<P: Into<Params>>(
        mut self,
        points: impl IntoIterator<Item = P>,
    ) -> Self {
        self.points.set_points(&self.space, points.into_iter().map(Into::into).collect());
        self
    }

    /// Known results of the points, one per point: the points are then not run, and take no
    /// sample away (see the module docs). A count that differs from the points' is an
    /// [`Error::InvalidConfig`] for `evaluated_rewards`.
    pub fn evaluated_rewards(mut self, rewards: impl IntoIterator<Item = f64>) -> Self {
        self.points.set_rewards(&self.space, rewards.into_iter().collect());
        self
    }

    /// How many times the whole grid is repeated (Ray's `num_samples`); 0 suggests nothing.
    pub fn num_samples(mut self, n: u64) -> Self {
        self.num_samples = n;
        self
    }

    /// Seed of the random stream (restarts the sequence).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self.state = BasicVariantState { rng: SearchRng::seed_from_u64(seed), next: 0 };
        self
    }

    /// Total number of trials this searcher will suggest, points included (`None` on
    /// overflow; invalid points count as none).
    pub fn total(&self) -> Option<u64> {
        let points = self.points.to_run().unwrap_or(&[]);
        let mut total: u64 = 0;
        for p in points {
            total = total.checked_add(self.point_variants(p))?;
        }
        let samples = self.num_samples.saturating_sub(points.len() as u64);
        total.checked_add(samples.checked_mul(self.grid_size)?)
    }

    /// Variants of one point: the product of the grid axes it leaves open.
    fn point_variants(&self, point: &PointValues) -> u64 {
        self.open_axes(point).map(|(_, len)| len.max(1) as u64).product()
    }

    /// The grid axes a point leaves open, in Ray's order.
    fn open_axes<'a>(
        &'a self,
        point: &'a PointValues,
    ) -> impl Iterator<Item = (usize, usize)> + 'a {
        self.axes.iter().copied().filter(|(leaf, _)| point.get(*leaf).is_none_or(Option::is_none))
    }

    /// The space searched.
    pub fn space(&self) -> &SearchSpace {
        &self.space
    }
}

impl Searcher for BasicVariant {
    fn trial_count(&self) -> Option<u64> {
        self.total()
    }

    fn set_metric(&mut self, _metric: &str, _mode: Mode) -> Result<()> {
        Ok(())
    }

    fn set_objectives(&mut self, _objectives: &[crate::metrics::Objective]) -> Result<()> {
        Ok(())
    }

    /// Random draws and grids do not learn from results: constraints change nothing here.
    fn set_constraints(&mut self, constraints: &[String]) -> Result<()> {
        crate::metrics::check_constraints(NAME, constraints)
    }

    fn validate(&self) -> Result<()> {
        self.points.check()
    }

    fn suggest(&mut self, _trial: TrialId) -> Result<Suggestion> {
        self.points.check()?;
        let total = self.total().unwrap_or(u64::MAX);
        if self.state.next >= total {
            return Ok(Suggestion::Finished);
        }
        // The point this variant comes from (if any), and its index among the variants of
        // that point (or of the plain samples).
        let mut index = self.state.next;
        let mut point: Option<PointValues> = None;
        for p in self.points.to_run()? {
            let n = self.point_variants(p);
            if index < n {
                point = Some(p.clone());
                break;
            }
            index -= n;
        }
        let fixed = point.unwrap_or_default();
        let mut combo = index % self.grid_size.max(1);
        // Value index for each grid axis left open; the first open axis varies fastest.
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(self.axes.len());
        for (leaf, len) in self.open_axes(&fixed) {
            let len = len.max(1) as u64;
            picks.push((leaf, (combo % len) as usize));
            combo /= len;
        }
        let params = self.space.resolve(&mut self.state.rng, &mut |i, param, rng| {
            if let Some(Some(v)) = fixed.get(i) {
                return Ok(v.clone());
            }
            Ok(match param {
                Param::Sample(d) => d.sample(rng),
                Param::Grid(values) => {
                    let k = picks.iter().find(|(leaf, _)| *leaf == i).map_or(0, |(_, k)| *k);
                    values.get(k).cloned().unwrap_or(Value::Null)
                }
                _ => Value::Null,
            })
        })?;
        self.state.next += 1;
        Ok(Suggestion::Params(params))
    }

    fn on_trial_complete(&mut self, _: TrialId, _: Option<&Metrics>, _: bool) -> Result<()> {
        Ok(())
    }

    fn save_state(&self) -> SearcherState {
        SearcherState::BasicVariant(self.state.clone())
    }

    fn restore_state(&mut self, state: SearcherState) -> Result<()> {
        match state {
            SearcherState::BasicVariant(s) => {
                self.state = s;
                Ok(())
            }
            other => Err(wrong_state(NAME, &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::domain::{choice, uniform};
    use crate::space::grid_search;

    fn drain(s: &mut BasicVariant) -> Vec<crate::params::Params> {
        let mut out = Vec::new();
        for i in 0.. {
            match s.suggest(TrialId(i)).unwrap() {
                Suggestion::Params(p) => out.push(p),
                Suggestion::Finished => break,
                Suggestion::NotNow => unreachable!(),
            }
        }
        out
    }

    #[test]
    fn grid_times_samples_in_rays_order() {
        let space = SearchSpace::new()
            .add("b", grid_search(["x", "y", "z"]))
            .add("a", grid_search([1, 2]))
            .add("u", uniform(0.0, 1.0).unwrap())
            .add("c", choice([true, false]));
        let mut s = BasicVariant::new(space).unwrap().num_samples(2).seed(3);
        let all = drain(&mut s);
        assert_eq!(all.len(), 12);
        // Axes sorted by path: "a" first, varying fastest.
        let combos: Vec<(i64, String)> = all
            .iter()
            .map(|p| (p.get::<i64>("a").unwrap(), p.get::<String>("b").unwrap()))
            .collect();
        assert_eq!(combos[0], (1, "x".into()));
        assert_eq!(combos[1], (2, "x".into()));
        assert_eq!(combos[2], (1, "y".into()));
        assert_eq!(combos[6], combos[0], "second sample walks the grid again");
        assert_ne!(all[0].get::<f64>("u").unwrap(), all[6].get::<f64>("u").unwrap());
        let mut again = BasicVariant::new(s.space().clone()).unwrap().num_samples(2).seed(3);
        assert_eq!(drain(&mut again), all);
    }

    #[test]
    fn no_grid_means_num_samples_trials() {
        let space = SearchSpace::new().add("u", uniform(0.0, 1.0).unwrap()).add("k", 5);
        let mut s = BasicVariant::new(space).unwrap().num_samples(4);
        assert_eq!(drain(&mut s).len(), 4);
        assert_eq!(s.suggest(TrialId(99)).unwrap(), Suggestion::Finished);
    }

    fn point(entries: &[(&str, Value)]) -> Params {
        entries.iter().cloned().collect()
    }

    fn bv_space() -> SearchSpace {
        SearchSpace::new()
            .add("x", uniform(0.0, 1.0).unwrap())
            .add("g", grid_search(["a", "b"]))
            .add("c", choice([1, 2]))
            .add("k", 5)
    }

    /// Points run first, in order, each counting as one of `num_samples`; a point that leaves
    /// a grid axis open runs once per value, and its missing domains are drawn.
    #[test]
    fn points_come_first_and_count_as_samples() {
        let full = point(&[("x", 0.5.into()), ("g", "b".into()), ("c", 2.into())]);
        let partial = point(&[("x", 0.25.into())]);
        let mut s = BasicVariant::new(bv_space())
            .unwrap()
            .num_samples(3)
            .seed(4)
            .points_to_evaluate([full.clone(), partial]);
        // 1 (full) + 2 (g open) + (3 − 2 samples left) × 2 grid values.
        assert_eq!(s.total(), Some(5));
        let all = drain(&mut s);
        assert_eq!(all.len(), 5);
        assert_eq!(all[0], full.clone().with("k", 5));
        for (p, g) in all[1..3].iter().zip(["a", "b"]) {
            assert_eq!(p.get::<f64>("x").unwrap(), 0.25, "the point's value");
            assert_eq!(p.get::<String>("g").unwrap(), g, "the open axis walked");
            assert!([1, 2].contains(&p.get::<i64>("c").unwrap()), "a draw from the choice");
            assert_eq!(p.get::<i64>("k").unwrap(), 5);
        }
        let rest: Vec<String> = all[3..].iter().map(|p| p.get::<String>("g").unwrap()).collect();
        assert_eq!(rest, ["a", "b"], "then the plain samples");
        assert_ne!(all[3].get::<f64>("x").unwrap(), 0.25);
        // More points than samples: every point still runs, no plain sample follows.
        let many = (0..4).map(|i| point(&[("x", (f64::from(i) / 8.0).into()), ("g", "a".into())]));
        let mut s = BasicVariant::new(bv_space()).unwrap().num_samples(2).points_to_evaluate(many);
        let xs: Vec<f64> = drain(&mut s).iter().map(|p| p.get::<f64>("x").unwrap()).collect();
        assert_eq!(xs, [0.0, 0.125, 0.25, 0.375]);
    }

    /// Nested parameters are given as nested tables or dotted keys; a number of the other kind
    /// is taken when it is the same number.
    #[test]
    fn partial_points_are_completed_from_the_space() {
        let space = SearchSpace::new()
            .add(
                "model",
                SearchSpace::new()
                    .add("lr", crate::space::domain::loguniform(1e-4, 1e-1).unwrap())
                    .add("hidden", choice([64, 128])),
            )
            .add("width", uniform(0.0, 4.0).unwrap())
            .add("n", crate::space::domain::randint(1, 10).unwrap());
        let mut model = crate::value::Map::new();
        model.insert("hidden", 128);
        let points = [
            point(&[("model.lr", 0.01.into())]),
            point(&[("model", Value::Map(model)), ("width", 2.into()), ("n", 3.0.into())]),
        ];
        let mut s = BasicVariant::new(space).unwrap().num_samples(2).points_to_evaluate(points);
        let all = drain(&mut s);
        assert_eq!(all[0].get::<f64>("model.lr").unwrap(), 0.01);
        assert!([64, 128].contains(&all[0].get::<i64>("model.hidden").unwrap()));
        assert!((0.0..4.0).contains(&all[0].get::<f64>("width").unwrap()));
        assert_eq!(all[1].get::<i64>("model.hidden").unwrap(), 128);
        assert_eq!(all[1].value("width"), Some(&Value::Float(2.0)), "the integer as a float");
        assert_eq!(all[1].value("n"), Some(&Value::Int(3)), "the integral float as an integer");
        let lr = all[1].get::<f64>("model.lr").unwrap();
        assert!((1e-4..=1e-1).contains(&lr), "{lr}");
    }

    /// A point that does not fit is refused, naming the point, the key, the value and what
    /// would fit, from `validate` and from `suggest`.
    #[test]
    fn points_that_do_not_fit_are_refused() {
        let space = bv_space().add("dep", crate::space::dependent(|p| p.get::<i64>("k")));
        let refused = |p: Params| {
            let s =
                BasicVariant::new(space.clone()).unwrap().points_to_evaluate([Params::new(), p]);
            let e = s.validate().unwrap_err();
            let mut again = s.clone();
            assert_eq!(again.suggest(TrialId(0)).unwrap_err(), e, "suggest refuses it too");
            let Error::InvalidConfig { component, setting, value, .. } = &e else {
                panic!("{e:?}")
            };
            assert_eq!((*component, *setting), (NAME, "points_to_evaluate"));
            assert!(value.starts_with("point 1: "), "{value}");
            e.to_string()
        };
        let e = refused(point(&[("x", 1.5.into())]));
        assert!(e.contains("`x` = float 1.5") && e.contains("a value of uniform(0, 1)"), "{e}");
        let e = refused(point(&[("y", 1.into())]));
        assert!(e.contains("`y` = integer 1") && e.contains("x, g, c, k, dep"), "{e}");
        let e = refused(point(&[("g", "z".into())]));
        assert!(e.contains("`g` = string \"z\"") && e.contains("[\"a\", \"b\"]"), "{e}");
        let e = refused(point(&[("c", 3.into())]));
        assert!(e.contains("`c` = integer 3") && e.contains("choice"), "{e}");
        let e = refused(point(&[("k", 6.into())]));
        assert!(e.contains("the constant 5"), "{e}");
        let e = refused(point(&[("dep", 5.into())]));
        assert!(e.contains("computed from the other parameters"), "{e}");
        let e = refused(point(&[("x.y", 0.5.into())]));
        assert!(e.contains("`x.y`"), "{e}");
        // Rewards: one per point.
        let s = BasicVariant::new(bv_space())
            .unwrap()
            .evaluated_rewards([1.0])
            .points_to_evaluate([Params::new(), Params::new()]);
        let e = s.validate().unwrap_err();
        assert!(
            matches!(&e, Error::InvalidConfig { setting: "evaluated_rewards", .. })
                && e.to_string().contains("1 rewards")
                && e.to_string().contains("(2 points)"),
            "{e}"
        );
        // The constant's own value is fine.
        let ok =
            BasicVariant::new(bv_space()).unwrap().points_to_evaluate([point(&[("k", 5.into())])]);
        assert_eq!(ok.validate(), Ok(()));
    }

    /// Evaluated points are known already: none runs and no sample is taken away.
    #[test]
    fn evaluated_points_are_not_run() {
        let points = [point(&[("x", 0.5.into())]), point(&[("x", 0.75.into())])];
        let mut s = BasicVariant::new(bv_space())
            .unwrap()
            .num_samples(2)
            .points_to_evaluate(points)
            .evaluated_rewards([0.1, 0.2]);
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.total(), Some(4));
        let all = drain(&mut s);
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|p| ![0.5, 0.75].contains(&p.get::<f64>("x").unwrap())));
    }

    /// A restored searcher does not suggest the points already suggested again.
    #[test]
    fn points_already_suggested_are_not_suggested_after_a_restore() {
        let make = || {
            let points =
                (0..3).map(|i| point(&[("x", (f64::from(i) / 4.0).into()), ("g", "a".into())]));
            BasicVariant::new(bv_space()).unwrap().num_samples(4).seed(1).points_to_evaluate(points)
        };
        let full = drain(&mut make());
        let mut first = make();
        assert_eq!(full.len(), 5);
        for i in 0..2 {
            assert_eq!(
                first.suggest(TrialId(i)).unwrap(),
                Suggestion::Params(full[i as usize].clone())
            );
        }
        let mut resumed = make();
        resumed.restore_state(first.save_state()).unwrap();
        let rest = drain(&mut resumed);
        assert_eq!(rest, full[2..], "the rest, as if never stopped");
        let xs: Vec<f64> = rest.iter().map(|p| p.get::<f64>("x").unwrap()).collect();
        assert!(!xs.contains(&0.0) && !xs.contains(&0.25), "points 0 and 1 again: {xs:?}");
        assert_eq!(xs[0], 0.5, "point 2 is next");
    }
}
