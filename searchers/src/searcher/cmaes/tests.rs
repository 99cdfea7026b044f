use super::*;
use crate::params::Params;
use crate::space::domain::{choice, loguniform, randint, uniform};

/// `keys` each uniform in [-5, 5).
fn box_space(keys: &[&str]) -> SearchSpace {
    keys.iter().fold(SearchSpace::new(), |s, k| s.add(*k, uniform(-5.0, 5.0).unwrap()))
}

fn searcher(space: SearchSpace, restart: CmaEsRestart) -> CmaEs {
    let mut cmaes = CmaEs::with_space(space).unwrap().restart(restart).seed(7);
    cmaes.set_metric("loss", Mode::Min).unwrap();
    cmaes
}

fn float(params: &Params, key: &str) -> f64 {
    params.get::<f64>(key).unwrap()
}

/// Runs trials `from..to` one after the other, each reporting `f` of its params as `loss`;
/// their params, in order.
fn run(cmaes: &mut CmaEs, from: u64, to: u64, f: impl Fn(&Params) -> f64) -> Vec<Params> {
    let mut seen = Vec::new();
    for id in from..to {
        let Suggestion::Params(params) = cmaes.suggest(TrialId(id)).unwrap() else {
            panic!("CMA-ES always suggests")
        };
        let loss = f(&params);
        cmaes
            .on_trial_complete(TrialId(id), Some(&Metrics::from([("loss".into(), loss)])), false)
            .unwrap();
        seen.push(params);
    }
    seen
}

fn sphere(params: &Params) -> f64 {
    ["x", "y", "z"].iter().map(|k| (float(params, k) - 1.0).powi(2)).sum()
}

#[test]
fn eigen_decomposes_a_symmetric_matrix() {
    let a = [4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 1.0];
    let (values, b) = eigen(&a, 3);
    for i in 0..3 {
        for j in 0..3 {
            let back: f64 = (0..3).map(|k| b[i * 3 + k] * values[k] * b[j * 3 + k]).sum();
            assert!((back - a[i * 3 + j]).abs() < 1e-12, "A[{i}][{j}]: {back}");
            let dot: f64 = (0..3).map(|k| b[k * 3 + i] * b[k * 3 + j]).sum();
            assert!((dot - f64::from(u8::from(i == j))).abs() < 1e-12, "B's columns orthonormal");
        }
    }
}

/// A sphere shifted to (1, 1, 1) over [-5, 5)³: within 1e-6 of its minimum in 400 trials.
#[test]
fn it_minimises_a_shifted_sphere() {
    let mut cmaes = searcher(box_space(&["x", "y", "z"]), CmaEsRestart::None);
    let seen = run(&mut cmaes, 0, 400, sphere);
    let best = seen.iter().map(sphere).fold(f64::INFINITY, f64::min);
    assert!(best < 1e-6, "best {best}");
    // It learned: the last generation's trials are all near the minimum.
    assert!(seen[380..].iter().all(|p| sphere(p) < 1e-3));
}

/// Log and integer domains are searched in their own scale, and every suggestion is a value
/// of its domain; a categorical parameter is drawn at random, each value in turn.
#[test]
fn domains_are_respected_and_searched_in_their_scale() {
    let space = SearchSpace::new()
        .add("lr", loguniform(1e-5, 1.0).unwrap())
        .add("layers", randint(1, 9).unwrap())
        .add("act", choice(["relu", "tanh"]));
    let mut cmaes = searcher(space, CmaEsRestart::None);
    let f = |p: &Params| {
        let lr = p.get::<f64>("lr").unwrap();
        let layers = p.get::<i64>("layers").unwrap();
        (lr.log10() + 3.0).powi(2) + (layers as f64 - 6.0).powi(2)
    };
    let seen = run(&mut cmaes, 0, 300, f);
    for p in &seen {
        let lr = p.get::<f64>("lr").unwrap();
        assert!((1e-5..1.0).contains(&lr), "{lr}");
        assert!((1..9).contains(&p.get::<i64>("layers").unwrap()));
    }
    let acts: std::collections::BTreeSet<String> =
        seen.iter().map(|p| p.get::<String>("act").unwrap()).collect();
    assert_eq!(acts.len(), 2, "both values drawn");
    let last = &seen[299];
    assert_eq!(last.get::<i64>("layers").unwrap(), 6, "{last:?}");
    assert!((last.get::<f64>("lr").unwrap().log10() + 3.0).abs() < 0.1, "{last:?}");
}

/// A search saved mid-way (a generation half told, trials drawn in it) and restored suggests
/// what the uninterrupted one does, bit for bit.
#[test]
fn a_restored_search_goes_on_as_the_uninterrupted_one() {
    let mut first = searcher(box_space(&["x", "y", "z"]), CmaEsRestart::Ipop);
    run(&mut first, 0, 33, sphere);
    let saved = serde_json::to_string(&first.save_state()).unwrap();
    let mut second = searcher(box_space(&["x", "y", "z"]), CmaEsRestart::Ipop);
    second.restore_state(serde_json::from_str(&saved).unwrap()).unwrap();
    assert_eq!(run(&mut first, 33, 80, sphere), run(&mut second, 33, 80, sphere));
    // Another seed draws other points; a state of another width is refused.
    let mut other = searcher(box_space(&["x", "y", "z"]), CmaEsRestart::Ipop).seed(8);
    assert_ne!(
        run(&mut other, 0, 5, sphere),
        run(&mut searcher(box_space(&["x", "y", "z"]), CmaEsRestart::Ipop), 0, 5, sphere)
    );
    let mut narrow = searcher(box_space(&["x"]), CmaEsRestart::Ipop);
    let err = narrow.restore_state(serde_json::from_str(&saved).unwrap()).unwrap_err();
    assert!(err.to_string().contains("parameters"), "{err}");
}

/// A flat objective stops the search once its values stayed flat long enough: IPOP starts
/// again with twice the population; BIPOP's next run is a small one (it has spent nothing in
/// the small regime yet); without restarts it goes on.
#[test]
fn a_flat_search_restarts_as_its_strategy_says() {
    // Two parameters: popsize 6, flat over 10 + 60 / 6 = 20 generations.
    let flat = |_: &Params| 1.0;
    let mut ipop = searcher(box_space(&["x", "y"]), CmaEsRestart::Ipop);
    run(&mut ipop, 0, 6 * 21, flat);
    assert_eq!((ipop.restarts(), ipop.current_popsize()), (1, Some(12)));
    let mut bipop = searcher(box_space(&["x", "y"]), CmaEsRestart::Bipop);
    run(&mut bipop, 0, 6 * 21, flat);
    assert_eq!(bipop.restarts(), 1);
    let small = bipop.state.search.as_ref().unwrap();
    assert!(small.small && small.popsize <= 6 && small.sigma <= 1.0 / 6.0, "{small:?}");
    let mut none = searcher(box_space(&["x", "y"]), CmaEsRestart::None);
    run(&mut none, 0, 6 * 21, flat);
    assert_eq!((none.restarts(), none.current_popsize()), (0, Some(6)));
}

/// Trials of a generation the search has moved on from, and failed ones, teach it nothing.
#[test]
fn late_and_failed_trials_are_not_told() {
    let mut cmaes = searcher(box_space(&["x", "y"]), CmaEsRestart::None);
    let late = TrialId(100);
    assert!(matches!(cmaes.suggest(late).unwrap(), Suggestion::Params(_)));
    run(&mut cmaes, 0, 6, sphere_xy);
    assert_eq!(cmaes.state.search.as_ref().unwrap().generation, 1);
    cmaes.on_trial_complete(late, Some(&Metrics::from([("loss".into(), 0.0)])), false).unwrap();
    assert!(cmaes.state.search.as_ref().unwrap().told.is_empty());
    let failed = TrialId(101);
    cmaes.suggest(failed).unwrap();
    cmaes.on_trial_complete(failed, None, true).unwrap();
    assert!(cmaes.state.search.as_ref().unwrap().told.is_empty());
}

fn sphere_xy(params: &Params) -> f64 {
    ["x", "y"].iter().map(|k| float(params, k).powi(2)).sum()
}

/// What it cannot search is refused before any trial, naming the setting.
#[test]
fn what_it_cannot_search_is_refused() {
    let categories = SearchSpace::new().add("act", choice(["relu", "tanh"]));
    let err = CmaEs::with_space(categories).unwrap_err().to_string();
    assert!(err.contains("param_space") && err.contains("tpe"), "{err}");
    let grid = SearchSpace::new().add("x", crate::space::grid_search([1, 2]));
    assert!(CmaEs::with_space(grid).unwrap_err().to_string().contains("grid_search"));
    let bad = CmaEs::with_space(box_space(&["x"])).unwrap().restart_named("pipop".into());
    let err = bad.validate().unwrap_err().to_string();
    assert!(err.contains("restart") && err.contains("pipop") && err.contains("bipop"), "{err}");
    for bad in [CmaEs::new().popsize(1), CmaEs::new().sigma0(0.0)] {
        let bad = CmaEs { model: CmaEs::with_space(box_space(&["x"])).unwrap().model, ..bad };
        assert!(bad.validate().is_err());
    }
}
