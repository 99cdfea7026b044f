//! `points_to_evaluate` and `evaluated_rewards` (Ray's and Optuna's names), shared by the
//! searchers that take them: parameter sets the user already knows, checked against the space
//! once, when they are given.
//!
//! Without rewards, the points are suggested first, in order, partial ones completed by the
//! searcher as it would complete any suggestion. With rewards (one per point), they are not
//! run: a searcher that learns takes them as results it already has.

use crate::error::{Error, Result};
use crate::params::Params;
use crate::space::SearchSpace;
use crate::value::Value;

/// What one point fixes, one entry per sampled leaf of the space (in `resolve`'s numbering):
/// `None` where the searcher chooses.
pub(crate) type PointValues = Vec<Option<Value>>;

/// A searcher's points and rewards, as given, with the outcome of checking them.
#[derive(Clone, Debug)]
pub(crate) struct Points {
    component: &'static str,
    points: Vec<Params>,
    rewards: Option<Vec<f64>>,
    checked: Result<Vec<PointValues>>,
}

impl Points {
    /// No points.
    pub fn new(component: &'static str) -> Self {
        Self { component, points: Vec::new(), rewards: None, checked: Ok(Vec::new()) }
    }

    /// Replace the points and check them (and the rewards' count) against `space`.
    pub fn set_points(&mut self, space: &SearchSpace, points: Vec<Params>) {
        self.points = points;
        self.recheck(space);
    }

    /// Replace the rewards and check their count.
    pub fn set_rewards(&mut self, space: &SearchSpace, rewards: Vec<f64>) {
        self.rewards = Some(rewards);
        self.recheck(space);
    }

    /// Checks the points again against `space`, the searcher's once it has one.
    pub fn set_space(&mut self, space: &SearchSpace) {
        self.recheck(space);
    }

    fn recheck(&mut self, space: &SearchSpace) {
        let component = self.component;
        let values = self
            .points
            .iter()
            .enumerate()
            .map(|(k, point)| {
                space.point_values(point).map_err(|m| {
                    Error::config(
                        component,
                        "points_to_evaluate",
                        format!("point {k}: `{}` = {}", m.path, m.found),
                        m.expected,
                    )
                })
            })
            .collect::<Result<Vec<_>>>();
        self.checked = match (values, &self.rewards) {
            (Ok(_), Some(rewards)) if rewards.len() != self.points.len() => Err(Error::config(
                component,
                "evaluated_rewards",
                format!("{} rewards", rewards.len()),
                format!(
                    "one reward per point of points_to_evaluate ({} points)",
                    self.points.len()
                ),
            )),
            (values, _) => values,
        };
    }

    /// The first problem with the points or rewards, if any.
    pub fn check(&self) -> Result<()> {
        self.checked.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// The points to run: all of them without rewards, none with.
    pub fn to_run(&self) -> Result<&[PointValues]> {
        let values = self.checked.as_ref().map_err(Clone::clone)?;
        Ok(if self.rewards.is_some() { &[] } else { values })
    }

    /// Whether rewards were given (`evaluated_rewards`).
    pub fn has_rewards(&self) -> bool {
        self.rewards.is_some()
    }

    /// The points with their rewards (empty without rewards).
    pub fn evaluated(&self) -> Result<Vec<(&PointValues, f64)>> {
        let values = self.checked.as_ref().map_err(Clone::clone)?;
        Ok(match &self.rewards {
            Some(rewards) => values.iter().zip(rewards.iter().copied()).collect(),
            None => Vec::new(),
        })
    }
}
