//! Sweep resume: saving a searcher's or scheduler's state (through JSON), restoring it into a
//! freshly built one and continuing gives exactly the sequence of never having stopped.

use std::collections::VecDeque;

use rtune_searchers::{
    Asha, BasicVariant, Bohb, ConcurrencyLimiter, Decision, HyperBand, MedianStopping, Metrics,
    Mode, Params, Pbt, Repeater, SearchSpace, Searcher, SearcherState, Suggestion, Tpe, TrialId,
    TrialScheduler, choice, grid_search, loguniform, randn, uniform,
};

use crate::problems::{mixed10, mixed10_space};
use crate::sim::{LogEntry, curves, run};

#[derive(Debug, PartialEq)]
enum Event {
    Suggested(TrialId, Params),
    NotNow,
    Finished,
}

type Factory<'a> = &'a dyn Fn() -> Box<dyn Searcher>;

/// Three trials in flight; every 7th trial fails; intermediate results before each completion.
fn drive(make: Factory<'_>, steps: usize, swap_at: Option<usize>) -> Vec<Event> {
    let mut s = make();
    let mut live: VecDeque<(TrialId, Params)> = VecDeque::new();
    let mut log = Vec::new();
    let mut next = 0u64;
    for step in 0..steps {
        if Some(step) == swap_at {
            let json = serde_json::to_string(&s.save_state()).unwrap();
            let state: SearcherState = serde_json::from_str(&json).unwrap();
            assert_eq!(state, s.save_state());
            s = make();
            s.restore_state(state).unwrap();
        }
        if live.len() < 3 {
            let id = TrialId(next);
            next += 1;
            match s.suggest(id).unwrap() {
                Suggestion::Params(p) => {
                    log.push(Event::Suggested(id, p.clone()));
                    live.push_back((id, p));
                    continue;
                }
                Suggestion::NotNow => log.push(Event::NotNow),
                Suggestion::Finished => {
                    log.push(Event::Finished);
                    if live.is_empty() {
                        break;
                    }
                }
            }
        }
        if let Some((id, p)) = live.pop_front() {
            let loss =
                if p.contains("opt") { mixed10(&p) } else { p.get::<f64>("x").unwrap_or(0.0) };
            // (BOHB reads the budget.)
            let r = Metrics::from([
                ("loss".to_string(), loss),
                ("training_iteration".to_string(), 1.0),
            ]);
            s.on_trial_result(id, &r).unwrap();
            let error = id.0 % 7 == 6;
            s.on_trial_complete(id, if error { None } else { Some(&r) }, error).unwrap();
        }
    }
    log
}

fn assert_resumes(make: Factory<'_>, steps: usize) {
    let full = drive(make, steps, None);
    for at in [1, steps / 3, steps / 2 + 1] {
        assert_eq!(drive(make, steps, Some(at)), full, "resumed at step {at}");
    }
}

fn tpe() -> Tpe {
    Tpe::with_space(mixed10_space()).unwrap().metric("loss").mode(Mode::Min).seed(9)
}

#[test]
fn basic_variant_resumes_exactly() {
    let space = SearchSpace::new()
        .add("x", uniform(0.0, 1.0).unwrap())
        .add("g", grid_search(["a", "b", "c"]))
        .add("n", randn(0.0, 1.0).unwrap())
        .add("c", choice([1, 2]));
    let make = || -> Box<dyn Searcher> {
        Box::new(BasicVariant::new(space.clone()).unwrap().num_samples(5).seed(2))
    };
    assert_resumes(&make, 40);
}

#[test]
fn tpe_resumes_exactly() {
    assert_resumes(&|| Box::new(tpe()), 90);
}

#[test]
fn bohb_resumes_exactly_with_its_model() {
    let bohb = || Bohb::with_space(mixed10_space()).unwrap().metric("loss").mode(Mode::Min).seed(4);
    assert_resumes(&|| Box::new(bohb()), 120);
    // Its model is in use well before the end (after 22 observations for 10 parameters).
    let mut b = bohb();
    for i in 0..30 {
        let Suggestion::Params(p) = b.suggest(TrialId(i)).unwrap() else { panic!() };
        let r =
            Metrics::from([("loss".to_string(), mixed10(&p)), ("training_iteration".into(), 1.0)]);
        b.on_trial_complete(TrialId(i), Some(&r), false).unwrap();
    }
    assert_eq!(b.model_budget(), Some(1.0), "{:?}", b.observations());
}

#[test]
fn wrappers_resume_exactly() {
    assert_resumes(&|| Box::new(ConcurrencyLimiter::new(tpe(), 2).unwrap()), 90);
    assert_resumes(&|| Box::new(Repeater::new(tpe(), 2).unwrap()), 90);
    assert_resumes(
        &|| {
            Box::new(
                Repeater::new(ConcurrencyLimiter::new(tpe(), 2).unwrap().batch(true), 3).unwrap(),
            )
        },
        90,
    );
}

#[test]
fn restoring_the_wrong_kind_is_a_typed_error() {
    let mut t = tpe();
    let other = BasicVariant::new(mixed10_space()).unwrap().save_state();
    let e = t.restore_state(other).unwrap_err();
    assert!(e.to_string().contains("basic_variant"), "{e}");
}

fn assert_scheduler_resumes(make: &dyn Fn() -> Box<dyn TrialScheduler>) {
    let c = curves(40, 30, 5);
    let full = run(&c, 30, 4, make().as_mut(), None);
    assert!(full.log.len() > 100);
    let acted = |want: fn(&Decision) -> bool| {
        full.log.iter().any(|e| matches!(e, LogEntry::Decided(_, _, d) if want(d)))
    };
    assert!(acted(|d| *d != Decision::Continue), "the scheduler never acted");
    for at in [1, 37, full.log.len() / 2] {
        let resumed = run(&c, 30, 4, make().as_mut(), Some((at, make)));
        assert_eq!(resumed.log, full.log, "resumed after {at} decisions");
    }
}

#[test]
fn schedulers_resume_exactly() {
    assert_scheduler_resumes(&|| {
        Box::new(
            Asha::new()
                .metric("acc")
                .mode(Mode::Max)
                .max_t(30)
                .reduction_factor(3)
                .brackets(3)
                .seed(1),
        )
    });
    assert_scheduler_resumes(&|| {
        Box::new(HyperBand::new().metric("acc").mode(Mode::Max).max_t(27))
    });
    assert_scheduler_resumes(&|| {
        Box::new(
            MedianStopping::new()
                .metric("acc")
                .mode(Mode::Max)
                .time_attr("training_iteration")
                .grace_period(3)
                .hard_stop(false),
        )
    });
    assert_scheduler_resumes(&|| {
        let mutations = SearchSpace::new()
            .add("lr", loguniform(1e-4, 1e-1).unwrap())
            .add("batch", vec![16, 32, 64]);
        Box::new(
            Pbt::new()
                .metric("acc")
                .mode(Mode::Max)
                .time_attr("training_iteration")
                .perturbation_interval(4)
                .hyperparam_mutations(mutations)
                .seed(3),
        )
    });
}
