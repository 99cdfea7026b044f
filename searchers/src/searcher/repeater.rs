//! `Repeater`: a wrapper that runs each suggestion of the wrapped searcher `repeat` times (e.g.
//! to average out seed noise) and reports the mean score of the group to it once all repeats
//! have completed (Ray's `Repeater`). The wrapped searcher sees one trial per group, under the
//! id of the group's first trial. Repeats that fail or report no metric are left out of the
//! mean (`nanmean`); a group with no usable result is reported as errored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Searcher, SearcherState, Suggestion, wrong_state};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Mode};
use crate::params::Params;
use crate::trial::TrialId;
use crate::value::Value;

const NAME: &str = "Repeater";

/// The key under which each repeat's index (0-based) is added to its params, as in Ray.
pub const TRIAL_INDEX_KEY: &str = "__trial_index__";

/// Repeats each suggestion of the wrapped searcher.
#[derive(Clone, Debug)]
pub struct Repeater<S> {
    inner: S,
    repeat: usize,
    set_index: bool,
    metric: Option<String>,
    state: RepeaterCore,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct RepeaterCore {
    #[serde(with = "crate::serde_util::map_as_pairs")]
    groups: BTreeMap<TrialId, Group>,
    /// Trial → primary trial of its group.
    #[serde(with = "crate::serde_util::map_as_pairs")]
    members: BTreeMap<TrialId, TrialId>,
    /// Primary of the group still handing out repeats.
    current: Option<TrialId>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Group {
    params: Params,
    handed_out: usize,
    /// One entry per completed repeat: its metric value (None if it failed or had none).
    reported: Vec<Option<f64>>,
}

/// The saved state of a [`Repeater`], including its inner searcher's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepeaterState {
    core: RepeaterCore,
    inner: Box<SearcherState>,
}

impl<S: Searcher> Repeater<S> {
    /// Wrap `inner`; `repeat` must be at least 1.
    pub fn new(inner: S, repeat: usize) -> Result<Self> {
        if repeat == 0 {
            return Err(Error::config(NAME, "repeat", 0, "at least 1"));
        }
        Ok(Self { inner, repeat, set_index: true, metric: None, state: RepeaterCore::default() })
    }

    /// Whether to add [`TRIAL_INDEX_KEY`] to each repeat's params (default on, as in Ray).
    pub fn set_index(mut self, on: bool) -> Self {
        self.set_index = on;
        self
    }

    /// The wrapped searcher.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn hand_out(&mut self, primary: TrialId, trial: TrialId) -> Result<Suggestion> {
        let Some(group) = self.state.groups.get_mut(&primary) else {
            return Err(Error::UnknownTrial { component: NAME, trial: primary });
        };
        let index = group.handed_out;
        group.handed_out += 1;
        let mut params = group.params.clone();
        if self.set_index {
            params.insert(TRIAL_INDEX_KEY, Value::from(index));
        }
        self.state.members.insert(trial, primary);
        if group.handed_out >= self.repeat {
            self.state.current = None;
        }
        Ok(Suggestion::Params(params))
    }
}

impl<S: Searcher> Searcher for Repeater<S> {
    fn validate(&self) -> Result<()> {
        self.inner.validate()
    }

    fn set_space(&mut self, space: &crate::space::SearchSpace) -> Result<()> {
        self.inner.set_space(space)
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        self.inner.set_metric(metric, mode)?;
        self.metric = Some(metric.to_string());
        Ok(())
    }

    fn metric(&self) -> Option<&str> {
        self.metric.as_deref().or_else(|| self.inner.metric())
    }

    /// Each of the inner searcher's suggestions, `repeat` times.
    fn trial_count(&self) -> Option<u64> {
        self.inner.trial_count()?.checked_mul(self.repeat as u64)
    }

    fn suggest(&mut self, trial: TrialId) -> Result<Suggestion> {
        if let Some(primary) = self.state.current {
            return self.hand_out(primary, trial);
        }
        match self.inner.suggest(trial)? {
            Suggestion::Params(params) => {
                let group = Group { params, handed_out: 0, reported: Vec::new() };
                self.state.groups.insert(trial, group);
                self.state.current = Some(trial);
                self.hand_out(trial, trial)
            }
            other => Ok(other),
        }
    }

    fn on_trial_complete(
        &mut self,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        let Some(metric) = Searcher::metric(self).map(String::from) else {
            return Err(Error::NotConfigured { component: NAME });
        };
        let Some(&primary) = self.state.members.get(&trial) else {
            return Err(Error::UnknownTrial { component: NAME, trial });
        };
        let value = if error { None } else { result.and_then(|r| r.get(&metric).copied()) };
        let Some(group) = self.state.groups.get_mut(&primary) else {
            return Err(Error::UnknownTrial { component: NAME, trial: primary });
        };
        group.reported.push(value.filter(|v| !v.is_nan()));
        self.state.members.remove(&trial);
        if group.reported.len() < self.repeat {
            return Ok(());
        }
        let values: Vec<f64> = group.reported.iter().flatten().copied().collect();
        self.state.groups.remove(&primary);
        if values.is_empty() {
            self.inner.on_trial_complete(primary, None, true)
        } else {
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let r = Metrics::from([(metric, mean)]);
            self.inner.on_trial_complete(primary, Some(&r), false)
        }
    }

    fn save_state(&self) -> SearcherState {
        SearcherState::Repeater(RepeaterState {
            core: self.state.clone(),
            inner: Box::new(self.inner.save_state()),
        })
    }

    fn restore_state(&mut self, state: SearcherState) -> Result<()> {
        match state {
            SearcherState::Repeater(s) => {
                self.inner.restore_state(*s.inner)?;
                self.state = s.core;
                Ok(())
            }
            other => Err(wrong_state(NAME, &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::searcher::Tpe;
    use crate::space::SearchSpace;
    use crate::space::domain::uniform;

    #[test]
    fn repeats_and_reports_the_mean() {
        let space = SearchSpace::new().add("x", uniform(0.0, 1.0).unwrap());
        let tpe = Tpe::with_space(space).unwrap();
        let mut r = Repeater::new(tpe, 3).unwrap();
        r.set_metric("loss", Mode::Min).unwrap();
        let mut xs = Vec::new();
        for i in 0..3 {
            let Suggestion::Params(p) = r.suggest(TrialId(i)).unwrap() else { panic!() };
            assert_eq!(p.get::<usize>(TRIAL_INDEX_KEY).unwrap(), usize::try_from(i).unwrap());
            xs.push(p.get::<f64>("x").unwrap());
        }
        assert!(xs.iter().all(|x| *x == xs[0]));
        for (i, loss) in [(0, 1.0), (1, 2.0)] {
            let m = Metrics::from([("loss".to_string(), loss)]);
            r.on_trial_complete(TrialId(i), Some(&m), false).unwrap();
        }
        assert_eq!(r.inner().num_observations(), 0);
        r.on_trial_complete(TrialId(2), None, true).unwrap();
        assert_eq!(r.inner().num_observations(), 1, "mean of the two usable repeats reported");
        let Suggestion::Params(p) = r.suggest(TrialId(3)).unwrap() else { panic!() };
        assert_eq!(p.get::<usize>(TRIAL_INDEX_KEY).unwrap(), 0);
    }
}
