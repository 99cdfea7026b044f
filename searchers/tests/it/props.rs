//! Property tests: samples inside their domains and on their q grids (and no panic on any
//! domain at all), determinism under a seed, serde round trips of spaces, params and states,
//! ASHA's rung guarantee and HyperBand's bracket sizes.

use proptest::prelude::*;
use rtune_searchers::{
    Asha, BasicVariant, Decision, Domain, HyperBand, Map, Metrics, Mode, Param, Params, SearchRng,
    SearchSpace, Searcher, SearcherState, Suggestion, Tpe, TrialId, TrialScheduler, TrialStatus,
    TrialTable, Value, grid_search,
};

use crate::sim::{curves, run};

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -1e4..1e4f64,
        2 => 1e-6..10.0f64,
        1 => Just(0.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => prop::num::f64::ANY,
    ]
}

fn any_i64() -> impl Strategy<Value = i64> {
    prop_oneof![4 => -1000..1000i64, 2 => 1..100_000i64, 1 => any::<i64>(), 1 => Just(i64::MAX), 1 => Just(i64::MIN)]
}

fn small_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        (-1e6..1e6f64).prop_map(Value::Float),
        "[a-z]{0,6}".prop_map(Value::Str),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    small_value().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::List),
            prop::collection::vec(("[a-z]{1,4}", inner), 0..4).prop_map(|kv| {
                let mut m = Map::new();
                for (k, v) in kv {
                    m.insert(k, v);
                }
                Value::Map(m)
            }),
        ]
    })
}

/// Any domain, valid or not.
fn any_domain() -> impl Strategy<Value = Domain> {
    let q = prop_oneof![Just(0.1), Just(0.25), Just(1.0), Just(5.0), any_f64()];
    let qi = prop_oneof![1..20i64, any_i64()];
    prop_oneof![
        (any_f64(), any_f64()).prop_map(|(low, high)| Domain::Uniform { low, high }),
        (any_f64(), any_f64(), q.clone()).prop_map(|(low, high, q)| Domain::QUniform {
            low,
            high,
            q
        }),
        (any_f64(), any_f64(), any_f64()).prop_map(|(low, high, base)| Domain::LogUniform {
            low,
            high,
            base
        }),
        (any_f64(), any_f64(), q.clone(), any_f64())
            .prop_map(|(low, high, q, base)| Domain::QLogUniform { low, high, q, base }),
        (any_f64(), any_f64()).prop_map(|(mean, sd)| Domain::Randn { mean, sd }),
        (any_f64(), any_f64(), q).prop_map(|(mean, sd, q)| Domain::QRandn { mean, sd, q }),
        (any_i64(), any_i64()).prop_map(|(low, high)| Domain::RandInt { low, high }),
        (any_i64(), any_i64(), qi.clone()).prop_map(|(low, high, q)| Domain::QRandInt {
            low,
            high,
            q
        }),
        (any_i64(), any_i64()).prop_map(|(low, high)| Domain::LogRandInt { low, high, base: 10.0 }),
        (any_i64(), any_i64(), qi).prop_map(|(low, high, q)| Domain::QLogRandInt {
            low,
            high,
            q,
            base: 2.0
        }),
        prop::collection::vec(small_value(), 0..5).prop_map(Domain::Choice),
    ]
}

/// Valid domains, built through the sweep-file constructors' ranges.
fn valid_domain() -> impl Strategy<Value = Domain> {
    let qf = prop_oneof![Just(0.1), Just(0.25), Just(0.5), Just(1.0), Just(2.0), Just(5.0)];
    prop_oneof![
        (-1e3..1e3f64, 1e-3..1e3f64).prop_map(|(l, w)| Domain::Uniform { low: l, high: l + w }),
        (qf.clone(), -50..50i32, 1..40i32).prop_map(|(q, k, n)| Domain::QUniform {
            low: f64::from(k) * q,
            high: f64::from(k + n) * q,
            q
        }),
        (1e-6..1e2f64, 1.01..1e6f64).prop_map(|(l, r)| Domain::LogUniform {
            low: l,
            high: l * r,
            base: 10.0
        }),
        (qf.clone(), 1..50i32, 1..400i32).prop_map(|(q, k, n)| Domain::QLogUniform {
            low: f64::from(k) * q,
            high: f64::from(k + n) * q,
            q,
            base: 10.0
        }),
        (-1e3..1e3f64, 1e-3..1e3f64).prop_map(|(mean, sd)| Domain::Randn { mean, sd }),
        (-1e3..1e3f64, 1e-3..1e3f64, qf).prop_map(|(mean, sd, q)| Domain::QRandn { mean, sd, q }),
        (any_i64(), 1..1_000_000i64)
            .prop_map(|(l, w)| Domain::RandInt { low: l, high: l.saturating_add(w) })
            .prop_filter("valid", |d| d.validate().is_ok()),
        (-10_000..10_000i64, 1..10_000i64, 1..50i64)
            .prop_map(|(l, w, q)| Domain::QRandInt { low: l, high: l + w, q })
            .prop_filter("valid", |d| d.validate().is_ok()),
        (1..10_000i64, 1..100_000i64).prop_map(|(l, w)| Domain::LogRandInt {
            low: l,
            high: l + w,
            base: 10.0
        }),
        (1..10_000i64, 1..100_000i64, 1..50i64)
            .prop_map(|(l, w, q)| Domain::QLogRandInt { low: l, high: l + w, q, base: 10.0 })
            .prop_filter("valid", |d| d.validate().is_ok()),
        prop::collection::vec(small_value(), 1..6).prop_map(Domain::Choice),
    ]
}

/// Spaces without dependent values (those cannot be serialised).
fn space() -> impl Strategy<Value = SearchSpace> {
    let leaf = prop_oneof![
        3 => valid_domain().prop_map(Param::Sample),
        1 => value().prop_map(Param::Const),
        1 => prop::collection::vec(small_value(), 1..4).prop_map(Param::Grid),
    ];
    let flat = prop::collection::vec(leaf, 1..6).prop_map(|ps| {
        ps.into_iter().enumerate().fold(SearchSpace::new(), |s, (i, p)| s.add(format!("k{i}"), p))
    });
    flat.prop_recursive(2, 24, 3, |inner| {
        (inner.clone(), inner).prop_map(|(a, b)| SearchSpace::new().add("a", a).add("x", b))
    })
}

fn sample_all(space: &SearchSpace, seed: u64, n: u64) -> Vec<Params> {
    let mut s = BasicVariant::new(space.clone()).unwrap().num_samples(n).seed(seed);
    let mut out = Vec::new();
    while let Suggestion::Params(p) = s.suggest(TrialId(out.len() as u64)).unwrap() {
        out.push(p);
        if out.len() >= 200 {
            break;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn no_domain_panics_and_valid_samples_are_inside(d in any_domain(), seed in any::<u64>()) {
        let valid = d.validate().is_ok();
        let _ = d.describe();
        let _ = d.to_value();
        let mut rng = SearchRng::seed_from_u64(seed);
        for _ in 0..20 {
            let v = d.sample(&mut rng);
            if valid {
                prop_assert!(d.contains(&v), "{} gave {:?}", d.describe(), v);
            }
        }
    }

    #[test]
    fn valid_domains_sample_inside_bounds_and_on_the_grid(d in valid_domain(), seed in any::<u64>()) {
        prop_assert!(d.validate().is_ok(), "{}", d.describe());
        let mut rng = SearchRng::seed_from_u64(seed);
        for _ in 0..50 {
            let v = d.sample(&mut rng);
            prop_assert!(d.contains(&v), "{} gave {:?}", d.describe(), v);
        }
    }

    #[test]
    fn same_seed_same_sequence(s in space(), seed in any::<u64>()) {
        prop_assert_eq!(sample_all(&s, seed, 5), sample_all(&s, seed, 5));
    }

    #[test]
    fn spaces_round_trip_through_json(s in space()) {
        let json = serde_json::to_string(&s).unwrap();
        let back: SearchSpace = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, s);
    }

    #[test]
    fn params_round_trip_through_json(v in value()) {
        let mut p = Params::new();
        p.insert("root", v);
        let json = serde_json::to_string(&p).unwrap();
        let back: Params = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, p);
    }

    #[test]
    fn tpe_state_round_trips_and_is_deterministic(
        losses in prop::collection::vec(prop_oneof![-10.0..10.0f64, Just(f64::NAN), Just(f64::INFINITY)], 12..30),
        seed in any::<u64>(),
    ) {
        let make = || {
            let s = SearchSpace::new()
                .add("x", Domain::Uniform { low: 0.0, high: 1.0 })
                .add("k", Domain::QRandInt { low: 0, high: 100, q: 5 })
                .add("c", Domain::Choice(vec![Value::from("a"), Value::from("b")]));
            Tpe::with_space(s).unwrap().metric("loss").mode(Mode::Min).seed(seed).n_startup_trials(5)
        };
        let (mut a, mut b) = (make(), make());
        for (i, loss) in losses.iter().enumerate() {
            let id = TrialId(i as u64);
            prop_assert_eq!(a.suggest(id).unwrap(), b.suggest(id).unwrap());
            let r = Metrics::from([("loss".to_string(), *loss)]);
            a.on_trial_complete(id, Some(&r), false).unwrap();
            b.on_trial_complete(id, Some(&r), false).unwrap();
        }
        let state = a.save_state();
        let back: SearcherState = serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        prop_assert_eq!(back, state);
    }

    /// A trial reaching a rung with fewer than n/rf of the n numbers already recorded there
    /// better than its own is never stopped; a NaN is stopped exactly when a number is
    /// recorded there (NaNs are recorded, but never counted).
    #[test]
    fn asha_never_stops_the_top_of_a_rung(
        rf in 2..5u32,
        reports in prop::collection::vec((0..30u64, 1..40u32, prop_oneof![4 => -1.0..1.0f64, 1 => Just(f64::NAN)]), 1..300),
    ) {
        let rf_f = f64::from(rf);
        let mut asha = Asha::new().metric("m").mode(Mode::Max).max_t(64).reduction_factor(rf_f);
        let view = TrialTable::new();
        let milestones: Vec<f64> = asha.milestones().unwrap().remove(0);
        let mut mirror: Vec<Vec<(u64, f64)>> = vec![Vec::new(); milestones.len()];
        let mut last_t = std::collections::BTreeMap::new();
        let mut stopped = std::collections::BTreeSet::new();
        for (trial, dt, value) in reports {
            if stopped.contains(&trial) {
                continue;
            }
            let id = TrialId(trial);
            if !last_t.contains_key(&trial) {
                asha.on_trial_add(&view, id).unwrap();
            }
            let t = last_t.get(&trial).copied().unwrap_or(0) + dt;
            last_t.insert(trial, t);
            let tf = f64::from(t);
            let score = value;
            let r = Metrics::from([("training_iteration".to_string(), tf), ("m".to_string(), value)]);
            let d = asha.on_trial_result(&view, id, &r).unwrap();
            if tf >= 64.0 {
                prop_assert_eq!(&d, &Decision::Stop);
                stopped.insert(trial);
                continue;
            }
            // Which rung records it: the highest reached where it is not yet recorded.
            let rung = milestones.iter().position(|m| tf >= *m)
                .and_then(|top| (top..milestones.len()).find(|k| !mirror[*k].iter().any(|(id, _)| *id == trial)));
            if let Some(k) = rung {
                let n = mirror[k].iter().filter(|(_, s)| !s.is_nan()).count();
                if score.is_nan() {
                    prop_assert_eq!(&d, if n > 0 { &Decision::Stop } else { &Decision::Continue });
                } else {
                    let better = mirror[k].iter().filter(|(_, s)| *s > score).count();
                    if (better as f64) * rf_f < n as f64 {
                        prop_assert_ne!(&d, &Decision::Stop, "better {} of {}", better, n);
                    }
                }
                mirror[k].push((trial, score));
            } else {
                prop_assert_eq!(&d, &Decision::Continue);
            }
            if d == Decision::Stop {
                stopped.insert(trial);
            }
        }
    }

    /// Brackets are filled with `n₀ = ceil((s_max+1)/(s+1)·η^s)` trials in order `s = 0, 1, ..`
    /// (skipping `r₀ = 0`), and each round keeps `ceil(n/η)` of the bracket's trials.
    #[test]
    fn hyperband_bracket_sizes(max_t in 3..60u64, eta in 2..5u32, n_trials in 1..120usize, seed in 0..1000u64) {
        let eta_f = f64::from(eta);
        let mut hb = HyperBand::new().metric("acc").mode(Mode::Max).max_t(max_t as f64).reduction_factor(eta_f);
        let s_max_1 = ((max_t as f64).ln() / eta_f.ln()).round() as usize + 1;
        prop_assert_eq!(hb.brackets_per_band(), s_max_1);
        let shapes = hb.bracket_shapes().unwrap();
        for (s, (n0, r0)) in shapes.iter().enumerate() {
            let want = (s_max_1 as f64 / (s as f64 + 1.0) * eta_f.powi(s as i32)).ceil() as usize;
            prop_assert_eq!(*n0, want);
            prop_assert_eq!(*r0, (max_t as f64 / eta_f.powi(s as i32)).floor());
        }
        let c = curves(n_trials, max_t, seed);
        let out = run(&c, max_t, 3, &mut hb, None);
        let fill = hb.bracket_fill();
        prop_assert_eq!(fill.iter().map(|f| f.2).sum::<usize>(), n_trials);
        let mut first = 0;
        let mut expected_s = Vec::new();
        let mut slot = 0;
        while expected_s.len() < fill.len() {
            let s = slot % s_max_1;
            if shapes[s].1 >= 1.0 { expected_s.push(s); }
            slot += 1;
        }
        for (b, (s, n0, added)) in fill.iter().enumerate() {
            prop_assert_eq!(*s, expected_s[b]);
            prop_assert_eq!(*n0, shapes[*s].0);
            if b + 1 < fill.len() { prop_assert_eq!(added, n0); }
            // Survivors of each round: trials of this bracket that trained past its milestone.
            let epochs: Vec<u64> = out.last[first..first + added].iter().map(|(_, e)| *e).collect();
            let (mut n, mut r) = (*n0, shapes[*s].1);
            for round in 0..*s {
                n = (n as f64 / eta_f).ceil() as usize;
                // The last round always runs to max_t.
                let next_r = if round + 1 == *s { max_t as f64 } else { (r * eta_f).min(max_t as f64) };
                let past = epochs.iter().filter(|e| **e as f64 >= next_r).count();
                prop_assert_eq!(past, n.min(*added), "bracket {} round to {}", b, next_r);
                r = next_r;
            }
            first += added;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// TPE's model-based suggestions stay inside their domains and on their grids.
    #[test]
    fn tpe_samples_inside_domains(
        domains in prop::collection::vec(valid_domain(), 1..5),
        losses in prop::collection::vec(-5.0..5.0f64, 15..25),
        seed in any::<u64>(),
    ) {
        let space = domains.iter().enumerate().fold(SearchSpace::new(), |s, (i, d)| s.add(format!("p{i}"), d.clone()));
        let mut t = Tpe::with_space(space).unwrap().metric("loss").mode(Mode::Max).seed(seed).n_startup_trials(5);
        for (i, loss) in losses.iter().enumerate() {
            let id = TrialId(i as u64);
            let Suggestion::Params(p) = t.suggest(id).unwrap() else { panic!("no params") };
            for (k, d) in domains.iter().enumerate() {
                let v = p.value(&format!("p{k}")).unwrap();
                prop_assert!(d.contains(v), "{} gave {:?}", d.describe(), v);
            }
            // Keep some trials running to exercise the constant liar.
            if i % 4 != 3 {
                let r = Metrics::from([("loss".to_string(), *loss)]);
                t.on_trial_complete(id, Some(&r), false).unwrap();
            }
        }
    }

    /// Schedulers never panic, whatever their settings and results (errors are fine).
    #[test]
    fn schedulers_do_not_panic(
        max_t in any_f64(), grace in any_f64(), rf in any_f64(), brackets in 0..4usize,
        reports in prop::collection::vec((0..6u64, any_f64(), any_f64()), 0..60),
    ) {
        // A table that follows the stream: trials are added as they first report, carry their
        // latest result, and one is paused, as a controller's would.
        let mut view = TrialTable::new();
        for i in 0..6 {
            view.add(TrialId(i), Params::new().with("x", i as f64));
            view.set_status(TrialId(i), TrialStatus::Running);
        }
        view.set_status(TrialId(5), TrialStatus::Paused);
        let mut scheds: Vec<Box<dyn TrialScheduler>> = vec![
            Box::new(Asha::new().metric("m").mode(Mode::Min).max_t(max_t).grace_period(grace).reduction_factor(rf).brackets(brackets)),
            Box::new(HyperBand::new().metric("m").mode(Mode::Max).max_t(max_t).reduction_factor(rf)),
            Box::new(rtune_searchers::MedianStopping::new().metric("m").mode(Mode::Max).grace_period(grace).time_attr("training_iteration")),
            Box::new(rtune_searchers::Pbt::new().metric("m").mode(Mode::Max).time_attr("training_iteration")
                .perturbation_interval(grace).burn_in_period(rf).seed(7)
                .hyperparam_mutations(SearchSpace::new().add("x", Domain::Uniform { low: 0.0, high: 6.0 }))),
        ];
        for s in &mut scheds {
            for i in 0..6 {
                let _ = s.on_trial_add(&view, TrialId(i));
            }
            for (trial, t, v) in &reports {
                let r = Metrics::from([("training_iteration".to_string(), *t), ("m".to_string(), *v)]);
                view.set_result(TrialId(*trial), r.clone());
                let _ = s.on_trial_result(&view, TrialId(*trial), &r);
                let _ = s.take_stop_requests();
                let _ = s.choose_trial_to_run(&view);
            }
            let _ = s.on_trial_complete(&view, TrialId(0), None, true);
            let _ = s.save_state();
        }
    }
}

#[test]
fn grid_searches_cover_every_value() {
    let space =
        SearchSpace::new().add("a", grid_search([1, 2, 3])).add("b", grid_search(["x", "y"]));
    let all = sample_all(&space, 0, 2);
    assert_eq!(all.len(), 12);
    for a in 1..=3i64 {
        for b in ["x", "y"] {
            let n = all
                .iter()
                .filter(|p| p.get::<i64>("a").unwrap() == a && p.get::<String>("b").unwrap() == b)
                .count();
            assert_eq!(n, 2);
        }
    }
}
