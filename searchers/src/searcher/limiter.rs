//! `ConcurrencyLimiter`: a wrapper that keeps at most `max_concurrent` suggested trials live at
//! once by answering `NotNow` (Ray's `ConcurrencyLimiter`). With `batch`, it waits until the
//! whole batch of `max_concurrent` trials has completed before suggesting the next batch.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Searcher, SearcherState, Suggestion, wrong_state};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Mode};
use crate::trial::TrialId;

const NAME: &str = "ConcurrencyLimiter";

/// Limits the number of live suggestions of the wrapped searcher.
#[derive(Clone, Debug)]
pub struct ConcurrencyLimiter<S> {
    inner: S,
    max_concurrent: usize,
    batch: bool,
    state: LimiterCore,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct LimiterCore {
    live: BTreeSet<TrialId>,
    /// In batch mode: suggestions handed out in the current batch.
    batch_started: usize,
}

/// The saved state of a [`ConcurrencyLimiter`], including its inner searcher's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimiterState {
    live: BTreeSet<TrialId>,
    batch_started: usize,
    inner: Box<SearcherState>,
}

impl<S: Searcher> ConcurrencyLimiter<S> {
    /// Wrap `inner`; `max_concurrent` must be at least 1.
    pub fn new(inner: S, max_concurrent: usize) -> Result<Self> {
        if max_concurrent == 0 {
            return Err(Error::config(NAME, "max_concurrent", 0, "at least 1"));
        }
        Ok(Self { inner, max_concurrent, batch: false, state: LimiterCore::default() })
    }

    /// Batch mode: suggest `max_concurrent` trials, then wait until all have completed.
    pub fn batch(mut self, on: bool) -> Self {
        self.batch = on;
        self
    }

    /// The wrapped searcher.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Number of live (suggested, not completed) trials.
    pub fn num_live(&self) -> usize {
        self.state.live.len()
    }
}

impl<S: Searcher> Searcher for ConcurrencyLimiter<S> {
    fn validate(&self) -> Result<()> {
        self.inner.validate()
    }

    fn set_space(&mut self, space: &crate::space::SearchSpace) -> Result<()> {
        self.inner.set_space(space)
    }

    fn set_metric(&mut self, metric: &str, mode: Mode) -> Result<()> {
        self.inner.set_metric(metric, mode)
    }

    fn set_objectives(&mut self, objectives: &[crate::metrics::Objective]) -> Result<()> {
        self.inner.set_objectives(objectives)
    }

    fn set_constraints(&mut self, constraints: &[String]) -> Result<()> {
        self.inner.set_constraints(constraints)
    }

    fn trial_count(&self) -> Option<u64> {
        self.inner.trial_count()
    }

    fn metric(&self) -> Option<&str> {
        self.inner.metric()
    }

    fn suggest(&mut self, trial: TrialId) -> Result<Suggestion> {
        if self.state.live.len() >= self.max_concurrent {
            return Ok(Suggestion::NotNow);
        }
        if self.batch && self.state.batch_started >= self.max_concurrent {
            if !self.state.live.is_empty() {
                return Ok(Suggestion::NotNow);
            }
            self.state.batch_started = 0;
        }
        let s = self.inner.suggest(trial)?;
        if let Suggestion::Params(_) = s {
            self.state.live.insert(trial);
            self.state.batch_started += 1;
        }
        Ok(s)
    }

    fn on_trial_result(&mut self, trial: TrialId, result: &Metrics) -> Result<()> {
        if self.state.live.contains(&trial) {
            self.inner.on_trial_result(trial, result)
        } else {
            Ok(())
        }
    }

    fn on_trial_complete(
        &mut self,
        trial: TrialId,
        result: Option<&Metrics>,
        error: bool,
    ) -> Result<()> {
        if !self.state.live.contains(&trial) {
            return Ok(());
        }
        self.inner.on_trial_complete(trial, result, error)?;
        self.state.live.remove(&trial);
        Ok(())
    }

    fn save_state(&self) -> SearcherState {
        SearcherState::ConcurrencyLimiter(LimiterState {
            live: self.state.live.clone(),
            batch_started: self.state.batch_started,
            inner: Box::new(self.inner.save_state()),
        })
    }

    fn restore_state(&mut self, state: SearcherState) -> Result<()> {
        match state {
            SearcherState::ConcurrencyLimiter(s) => {
                self.inner.restore_state(*s.inner)?;
                self.state = LimiterCore { live: s.live, batch_started: s.batch_started };
                Ok(())
            }
            other => Err(wrong_state(NAME, &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::searcher::BasicVariant;
    use crate::space::SearchSpace;
    use crate::space::domain::uniform;

    fn inner() -> BasicVariant {
        let space = SearchSpace::new().add("x", uniform(0.0, 1.0).unwrap());
        BasicVariant::new(space).unwrap().num_samples(10)
    }

    #[test]
    fn limits_live_trials() {
        let mut s = ConcurrencyLimiter::new(inner(), 2).unwrap();
        assert!(matches!(s.suggest(TrialId(0)).unwrap(), Suggestion::Params(_)));
        assert!(matches!(s.suggest(TrialId(1)).unwrap(), Suggestion::Params(_)));
        assert_eq!(s.suggest(TrialId(2)).unwrap(), Suggestion::NotNow);
        s.on_trial_complete(TrialId(0), None, false).unwrap();
        assert!(matches!(s.suggest(TrialId(2)).unwrap(), Suggestion::Params(_)));
        assert!(ConcurrencyLimiter::new(inner(), 0).is_err());
    }

    #[test]
    fn batch_waits_for_the_whole_batch() {
        let mut s = ConcurrencyLimiter::new(inner(), 2).unwrap().batch(true);
        s.suggest(TrialId(0)).unwrap();
        s.suggest(TrialId(1)).unwrap();
        s.on_trial_complete(TrialId(0), None, false).unwrap();
        assert_eq!(s.suggest(TrialId(2)).unwrap(), Suggestion::NotNow);
        s.on_trial_complete(TrialId(1), None, false).unwrap();
        assert!(matches!(s.suggest(TrialId(2)).unwrap(), Suggestion::Params(_)));
    }
}
