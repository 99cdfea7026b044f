//! Property tests: random sequences of node and request operations never over-commit, keep gangs
//! whole, respect strict strategies, and never deadlock.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::Strategy;
use super::*;
use proptest::strategy::Strategy as _;

#[derive(Debug, Clone)]
enum Op {
    AddNode {
        cpus: f64,
        gpus: u32,
        x: f64,
    },
    Request {
        bundles: Vec<Resources>,
        strategy: Strategy,
    },
    Cancel(usize),
    Release(usize),
    Schedule,
    Kill(usize),
    /// A head's node death: the hit groups drain instead of being released.
    KillKeeping(usize),
    Rejoin {
        node: usize,
        cpus: f64,
        gpus: u32,
    },
}

fn strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
    prop_oneof![
        Just(Strategy::Pack),
        Just(Strategy::Spread),
        Just(Strategy::StrictPack),
        Just(Strategy::StrictSpread),
    ]
}

fn bundle() -> impl proptest::strategy::Strategy<Value = Resources> {
    (
        prop_oneof![Just(0.5), Just(1.0), Just(1.5), Just(2.0), Just(3.0)],
        prop_oneof![4 => Just(0.0), 1 => Just(0.25), 1 => Just(1.0 / 3.0), 1 => Just(0.5), 1 => Just(0.75), 1 => Just(1.0), 1 => Just(2.0)],
        prop_oneof![5 => Just(0.0), 1 => Just(1.0)],
    )
        .prop_map(|(c, g, x)| Resources::new().cpu(c).gpu(g).custom("x", x))
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    prop_oneof![
        1 => (prop_oneof![Just(2.0), Just(4.0), Just(6.5), Just(8.0)], 0u32..4, prop_oneof![Just(0.0), Just(2.0)])
            .prop_map(|(cpus, gpus, x)| Op::AddNode { cpus, gpus, x }),
        8 => (proptest::collection::vec(bundle(), 1..5), strategy())
            .prop_map(|(bundles, strategy)| Op::Request { bundles, strategy }),
        1 => any::<usize>().prop_map(Op::Cancel),
        2 => any::<usize>().prop_map(Op::Release),
        4 => Just(Op::Schedule),
        1 => any::<usize>().prop_map(Op::Kill),
        1 => any::<usize>().prop_map(Op::KillKeeping),
        1 => (any::<usize>(), prop_oneof![Just(2.0), Just(8.0)], 0u32..3)
            .prop_map(|(node, cpus, gpus)| Op::Rejoin { node, cpus, gpus }),
    ]
}

/// What the test remembers: the original request of every group it was given.
#[derive(Default)]
struct Model {
    nodes: Vec<NodeId>,
    requests: BTreeMap<PgId, PlacementRequest>,
}

fn pick<T: Copy>(v: &[T], i: usize) -> Option<T> {
    if v.is_empty() { None } else { Some(v[i % v.len()]) }
}

/// Checks through the public API what `check_invariants` checks inside.
fn check_status(
    pool: &Pool,
    model: &Model,
    fresh: &[Reservation],
) -> std::result::Result<(), TestCaseError> {
    pool.check_invariants().map_err(TestCaseError::fail)?;
    let st = pool.status();
    let eps = 1e-3;
    // Per node: CPU and per-device GPU held by reserved groups.
    let mut cpu: BTreeMap<NodeId, f64> = BTreeMap::new();
    let mut dev: BTreeMap<(NodeId, u32), f64> = BTreeMap::new();
    for g in &st.groups {
        let placed: Vec<&BundlePlacement> =
            g.bundles.iter().filter_map(|b| b.placement.as_ref()).collect();
        match g.state {
            GroupState::Pending { .. } => {
                prop_assert!(placed.is_empty(), "pending group {} holds bundles", g.id)
            }
            GroupState::Draining { ref lost_bundles } => {
                prop_assert!(!lost_bundles.is_empty());
                prop_assert_eq!(placed.len() + lost_bundles.len(), g.bundles.len());
                for &i in lost_bundles {
                    prop_assert!(g.bundles[i].placement.is_none(), "a lost bundle is still placed");
                }
            }
            GroupState::Reserved => {
                prop_assert_eq!(placed.len(), g.bundles.len(), "group {} is partly reserved", g.id);
                let mut nodes: Vec<NodeId> = placed.iter().map(|p| p.node).collect();
                nodes.sort();
                nodes.dedup();
                match g.strategy {
                    Strategy::StrictPack => prop_assert_eq!(nodes.len(), 1),
                    Strategy::StrictSpread => prop_assert_eq!(nodes.len(), placed.len()),
                    _ => {}
                }
            }
        }
        for b in &g.bundles {
            let Some(p) = &b.placement else { continue };
            *cpu.entry(p.node).or_default() += b.resources.cpu;
            let want = b.resources.gpu;
            if want == 0.0 {
                prop_assert!(p.gpu_ids.is_empty() && p.gpu_fraction == 0.0);
            } else if want < 1.0 {
                prop_assert_eq!(p.gpu_ids.len(), 1);
                prop_assert!((p.gpu_fraction - want).abs() < eps);
            } else {
                prop_assert_eq!(p.gpu_ids.len(), want as usize);
                prop_assert_eq!(p.gpu_fraction, 1.0);
            }
            for &id in &p.gpu_ids {
                *dev.entry((p.node, id)).or_default() += p.gpu_fraction;
            }
        }
    }
    for n in &st.nodes {
        let used = cpu.get(&n.id).copied().unwrap_or(0.0);
        if !n.alive {
            prop_assert_eq!(used, 0.0, "dead node {} holds bundles", n.id);
            continue;
        }
        prop_assert!(
            used <= n.total.cpu + eps,
            "node {} CPU over-committed: {} > {}",
            n.id,
            used,
            n.total.cpu
        );
        prop_assert!((n.total.cpu - used - n.free.cpu).abs() < eps);
        for (i, &free) in n.gpu_free.iter().enumerate() {
            let used = dev.get(&(n.id, i as u32)).copied().unwrap_or(0.0);
            prop_assert!(used <= 1.0 + eps, "node {} GPU {} handed out {}", n.id, i, used);
            prop_assert!((1.0 - used - free).abs() < eps);
        }
        prop_assert!(
            dev.keys().filter(|(id, _)| *id == n.id).all(|(_, d)| (*d as usize) < n.gpu_free.len())
        );
    }
    // Fresh reservations are for groups we asked for, in their bundle order.
    for r in fresh {
        let req =
            model.requests.get(&r.pg).ok_or_else(|| TestCaseError::fail("unknown reservation"))?;
        prop_assert_eq!(r.bundles.len(), req.bundles.len());
    }
    Ok(())
}

/// The reserved groups with a bundle on `node`, by id.
fn groups_on(status: &PoolStatus, node: NodeId) -> Vec<PgId> {
    let on_node = |g: &&GroupStatus| {
        g.bundles.iter().any(|b| b.placement.as_ref().is_some_and(|p| p.node == node))
    };
    status.groups.iter().filter(on_node).map(|g| g.id).collect()
}

fn apply(
    pool: &mut Pool,
    model: &mut Model,
    op: Op,
) -> std::result::Result<Vec<Reservation>, TestCaseError> {
    match op {
        Op::AddNode { cpus, gpus, x } => {
            let id = pool
                .add_node(NodeSpec::local(cpus, gpus).custom("x", x))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            model.nodes.push(id);
        }
        Op::Request { bundles, strategy } => {
            let req = PlacementRequest::new(strategy, bundles);
            let feasible = pool.check_feasible(&req);
            match pool.request(req.clone()) {
                Ok(pg) => {
                    prop_assert!(feasible.is_ok());
                    model.requests.insert(pg, req);
                }
                Err(e) => prop_assert_eq!(feasible, Err(e)),
            }
        }
        Op::Cancel(i) => {
            let ids: Vec<PgId> = model.requests.keys().copied().collect();
            if let Some(pg) = pick(&ids, i) {
                let r = pool.cancel(pg);
                prop_assert!(r.is_ok() || r == Err(PoolError::GroupEnded { pg }), "{:?}", r);
                model.requests.remove(&pg);
            }
        }
        Op::Release(i) => {
            let ids: Vec<PgId> = model.requests.keys().copied().collect();
            if let Some(pg) = pick(&ids, i) {
                match pool.release(pg) {
                    Ok(()) | Err(PoolError::GroupEnded { .. }) => {
                        model.requests.remove(&pg);
                    }
                    Err(PoolError::NotReserved { .. }) => {}
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                }
            }
        }
        Op::Schedule => return Ok(pool.schedule()),
        Op::Kill(i) => {
            if let Some(id) = pick(&model.nodes, i) {
                let before = pool.status();
                let lost =
                    pool.mark_node_dead(id).map_err(|e| TestCaseError::fail(e.to_string()))?;
                // Exactly the reserved groups with a bundle on the node are lost.
                let want = groups_on(&before, id);
                prop_assert_eq!(&lost, &want);
                for pg in lost {
                    model.requests.remove(&pg);
                }
            }
        }
        Op::KillKeeping(i) => {
            if let Some(id) = pick(&model.nodes, i) {
                let before = pool.status();
                let hit = pool
                    .mark_node_dead_keeping_survivors(id)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let want = groups_on(&before, id);
                prop_assert_eq!(&hit, &want);
                // They stay in the model: they must still be released.
                for pg in hit {
                    let held = pool.status().groups.into_iter().find(|g| g.id == pg);
                    prop_assert!(
                        held.is_some_and(|g| matches!(g.state, GroupState::Draining { .. })),
                        "group {} is not draining",
                        pg
                    );
                }
            }
        }
        Op::Rejoin { node, cpus, gpus } => {
            if let Some(id) = pick(&model.nodes, node) {
                let lost = pool
                    .rejoin_node(id, NodeSpec::local(cpus, gpus))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for pg in lost {
                    model.requests.remove(&pg);
                }
            }
        }
    }
    Ok(Vec::new())
}

fn config() -> impl proptest::strategy::Strategy<Value = PoolConfig> {
    prop_oneof![Just(0u32), Just(1), Just(4), Just(u32::MAX)]
        .prop_map(|m| PoolConfig::new().max_overtakes(m))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Safety after every step, then liveness: with everything released over and over, every
    /// request that fits the alive cluster is reserved within as many rounds as there are requests.
    #[test]
    fn random_operations_keep_the_pool_sound_and_drain(
        config in config(),
        nodes in proptest::collection::vec((prop_oneof![Just(2.0), Just(4.0), Just(8.0)], 0u32..4), 1..4),
        ops in proptest::collection::vec(op(), 1..100),
    ) {
        let mut pool = Pool::with_config(config);
        let mut model = Model::default();
        for (cpus, gpus) in nodes {
            apply(&mut pool, &mut model, Op::AddNode { cpus, gpus, x: 1.0 })?;
        }
        for op in ops {
            let fresh = apply(&mut pool, &mut model, op)?;
            check_status(&pool, &model, &fresh)?;
        }
        let bound = pool.pending_count() + 1;
        let mut rounds = 0;
        loop {
            let st = pool.status();
            let holding = |g: &&GroupStatus| {
                matches!(g.state, GroupState::Reserved | GroupState::Draining { .. })
            };
            for g in st.groups.iter().filter(holding) {
                pool.release(g.id).map_err(|e| TestCaseError::fail(e.to_string()))?;
                model.requests.remove(&g.id);
            }
            let stuck: Vec<PgId> = st
                .groups
                .iter()
                .filter(|g| !holding(g))
                .filter(|g| pool.check_feasible(&model.requests[&g.id]).is_ok())
                .map(|g| g.id)
                .collect();
            if stuck.is_empty() {
                break;
            }
            prop_assert!(rounds <= bound, "feasible requests {:?} still pending after {} rounds", stuck, rounds);
            let fresh = pool.schedule();
            prop_assert!(!fresh.is_empty(), "an empty cluster reserved none of {:?}", stuck);
            check_status(&pool, &model, &fresh)?;
            rounds += 1;
        }
    }

    /// Shapes that fit alone keep fitting: on a fresh cluster a single feasible request is
    /// reserved by the first pass, and its release restores every node exactly.
    #[test]
    fn a_feasible_request_on_an_idle_cluster_is_reserved_at_once(
        nodes in proptest::collection::vec((1u32..9, 0u32..4), 1..6),
        bundles in proptest::collection::vec(bundle(), 1..6),
        strategy in strategy(),
    ) {
        let mut pool = Pool::new();
        for (c, g) in nodes {
            pool.add_node(NodeSpec::local(f64::from(c), g).custom("x", 1.0)).unwrap();
        }
        let before = pool.status();
        let req = PlacementRequest::new(strategy, bundles);
        if let Ok(pg) = pool.request(req) {
            let r = pool.schedule();
            prop_assert_eq!(r.len(), 1);
            pool.check_invariants().map_err(TestCaseError::fail)?;
            pool.release(pg).unwrap();
            prop_assert_eq!(pool.status(), before);
        }
    }

    /// No input makes the pool panic: arbitrary (also invalid) amounts come back as errors.
    #[test]
    fn arbitrary_amounts_never_panic(
        node_cpu in proptest::num::f64::ANY,
        node_gpu in proptest::num::f64::ANY,
        cpu in proptest::num::f64::ANY,
        gpu in proptest::num::f64::ANY,
        custom in proptest::num::f64::ANY,
        strategy in strategy(),
        n in 0usize..4,
    ) {
        let mut pool = Pool::new();
        let _ = pool.add_node(NodeSpec::new("n", Resources::new().cpu(node_cpu).gpu(node_gpu)));
        let _ = pool.add_node(NodeSpec::local(4.0, 1));
        let bundle = Resources::new().cpu(cpu).gpu(gpu).custom("c", custom);
        if let Ok(pg) = pool.request(PlacementRequest::uniform(strategy, n, bundle)) {
            pool.schedule();
            let _ = pool.cancel(pg);
        }
        pool.check_invariants().map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// A large request behind an endless stream of small ones (random sizes, strategies and
    /// lifetimes) is reserved within a bound set by `max_overtakes` and the small ones' lifetime.
    #[test]
    fn large_requests_are_not_starved(
        max_overtakes in 0u32..6,
        nodes in 1usize..4,
        per_round in 1usize..4,
        smalls in proptest::collection::vec((prop_oneof![Just(1.0), Just(2.0)], 1usize..4, strategy()), 64),
        big_strategy in prop_oneof![Just(Strategy::StrictPack), Just(Strategy::Pack), Just(Strategy::StrictSpread)],
    ) {
        let mut pool = Pool::with_config(PoolConfig::new().max_overtakes(max_overtakes));
        for _ in 0..nodes {
            pool.add_node(NodeSpec::local(4.0, 0)).unwrap();
        }
        let max_hold = 3;
        let mut live: Vec<(PgId, usize)> = Vec::new();
        let mut big = None;
        let mut next = 0;
        let rounds = 400;
        let mut served = None;
        'run: for round in 0..rounds {
            let mut keep = Vec::new();
            for (pg, until) in live.drain(..) {
                if until <= round { pool.release(pg).unwrap() } else { keep.push((pg, until)) }
            }
            live = keep;
            for _ in 0..per_round {
                let (c, _, s) = smalls[next % smalls.len()];
                next += 1;
                pool.request(PlacementRequest::new(s, vec![Resources::new().cpu(c)])).unwrap();
            }
            if round == 1 {
                // A whole node, or one per node.
                let bundles = if big_strategy == Strategy::StrictPack { 1 } else { nodes };
                big = Some(pool.request(PlacementRequest::uniform(big_strategy, bundles, Resources::new().cpu(4.0))).unwrap());
            }
            for r in pool.schedule() {
                if Some(r.pg) == big {
                    served = Some(round);
                    break 'run;
                }
                let hold = smalls[r.pg.0 as usize % smalls.len()].1.min(max_hold);
                live.push((r.pg, round + hold));
            }
            pool.check_invariants().map_err(TestCaseError::fail)?;
        }
        let bound = 2 + (max_overtakes as usize + 1) * (max_hold + 1) + max_hold;
        let served = served.ok_or_else(|| TestCaseError::fail("starved"))?;
        prop_assert!(served <= bound, "served in round {}, bound {}", served, bound);
    }
}
