//! Unit tests of the pool through its public API.

use super::*;

fn cpu(c: f64) -> Resources {
    Resources::new().cpu(c)
}

fn node(cpus: f64, gpus: u32) -> NodeSpec {
    NodeSpec::local(cpus, gpus)
}

fn req(strategy: Strategy, bundles: Vec<Resources>) -> PlacementRequest {
    PlacementRequest::new(strategy, bundles)
}

fn pool_with(nodes: &[(f64, u32)]) -> (Pool, Vec<NodeId>) {
    let mut pool = Pool::new();
    let ids = nodes.iter().map(|&(c, g)| pool.add_node(node(c, g)).unwrap()).collect();
    (pool, ids)
}

/// Schedules and returns the one reservation made, checking the accounting.
fn one(pool: &mut Pool) -> Reservation {
    let mut r = pool.schedule();
    pool.check_invariants().unwrap();
    assert_eq!(r.len(), 1, "expected exactly one reservation, got {r:?}");
    r.remove(0)
}

fn nodes_of(r: &Reservation) -> Vec<NodeId> {
    let mut n: Vec<NodeId> = r.bundles.iter().map(|b| b.node).collect();
    n.sort();
    n.dedup();
    n
}

fn free_cpu(pool: &Pool, id: NodeId) -> f64 {
    pool.status().nodes.iter().find(|n| n.id == id).unwrap().free.cpu
}

// ----- strategies -----

#[test]
fn pack_puts_everything_on_one_node_when_it_can() {
    let (mut pool, _) = pool_with(&[(4.0, 0), (4.0, 0)]);
    pool.request(req(Strategy::Pack, vec![cpu(1.0); 3])).unwrap();
    assert_eq!(nodes_of(&one(&mut pool)).len(), 1);
}

#[test]
fn pack_spills_over_when_no_node_holds_everything() {
    let (mut pool, _) = pool_with(&[(4.0, 0), (4.0, 0)]);
    pool.request(req(Strategy::Pack, vec![cpu(2.0); 3])).unwrap();
    assert_eq!(nodes_of(&one(&mut pool)).len(), 2);
}

#[test]
fn strict_pack_is_one_node_or_nothing() {
    let (mut pool, ids) = pool_with(&[(4.0, 0), (4.0, 0)]);
    let err = pool.request(req(Strategy::StrictPack, vec![cpu(2.0); 3])).unwrap_err();
    assert!(
        matches!(&err, PoolError::StrictPackTooLarge { resource, requested, largest }
        if resource == "CPU" && *requested == 6.0 && *largest == 4.0),
        "{err}"
    );
    assert!(err.to_string().contains("PACK"));

    // 3 CPUs free on each node: a 4-CPU STRICT_PACK group waits instead of splitting.
    let a = pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    let b = pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    let first = pool.schedule();
    assert_eq!(first.len(), 2);
    pool.request(req(Strategy::StrictPack, vec![cpu(2.0); 2])).unwrap();
    let on_b_node = first.iter().find(|r| r.pg == b).unwrap().bundles[0].node;
    if first.iter().find(|r| r.pg == a).unwrap().bundles[0].node != on_b_node {
        assert!(pool.schedule().is_empty(), "4 CPUs on no single node yet");
        pool.release(a).unwrap();
    }
    let r = one(&mut pool);
    assert_eq!(nodes_of(&r).len(), 1);
    assert!(ids.contains(&r.bundles[0].node));
}

#[test]
fn spread_uses_distinct_nodes() {
    let (mut pool, _) = pool_with(&[(4.0, 0), (4.0, 0), (4.0, 0)]);
    pool.request(req(Strategy::Spread, vec![cpu(1.0); 3])).unwrap();
    assert_eq!(nodes_of(&one(&mut pool)).len(), 3);
}

#[test]
fn spread_shares_nodes_evenly_when_there_are_too_few() {
    let (mut pool, _) = pool_with(&[(4.0, 0), (4.0, 0)]);
    pool.request(req(Strategy::Spread, vec![cpu(1.0); 3])).unwrap();
    let r = one(&mut pool);
    let mut counts: Vec<usize> =
        nodes_of(&r).iter().map(|n| r.bundles.iter().filter(|b| b.node == *n).count()).collect();
    counts.sort();
    assert_eq!(counts, vec![1, 2]);
}

#[test]
fn strict_spread_is_distinct_nodes_or_nothing() {
    let (mut pool, ids) = pool_with(&[(4.0, 0), (4.0, 0)]);
    let err = pool.request(req(Strategy::StrictSpread, vec![cpu(1.0); 3])).unwrap_err();
    assert_eq!(err, PoolError::TooFewNodes { bundles: 3, nodes: 2 });

    // One node full: a 2-bundle STRICT_SPREAD group waits although 4 CPUs are free elsewhere.
    let full = pool.request(req(Strategy::StrictPack, vec![cpu(4.0)])).unwrap();
    one(&mut pool);
    pool.request(req(Strategy::StrictSpread, vec![cpu(1.0); 2])).unwrap();
    assert!(pool.schedule().is_empty());
    pool.release(full).unwrap();
    let r = one(&mut pool);
    assert_eq!(nodes_of(&r), ids);
}

#[test]
fn strict_spread_finds_a_matching_greedy_would_miss() {
    // Bundle 0 fits both nodes, bundle 1 only node A (custom "x"); greedy puts bundle 0 on A first.
    let mut pool = Pool::new();
    let a = pool.add_node(node(4.0, 0).custom("x", 1.0)).unwrap();
    let b = pool.add_node(node(4.0, 0)).unwrap();
    pool.request(req(Strategy::StrictSpread, vec![cpu(1.0), cpu(1.0).custom("x", 1.0)])).unwrap();
    let r = one(&mut pool);
    assert_eq!(r.bundles[0].node, b);
    assert_eq!(r.bundles[1].node, a);
}

// ----- lifecycle -----

#[test]
fn request_reserve_release() {
    let (mut pool, ids) = pool_with(&[(4.0, 0)]);
    let pg = pool.request(req(Strategy::Pack, vec![cpu(1.5); 2]).label("trial_1")).unwrap();
    let st = pool.status();
    assert!(matches!(st.groups[0].state, GroupState::Pending { queue_position: 0, .. }));
    assert!(st.groups[0].bundles.iter().all(|b| b.placement.is_none()));
    assert_eq!(free_cpu(&pool, ids[0]), 4.0, "pending holds nothing");

    let r = one(&mut pool);
    assert_eq!((r.pg, r.label.as_str()), (pg, "trial_1"));
    assert_eq!(free_cpu(&pool, ids[0]), 1.0);
    let st = pool.status();
    assert_eq!(st.groups[0].state, GroupState::Reserved);
    assert!(st.groups[0].bundles.iter().all(|b| b.placement.as_ref().unwrap().node == ids[0]));
    assert_eq!(pool.reserved_count(), 1);

    assert_eq!(pool.placement(pg), Some(r.bundles.clone()));
    pool.release(pg).unwrap();
    assert_eq!(pool.placement(pg), None);
    assert_eq!(free_cpu(&pool, ids[0]), 4.0);
    assert!(pool.status().groups.is_empty());
    assert_eq!(pool.release(pg), Err(PoolError::GroupEnded { pg }));
    assert_eq!(pool.cancel(pg), Err(PoolError::GroupEnded { pg }));
    assert_eq!(pool.release(PgId(99)), Err(PoolError::UnknownGroup { pg: PgId(99) }));
    assert!(pool.schedule().is_empty());
}

#[test]
fn cancel_before_and_after_reservation() {
    let (mut pool, ids) = pool_with(&[(2.0, 0)]);
    let held = pool.request(req(Strategy::Pack, vec![cpu(2.0)])).unwrap();
    one(&mut pool);
    let waiting = pool.request(req(Strategy::Pack, vec![cpu(2.0)])).unwrap();
    assert!(pool.schedule().is_empty());
    assert_eq!(pool.release(waiting), Err(PoolError::NotReserved { pg: waiting }));
    pool.cancel(waiting).unwrap();
    assert_eq!(pool.pending_count(), 0);
    pool.cancel(held).unwrap(); // cancel of a reserved group releases it
    assert_eq!(free_cpu(&pool, ids[0]), 2.0);
    assert!(pool.schedule().is_empty(), "the cancelled request never comes back");
    pool.check_invariants().unwrap();
}

#[test]
fn gang_reservation_takes_all_bundles_or_none() {
    let (mut pool, ids) = pool_with(&[(4.0, 0), (4.0, 0)]);
    let a = pool.request(req(Strategy::Pack, vec![cpu(3.0); 2])).unwrap();
    one(&mut pool);
    // 2 CPUs free in total; a 3-bundle group of 1 CPU fits partly and must hold nothing.
    pool.request(req(Strategy::Pack, vec![cpu(1.0); 3])).unwrap();
    assert!(pool.schedule().is_empty());
    assert_eq!(free_cpu(&pool, ids[0]) + free_cpu(&pool, ids[1]), 2.0);
    pool.release(a).unwrap();
    assert_eq!(one(&mut pool).bundles.len(), 3);
}

#[test]
fn fifo_order_when_everything_fits_in_turn() {
    let (mut pool, _) = pool_with(&[(2.0, 0)]);
    let pgs: Vec<PgId> =
        (0..4).map(|_| pool.request(req(Strategy::Pack, vec![cpu(2.0)])).unwrap()).collect();
    for &pg in &pgs {
        let r = one(&mut pool);
        assert_eq!(r.pg, pg);
        pool.release(pg).unwrap();
    }
}

// ----- errors -----

#[test]
fn malformed_requests_are_refused_with_a_reason() {
    let (mut pool, _) = pool_with(&[(4.0, 1)]);
    let mut check = |r: PlacementRequest, want: fn(&PoolError) -> bool| {
        let e = pool.request(r).unwrap_err();
        assert!(want(&e), "unexpected error {e:?}");
        assert!(!e.to_string().is_empty());
    };
    check(req(Strategy::Pack, vec![]), |e| *e == PoolError::NoBundles);
    check(req(Strategy::Pack, vec![cpu(1.0), Resources::new()]), |e| {
        *e == PoolError::EmptyBundle { bundle: 1 }
    });
    check(
        req(Strategy::Pack, vec![cpu(-1.0)]),
        |e| matches!(e, PoolError::InvalidAmount { resource, .. } if resource == "CPU"),
    );
    check(req(Strategy::Pack, vec![cpu(f64::NAN)]), |e| {
        matches!(e, PoolError::InvalidAmount { .. })
    });
    check(req(Strategy::Pack, vec![cpu(1.0).gpu(f64::INFINITY)]), |e| {
        matches!(e, PoolError::InvalidAmount { .. })
    });
    check(req(Strategy::Pack, vec![cpu(1.0).gpu(1.5)]), |e| {
        matches!(e, PoolError::FractionalGpus { .. })
    });
    check(req(Strategy::Pack, vec![cpu(1.0).custom("GPU", 1.0)]), |e| {
        matches!(e, PoolError::ReservedName { .. })
    });
    check(req(Strategy::Pack, vec![cpu(1.0).custom("", 1.0)]), |e| {
        matches!(e, PoolError::ReservedName { .. })
    });
    assert_eq!(pool.pending_count(), 0);
    pool.check_invariants().unwrap();
}

#[test]
fn requests_that_can_never_fit_name_the_resource() {
    let mut pool = Pool::new();
    assert_eq!(pool.request(req(Strategy::Pack, vec![cpu(1.0)])), Err(PoolError::NoAliveNodes));
    pool.add_node(node(4.0, 2).memory_bytes(1 << 30)).unwrap();
    pool.add_node(NodeSpec::new("b", Resources::new().cpu(8.0).custom("tpu", 1.0))).unwrap();

    let e = pool.request(req(Strategy::Pack, vec![cpu(16.0)])).unwrap_err();
    assert_eq!(
        e,
        PoolError::ExceedsEveryNode {
            bundle: 0,
            resource: "CPU".into(),
            requested: 16.0,
            largest: 8.0
        }
    );
    assert_eq!(e.to_string(), "bundle 0 asks for 16 CPU but the largest alive node has 8 in total");

    let e = pool.request(req(Strategy::Pack, vec![cpu(1.0), cpu(1.0).gpu(4.0)])).unwrap_err();
    assert!(
        matches!(&e, PoolError::ExceedsEveryNode { bundle: 1, resource, .. } if resource == "GPU"),
        "{e}"
    );

    let e = pool
        .request(req(Strategy::Pack, vec![Resources::new().memory_bytes(2 << 30)]))
        .unwrap_err();
    assert!(
        matches!(&e, PoolError::ExceedsEveryNode { resource, .. } if resource == "memory"),
        "{e}"
    );

    let e = pool.request(req(Strategy::Pack, vec![cpu(1.0).custom("fpga", 1.0)])).unwrap_err();
    assert!(
        matches!(&e, PoolError::ExceedsEveryNode { resource, largest, .. } if resource == "fpga" && *largest == 0.0)
    );

    // Each resource exists somewhere, but not together.
    let e =
        pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(1.0).custom("tpu", 1.0)])).unwrap_err();
    assert_eq!(e, PoolError::NoNodeFitsBundle { bundle: 0 });

    let e = pool.request(req(Strategy::Pack, vec![cpu(4.0); 4])).unwrap_err();
    assert_eq!(
        e,
        PoolError::ExceedsCluster { resource: "CPU".into(), requested: 16.0, available: 12.0 }
    );

    // Fits when empty, so it is accepted even though it cannot be reserved now.
    pool.request(req(Strategy::Pack, vec![cpu(4.0); 3])).unwrap();
    assert!(pool.check_feasible(&req(Strategy::Spread, vec![cpu(4.0); 3])).is_ok());
}

#[test]
fn node_errors() {
    let mut pool = Pool::new();
    let e = pool.add_node(NodeSpec::new("x", Resources::new().cpu(1.0).gpu(0.5))).unwrap_err();
    assert!(matches!(e, PoolError::FractionalGpus { .. }));
    let e = pool.add_node(NodeSpec::new("x", Resources::new().gpu(1e6))).unwrap_err();
    assert!(matches!(e, PoolError::InvalidAmount { .. }));
    pool.insert_node(NodeId(7), node(1.0, 0)).unwrap();
    assert_eq!(
        pool.insert_node(NodeId(7), node(1.0, 0)),
        Err(PoolError::DuplicateNode { node: NodeId(7) })
    );
    assert_eq!(pool.add_node(node(1.0, 0)), Ok(NodeId(8)));
    assert_eq!(pool.mark_node_dead(NodeId(3)), Err(PoolError::UnknownNode { node: NodeId(3) }));
    assert_eq!(
        pool.rejoin_node(NodeId(3), node(1.0, 0)),
        Err(PoolError::UnknownNode { node: NodeId(3) })
    );
    assert_eq!(pool.node_address(NodeId(7)), Some("local"));
    pool.check_invariants().unwrap();
}

// ----- GPUs -----

#[test]
fn fractional_gpus_share_a_device_and_whole_ones_stay_whole() {
    let (mut pool, _) = pool_with(&[(16.0, 2)]);
    let half = || req(Strategy::Pack, vec![cpu(1.0).gpu(0.5)]);
    pool.request(half()).unwrap();
    pool.request(half()).unwrap();
    pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(1.0)])).unwrap();
    let r = pool.schedule();
    pool.check_invariants().unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!((r[0].bundles[0].gpu_ids.clone(), r[0].bundles[0].gpu_fraction), (vec![0], 0.5));
    assert_eq!((r[1].bundles[0].gpu_ids.clone(), r[1].bundles[0].gpu_fraction), (vec![0], 0.5));
    assert_eq!((r[2].bundles[0].gpu_ids.clone(), r[2].bundles[0].gpu_fraction), (vec![1], 1.0));
    // Both devices are used up: another share waits.
    let more = pool.request(half()).unwrap();
    assert!(pool.schedule().is_empty());
    pool.release(r[0].pg).unwrap();
    let again = one(&mut pool);
    assert_eq!((again.pg, again.bundles[0].gpu_ids.clone()), (more, vec![0]));
}

#[test]
fn a_third_of_a_gpu_three_times_fits_one_device() {
    let (mut pool, _) = pool_with(&[(16.0, 1)]);
    pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(1.0 / 3.0); 3])).unwrap();
    let r = one(&mut pool);
    assert!(r.bundles.iter().all(|b| b.gpu_ids == vec![0]));
    let st = pool.status();
    assert!(st.nodes[0].gpu_free[0] < 0.001);
}

#[test]
fn shares_never_exceed_a_device() {
    let (mut pool, _) = pool_with(&[(16.0, 1)]);
    pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(0.6)])).unwrap();
    pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(0.6)])).unwrap();
    assert_eq!(pool.schedule().len(), 1);
    assert!(pool.schedule().is_empty());
    pool.check_invariants().unwrap();
}

#[test]
fn multi_gpu_bundles_get_whole_distinct_devices() {
    let (mut pool, _) = pool_with(&[(16.0, 4)]);
    pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(0.25)])).unwrap(); // takes part of device 0
    pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(2.0)])).unwrap();
    let r = pool.schedule();
    let b = &r[1].bundles[0];
    assert_eq!((b.gpu_ids.clone(), b.gpu_fraction), (vec![1, 2], 1.0));
    assert_eq!(b.cuda_visible_devices(), "1,2");
    // 3 whole devices are not free (device 0 is shared): a 3-GPU bundle waits.
    pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(3.0)])).unwrap();
    assert!(pool.schedule().is_empty());
    pool.check_invariants().unwrap();
}

#[test]
fn cpu_only_work_avoids_gpu_nodes() {
    let (mut pool, ids) = pool_with(&[(8.0, 4), (8.0, 0)]);
    pool.request(req(Strategy::Pack, vec![cpu(2.0)])).unwrap();
    assert_eq!(one(&mut pool).bundles[0].node, ids[1]);
}

// ----- nodes dying and coming back -----

#[test]
fn node_death_releases_whole_groups_and_reports_them() {
    let (mut pool, ids) = pool_with(&[(4.0, 0), (4.0, 0), (4.0, 0)]);
    let across = pool.request(req(Strategy::StrictSpread, vec![cpu(1.0); 2])).unwrap();
    let r = one(&mut pool);
    let victim = r.bundles[0].node;
    let survivor = r.bundles[1].node;
    let elsewhere = pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    let r2 = one(&mut pool);
    let pending = pool.request(req(Strategy::StrictPack, vec![cpu(4.0); 1])).unwrap();

    let lost = pool.mark_node_dead(victim).unwrap();
    let mut want = vec![across];
    if r2.bundles[0].node == victim {
        want.push(elsewhere);
    }
    assert_eq!(lost, want);
    pool.check_invariants().unwrap();
    assert_eq!(free_cpu(&pool, survivor), if r2.bundles[0].node == survivor { 3.0 } else { 4.0 });
    assert_eq!(pool.release(across), Err(PoolError::GroupEnded { pg: across }));
    assert_eq!(pool.mark_node_dead(victim), Ok(vec![]), "idempotent");
    let st = pool.status();
    let dead = st.nodes.iter().find(|n| n.id == victim).unwrap();
    assert!(!dead.alive);
    assert_eq!(dead.free.cpu, 0.0);
    // Pending requests stay and get served by the survivors.
    assert!(pool.schedule().iter().any(|r| r.pg == pending));
    assert!(pool.schedule().iter().all(|r| r.bundles.iter().all(|b| b.node != victim)));
    assert!(ids.contains(&victim));
}

/// A group that loses one node keeps its bundles on the others until released: another group
/// can never get those CPUs (and GPUs) while the lost group's workers there may still run.
#[test]
fn draining_group_keeps_its_survivors_until_released() {
    let (mut pool, ids) = pool_with(&[(1.0, 1), (1.0, 1)]);
    let pg = pool.request(req(Strategy::StrictSpread, vec![cpu(1.0).gpu(1.0); 2])).unwrap();
    let r = one(&mut pool);
    let (victim, survivor) = (r.bundles[0].node, r.bundles[1].node);
    let next = pool.request(req(Strategy::Pack, vec![cpu(1.0).gpu(1.0)])).unwrap();

    assert_eq!(pool.mark_node_dead_keeping_survivors(victim), Ok(vec![pg]));
    pool.check_invariants().unwrap();
    let st = pool.status();
    let group = st.groups.iter().find(|g| g.id == pg).unwrap();
    assert_eq!(group.state, GroupState::Draining { lost_bundles: vec![0] });
    assert_eq!(free_cpu(&pool, survivor), 0.0);
    assert!(pool.placement(pg).is_none(), "a draining group starts no workers");
    assert!(pool.schedule().is_empty(), "the survivor's CPU and GPU are still held");

    // The lost node comes back clean before the release: releasing must not credit it twice.
    assert_eq!(pool.rejoin_node(victim, node(1.0, 1)), Ok(vec![]));
    pool.check_invariants().unwrap();
    let r = one(&mut pool);
    assert_eq!((r.pg, r.bundles[0].node), (next, victim));
    pool.release(pg).unwrap();
    pool.check_invariants().unwrap();
    assert_eq!(free_cpu(&pool, survivor), 1.0);
    assert_eq!(free_cpu(&pool, victim), 0.0, "held by `next`, not credited by the release");
    assert_eq!(pool.release(pg), Err(PoolError::GroupEnded { pg }));

    // Losing the last node of a draining group leaves it draining with nothing held.
    let both = pool.request(req(Strategy::Pack, vec![cpu(1.0)])).unwrap();
    let held_on = one(&mut pool).bundles[0].node;
    assert_eq!(pool.mark_node_dead_keeping_survivors(held_on), Ok(vec![both]));
    pool.check_invariants().unwrap();
    pool.cancel(both).unwrap();
    pool.check_invariants().unwrap();
    assert!(ids.contains(&survivor));
}

#[test]
fn requests_are_checked_against_alive_nodes_only() {
    let (mut pool, ids) = pool_with(&[(4.0, 0), (8.0, 0)]);
    pool.mark_node_dead(ids[1]).unwrap();
    assert!(matches!(
        pool.request(req(Strategy::Pack, vec![cpu(8.0)])),
        Err(PoolError::ExceedsEveryNode { .. })
    ));
    pool.mark_node_dead(ids[0]).unwrap();
    assert_eq!(pool.request(req(Strategy::Pack, vec![cpu(1.0)])), Err(PoolError::NoAliveNodes));
}

#[test]
fn rejoin_comes_back_clean() {
    let (mut pool, ids) = pool_with(&[(4.0, 1)]);
    let pg = pool.request(req(Strategy::Pack, vec![cpu(3.0).gpu(0.5)])).unwrap();
    one(&mut pool);
    assert_eq!(pool.mark_node_dead(ids[0]).unwrap(), vec![pg]);
    // While dead nothing is scheduled on it.
    let waiting = pool.request(req(Strategy::Pack, vec![cpu(1.0)]));
    assert_eq!(waiting, Err(PoolError::NoAliveNodes));
    assert_eq!(
        pool.rejoin_node(ids[0], NodeSpec::new("10.0.0.2:7000", cpu(8.0).gpu(2.0))),
        Ok(vec![])
    );
    let st = pool.status();
    assert!(st.nodes[0].alive);
    assert_eq!(st.nodes[0].free, st.nodes[0].total);
    assert_eq!(st.nodes[0].free.cpu, 8.0);
    assert_eq!(st.nodes[0].address, "10.0.0.2:7000");
    pool.check_invariants().unwrap();
}

#[test]
fn rejoin_of_a_node_thought_alive_releases_what_it_held() {
    let (mut pool, ids) = pool_with(&[(4.0, 0)]);
    let pg = pool.request(req(Strategy::Pack, vec![cpu(3.0)])).unwrap();
    one(&mut pool);
    assert_eq!(pool.rejoin_node(ids[0], node(4.0, 0)), Ok(vec![pg]));
    assert_eq!(free_cpu(&pool, ids[0]), 4.0);
    pool.check_invariants().unwrap();
}

// ----- fairness -----

/// A node of 4 CPUs, kept full by 1-CPU requests that each live `hold` rounds, two new ones per
/// round; a 4-CPU request arrives after the first round. Returns the round it got reserved in.
fn starvation_run(config: PoolConfig, rounds: usize, hold: usize) -> Option<usize> {
    let mut pool = Pool::with_config(config);
    pool.add_node(node(4.0, 0)).unwrap();
    let small = || req(Strategy::Pack, vec![cpu(1.0)]).label("small");
    let mut live: Vec<(PgId, usize)> = Vec::new();
    let mut big = None;
    for round in 0..rounds {
        live.retain(|&(pg, since)| {
            let done = round - since >= hold;
            if done {
                pool.release(pg).unwrap();
            }
            !done
        });
        pool.request(small()).unwrap();
        pool.request(small()).unwrap();
        if round == 1 {
            big =
                Some(pool.request(req(Strategy::StrictPack, vec![cpu(4.0)]).label("big")).unwrap());
        }
        for r in pool.schedule() {
            if Some(r.pg) == big {
                return Some(round);
            }
            live.push((r.pg, round));
        }
        pool.check_invariants().unwrap();
    }
    None
}

#[test]
fn a_large_request_is_not_starved_by_a_stream_of_small_ones() {
    let hold = 2;
    for max_overtakes in [0, 1, 4, 10] {
        let round = starvation_run(PoolConfig::new().max_overtakes(max_overtakes), 200, hold)
            .unwrap_or_else(|| panic!("starved with max_overtakes {max_overtakes}"));
        // Arrived in round 1; overtaken once per round; then the holders leave within `hold`.
        let bound = 1 + max_overtakes as usize + hold + 1;
        assert!(
            round <= bound,
            "reserved in round {round}, bound {bound} (max_overtakes {max_overtakes})"
        );
    }
    // The same stream does starve it without the anchor: the test measures something.
    assert_eq!(starvation_run(PoolConfig::new().max_overtakes(u32::MAX), 200, hold), None);
}

#[test]
fn the_anchor_fences_only_its_own_nodes() {
    let mut pool = Pool::with_config(PoolConfig::new().max_overtakes(0));
    let a = pool.add_node(node(4.0, 0)).unwrap();
    let b = pool.add_node(node(4.0, 0)).unwrap();
    let hold_a = pool.request(req(Strategy::StrictPack, vec![cpu(2.0)])).unwrap();
    let r = one(&mut pool);
    assert_eq!(r.bundles[0].node, a);
    let hold_b = pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    assert_eq!(one(&mut pool).bundles[0].node, a, "best fit");
    // 1 CPU free on a, 4 on b; fill b but one.
    pool.request(req(Strategy::StrictPack, vec![cpu(3.0)])).unwrap();
    assert_eq!(one(&mut pool).bundles[0].node, b);
    let big = pool.request(req(Strategy::StrictPack, vec![cpu(4.0)])).unwrap();
    let small1 = pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    let small2 = pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    // big is anchored to one node; the small ones may still use the other one.
    let r = pool.schedule();
    pool.check_invariants().unwrap();
    let st = pool.status();
    let anchored = st.groups.iter().find(|g| g.id == big).unwrap();
    assert!(matches!(anchored.state, GroupState::Pending { anchored: true, .. }), "{anchored:?}");
    assert_eq!(r.len(), 1, "one small request on the unfenced node: {r:?}");
    assert!(r[0].pg == small1);
    assert!(pool.schedule().is_empty(), "small2 must not take the fenced node");
    let _ = small2;
    // Releasing what sat on the fenced node lets big in before small2.
    pool.release(hold_a).unwrap();
    pool.release(hold_b).unwrap();
    let r = pool.schedule();
    assert_eq!(r[0].pg, big);
    assert_eq!(r[0].bundles[0].node, a);
    pool.check_invariants().unwrap();
}

#[test]
fn an_anchor_that_no_longer_fits_is_dropped() {
    let mut pool = Pool::with_config(PoolConfig::new().max_overtakes(0));
    let a = pool.add_node(node(2.0, 0)).unwrap();
    let b = pool.add_node(node(8.0, 0)).unwrap();
    let hold = pool.request(req(Strategy::StrictPack, vec![cpu(8.0)])).unwrap();
    one(&mut pool);
    let big = pool.request(req(Strategy::StrictPack, vec![cpu(8.0)])).unwrap();
    pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    assert_eq!(pool.schedule().len(), 1);
    assert!(
        pool.status()
            .groups
            .iter()
            .any(|g| g.id == big && matches!(g.state, GroupState::Pending { anchored: true, .. }))
    );
    assert_eq!(pool.mark_node_dead(b).unwrap(), vec![hold]);
    // big cannot fit any more: it stays pending, unanchored, and blocks nobody on a.
    let small = pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    let r = pool.schedule();
    assert_eq!(r.iter().map(|r| r.pg).collect::<Vec<_>>(), vec![small]);
    assert!(
        pool.status()
            .groups
            .iter()
            .any(|g| g.id == big && matches!(g.state, GroupState::Pending { anchored: false, .. }))
    );
    // When the node comes back, big is served.
    pool.rejoin_node(b, node(8.0, 0)).unwrap();
    assert_eq!(pool.schedule()[0].pg, big);
    let _ = a;
    pool.check_invariants().unwrap();
}

#[test]
fn cancelling_the_anchor_frees_its_fence() {
    let mut pool = Pool::with_config(PoolConfig::new().max_overtakes(0));
    pool.add_node(node(4.0, 0)).unwrap();
    pool.request(req(Strategy::StrictPack, vec![cpu(2.0)])).unwrap();
    one(&mut pool);
    let big = pool.request(req(Strategy::StrictPack, vec![cpu(4.0)])).unwrap();
    let small = pool.request(req(Strategy::StrictPack, vec![cpu(1.0)])).unwrap();
    assert!(pool.schedule().is_empty(), "fenced");
    pool.cancel(big).unwrap();
    assert_eq!(one(&mut pool).pg, small);
}

// ----- status -----

#[test]
fn status_serialises_like_ray() {
    let (mut pool, _) = pool_with(&[(4.0, 1)]);
    pool.request(req(Strategy::StrictSpread, vec![cpu(1.0).gpu(0.5)]).label("t0")).unwrap();
    pool.request(req(Strategy::Pack, vec![cpu(4.0)]).label("t1")).unwrap();
    pool.schedule();
    let st = pool.status();
    let json = serde_json::to_value(&st).unwrap();
    assert_eq!(json["nodes"][0]["total"], serde_json::json!({"CPU": 4, "GPU": 1}));
    assert_eq!(json["nodes"][0]["free"], serde_json::json!({"CPU": 3, "GPU": 0.5}));
    assert_eq!(json["placement_groups"][0]["state"], "reserved");
    assert_eq!(json["placement_groups"][0]["strategy"], "STRICT_SPREAD");
    assert_eq!(
        json["placement_groups"][0]["bundles"][0]["placement"]["gpu_ids"],
        serde_json::json!([0])
    );
    assert_eq!(json["placement_groups"][1]["state"], "pending");
    assert_eq!(json["placement_groups"][1]["queue_position"], 0);
    let back: PoolStatus = serde_json::from_value(json).unwrap();
    assert_eq!(back, st);
}

#[test]
fn detect_local_finds_at_least_one_cpu_and_the_memory() {
    let spec = NodeSpec::detect_local().gpus(0);
    assert!(spec.resources.cpu >= 1.0);
    // More than a few MiB, and no more than the machine has.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    assert!(spec.resources.memory_bytes > 64 << 20, "{}", spec.resources.memory_bytes);
    let total: u64 =
        meminfo.lines().next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(spec.resources.memory_bytes <= total * 1024);
    let mut pool = Pool::new();
    pool.add_node(spec).unwrap();
}

#[test]
fn no_drift_after_many_fractional_cycles() {
    let (mut pool, ids) = pool_with(&[(1.0, 1)]);
    for _ in 0..1000 {
        let pgs: Vec<PgId> = (0..3)
            .map(|_| pool.request(req(Strategy::Pack, vec![cpu(0.1).gpu(0.3)])).unwrap())
            .collect();
        assert_eq!(pool.schedule().len(), 3);
        for pg in pgs {
            pool.release(pg).unwrap();
        }
    }
    let st = pool.status();
    assert_eq!(st.nodes[0].free, st.nodes[0].total);
    assert_eq!(free_cpu(&pool, ids[0]), 1.0);
}

#[test]
fn the_pool_can_move_into_its_owning_task() {
    fn send<T: Send + 'static>() {}
    send::<Pool>();
    send::<PoolError>();
}
