//! Random and grid search (Ray's `BasicVariantGenerator`): every grid combination is repeated
//! `num_samples` times, with the random domains resampled for each trial. The combinations are
//! enumerated as Ray does: grid axes sorted by key path, the first axis varying fastest; the
//! whole grid is walked once per sample. Deterministic under a seed; `Finished` after the last.

use serde::{Deserialize, Serialize};

use super::{Searcher, SearcherState, Suggestion, wrong_state};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Mode};
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
    state: BasicVariantState,
}

/// The evolving part of a [`BasicVariant`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BasicVariantState {
    rng: SearchRng,
    /// Index of the next variant (sample-major: `sample * grid_size + grid combination`).
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
            state: BasicVariantState { rng: SearchRng::seed_from_u64(0), next: 0 },
        })
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

    /// Total number of trials this searcher will suggest (`None` on overflow).
    pub fn total(&self) -> Option<u64> {
        self.num_samples.checked_mul(self.grid_size)
    }

    /// The space searched.
    pub fn space(&self) -> &SearchSpace {
        &self.space
    }
}

impl Searcher for BasicVariant {
    fn set_metric(&mut self, _metric: &str, _mode: Mode) -> Result<()> {
        Ok(())
    }

    fn suggest(&mut self, _trial: TrialId) -> Result<Suggestion> {
        let total = self.total().unwrap_or(u64::MAX);
        if self.state.next >= total {
            return Ok(Suggestion::Finished);
        }
        let mut combo = self.state.next % self.grid_size.max(1);
        // Value index for each sampled leaf that is a grid axis; first axis varies fastest.
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(self.axes.len());
        for &(leaf, len) in &self.axes {
            let len = len.max(1) as u64;
            picks.push((leaf, (combo % len) as usize));
            combo /= len;
        }
        let params = self.space.resolve(&mut self.state.rng, &mut |i, param, rng| {
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
}
