//! The space a model-based searcher samples (TPE's, and BOHB's and NSGA-II's, which share it):
//! its sampled parameters as a model sees them, and the searcher's own space or the Tuner's.

use super::Leaf;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::rng::SearchRng;
use crate::space::domain::Domain;
use crate::space::{Param, SearchSpace};
use crate::value::Value;

/// The sampled parameters of `space` as a model sees them, with their domains (for random
/// draws); a `grid_search` is refused for `searcher` (a grid promises every value, a model
/// does not).
pub(crate) fn model_leaves(
    space: &SearchSpace,
    searcher: &'static str,
) -> Result<(Vec<Leaf>, Vec<Domain>)> {
    space.validate()?;
    let mut leaves = Vec::new();
    let mut domains = Vec::new();
    for leaf in space.leaves() {
        match leaf.param {
            Param::Sample(d) => {
                leaves.push(Leaf::from_domain(d));
                domains.push(d.clone());
            }
            Param::Grid(_) => {
                return Err(Error::Unsupported {
                    path: leaf.dotted(),
                    searcher,
                    what: "grid_search",
                    hint: "use `choice` for a categorical parameter, or random search (the default) for a grid",
                });
            }
            _ => {}
        }
    }
    Ok((leaves, domains))
}

/// The space a model-based searcher (TPE, BOHB, NSGA-II) samples: its own (`with_space`) or the
/// Tuner's ([`Searcher::set_space`]), with its sampled leaves and their domains; empty until it
/// is given one.
#[derive(Debug, Clone)]
pub(crate) struct ModelSpace {
    pub space: SearchSpace,
    pub leaves: Vec<Leaf>,
    pub domains: Vec<Domain>,
    searcher: &'static str,
    given: bool,
}

impl ModelSpace {
    /// No space yet, for `searcher` (its name, for errors).
    pub fn none(searcher: &'static str) -> Self {
        let (leaves, domains) = (Vec::new(), Vec::new());
        ModelSpace { space: SearchSpace::new(), leaves, domains, searcher, given: false }
    }

    /// Takes `space` unless it has one already (a searcher's own stays); whether it took it.
    /// A space it cannot model (a `grid_search`) is refused.
    pub fn offer(&mut self, space: &SearchSpace) -> Result<bool> {
        if self.given {
            return Ok(false);
        }
        (self.leaves, self.domains) = model_leaves(space, self.searcher)?;
        self.space = space.clone();
        self.given = true;
        Ok(true)
    }

    /// The params of a trial whose sampled leaves take `values`, in the leaves' order (its
    /// dependent values drawn from `rng`).
    pub fn params(&self, values: &[Value], rng: &mut SearchRng) -> Result<Params> {
        self.space.resolve(rng, &mut |i, _, _| Ok(values.get(i).cloned().unwrap_or(Value::Null)))
    }

    /// An error unless it has a space.
    pub fn check(&self) -> Result<()> {
        if self.given { Ok(()) } else { Err(Error::NoSpace { component: self.searcher }) }
    }
}
