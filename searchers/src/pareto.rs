//! Pareto fronts of results with several objectives: the points no other point dominates (at
//! least as good in every objective and better in one).

use std::cmp::Ordering;

use crate::metrics::Mode;

/// The indices of the points of `points` on the Pareto front, in order, each point's values
/// judged in the `modes` of their objectives (one per value). A NaN is worse than every
/// number; equal points are both on the front (neither dominates the other).
pub fn pareto_front(points: &[Vec<f64>], modes: &[Mode]) -> Vec<usize> {
    let score = |p: &[f64]| -> Vec<f64> { p.iter().zip(modes).map(|(v, m)| m.score(*v)).collect() };
    let scores: Vec<Vec<f64>> = points.iter().map(|p| score(p)).collect();
    // Best first in lexicographic order of the scores (never NaN): a point can be dominated
    // only by one before it, and then also by one of the front (dominance is transitive), so
    // each point is checked against the front found so far, not against every point.
    let lexicographic = |a: &[f64], b: &[f64]| {
        a.iter().zip(b).map(|(x, y)| x.total_cmp(y)).find(|o| o.is_ne()).unwrap_or(Ordering::Equal)
    };
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| lexicographic(&scores[b], &scores[a]));
    let mut front: Vec<usize> = Vec::new();
    for i in order {
        if !front.iter().any(|&f| dominates(&scores[f], &scores[i])) {
            front.push(i);
        }
    }
    front.sort_unstable();
    front
}

/// The Pareto front (see [`pareto_front`]) of those `items` with a finite value of every
/// objective, `value(item, k)` reading an item's `k`-th; the others are left out. Indices into
/// `items`, in order: empty when no item has every value.
pub fn pareto_front_where_finite<T>(
    items: &[T],
    modes: &[Mode],
    value: impl Fn(&T, usize) -> Option<f64>,
) -> Vec<usize> {
    let (known, points): (Vec<usize>, Vec<Vec<f64>>) = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            let values: Option<Vec<f64>> =
                (0..modes.len()).map(|k| value(item, k).filter(|v| v.is_finite())).collect();
            values.map(|v| (i, v))
        })
        .unzip();
    pareto_front(&points, modes).into_iter().map(|k| known[k]).collect()
}

/// The hypervolume of two objectives, both minimised (negate one that is maximised): the area
/// that `points` dominate and `reference` bounds. Points not better than the reference in both
/// objectives, and NaN, add nothing.
pub fn hypervolume_2d(points: &[[f64; 2]], reference: [f64; 2]) -> f64 {
    let mut inside: Vec<[f64; 2]> =
        points.iter().copied().filter(|p| p[0] < reference[0] && p[1] < reference[1]).collect();
    inside.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
    let mut area = 0.0;
    let mut floor = reference[1];
    for [x, y] in inside {
        if y < floor {
            area += (reference[0] - x) * (floor - y);
            floor = y;
        }
    }
    area
}

/// Whether scores `a` dominate scores `b` (higher is better): at least as good in every
/// objective and better in one.
pub(crate) fn dominates(a: &[f64], b: &[f64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x >= y) && a.iter().zip(b).any(|(x, y)| x > y)
}

/// Deb's constrained domination of scores `a` violating the constraints by `va` over `b`
/// violating them by `vb` (0: feasible): a feasible point dominates an infeasible one, of two
/// infeasible ones the one that violates less, and of two feasible ones as [`dominates`].
pub(crate) fn constrained_dominates(a: &[f64], va: f64, b: &[f64], vb: f64) -> bool {
    match (va == 0.0, vb == 0.0) {
        (true, true) => dominates(a, b),
        (true, false) => true,
        (false, true) => false,
        (false, false) => va < vb,
    }
}

/// Deb's fast non-dominated sort: the indices of `scores` front by front, the first front
/// dominated by none.
pub(crate) fn fronts(scores: &[Vec<f64>]) -> Vec<Vec<usize>> {
    fronts_by(scores.len(), |i, j| dominates(&scores[i], &scores[j]))
}

/// Deb's fast non-dominated sort of `n` points under `dominates(i, j)`.
pub(crate) fn fronts_by(n: usize, dominates: impl Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
    let dominating: Vec<Vec<usize>> =
        (0..n).map(|i| (0..n).filter(|&j| i != j && dominates(i, j)).collect()).collect();
    let mut dominated_by = vec![0usize; n];
    for &j in dominating.iter().flatten() {
        dominated_by[j] += 1;
    }
    let mut fronts = Vec::new();
    let mut current: Vec<usize> = (0..n).filter(|&i| dominated_by[i] == 0).collect();
    while !current.is_empty() {
        let mut next = Vec::new();
        for &i in &current {
            for &j in &dominating[i] {
                dominated_by[j] -= 1;
                if dominated_by[j] == 0 {
                    next.push(j);
                }
            }
        }
        next.sort_unstable();
        fronts.push(std::mem::replace(&mut current, next));
    }
    fronts
}

/// The hypervolume of `points` in any number of objectives, all minimised: the volume they
/// dominate and `reference` bounds (by slicing along the last objective). Points not better
/// than the reference in every objective add nothing.
pub fn hypervolume(points: &[Vec<f64>], reference: &[f64]) -> f64 {
    let inside: Vec<&[f64]> = points
        .iter()
        .map(Vec::as_slice)
        .filter(|p| p.len() == reference.len() && p.iter().zip(reference).all(|(x, r)| x < r))
        .collect();
    volume(inside, reference)
}

fn volume(mut points: Vec<&[f64]>, reference: &[f64]) -> f64 {
    match reference.len() {
        _ if points.is_empty() => 0.0,
        1 => reference[0] - points.iter().map(|p| p[0]).fold(f64::INFINITY, f64::min),
        2 => {
            let pairs: Vec<[f64; 2]> = points.iter().map(|p| [p[0], p[1]]).collect();
            hypervolume_2d(&pairs, [reference[0], reference[1]])
        }
        d => {
            points.sort_by(|a, b| a[d - 1].total_cmp(&b[d - 1]));
            let mut total = 0.0;
            for i in 0..points.len() {
                let top = points.get(i + 1).map_or(reference[d - 1], |p| p[d - 1]);
                let height = top - points[i][d - 1];
                if height > 0.0 {
                    let below: Vec<&[f64]> = points[..=i].iter().map(|p| &p[..d - 1]).collect();
                    total += volume(below, &reference[..d - 1]) * height;
                }
            }
            total
        }
    }
}

/// The `n` best of `scores` (higher is better in every objective): whole non-dominated fronts
/// while they fit, the rest of the next front chosen greedily for the hypervolume it adds
/// (reference: 1.1 times its worst point), as Optuna's multi-objective TPE splits its trials.
/// In index order.
pub(crate) fn best_by_fronts(scores: &[Vec<f64>], n: usize) -> Vec<usize> {
    let mut chosen: Vec<usize> = Vec::with_capacity(n);
    for front in fronts(scores) {
        if chosen.len() + front.len() <= n {
            chosen.extend(front);
            continue;
        }
        let k = n - chosen.len();
        // As losses (lower is better), each distinct point once, in lexicographic order;
        // repeats only where there are too few distinct points.
        let loss = |i: usize| -> Vec<f64> { scores[i].iter().map(|s| -s).collect() };
        let mut distinct: Vec<usize> = Vec::new();
        let mut repeats: Vec<usize> = Vec::new();
        for &i in &front {
            match distinct.iter().any(|&j| loss(j) == loss(i)) {
                true => repeats.push(i),
                false => distinct.push(i),
            }
        }
        distinct.sort_by(|&a, &b| {
            loss(a)
                .iter()
                .zip(loss(b))
                .map(|(x, y)| x.total_cmp(&y))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        if distinct.len() <= k {
            chosen.extend(&distinct);
            chosen.extend(repeats.iter().take(k - distinct.len()));
        } else {
            chosen.extend(
                greedy_subset(&distinct.iter().map(|&i| loss(i)).collect::<Vec<_>>(), k)
                    .into_iter()
                    .map(|j| distinct[j]),
            );
        }
        break;
    }
    chosen.sort_unstable();
    chosen
}

/// `k` of `losses` (distinct, minimised) chosen one at a time for the largest hypervolume
/// added (the first of equals); the first `k` where the reference point is not finite.
fn greedy_subset(losses: &[Vec<f64>], k: usize) -> Vec<usize> {
    let objectives = losses.first().map_or(0, Vec::len);
    let reference: Vec<f64> = (0..objectives)
        .map(|m| {
            let worst = losses.iter().map(|l| l[m]).fold(f64::NEG_INFINITY, f64::max);
            let r = (1.1 * worst).max(0.9 * worst);
            if r == 0.0 { 1e-12 } else { r }
        })
        .collect();
    if !reference.iter().all(|r| r.is_finite()) {
        return (0..k).collect();
    }
    let mut chosen: Vec<usize> = Vec::with_capacity(k);
    let mut kept: Vec<Vec<f64>> = Vec::with_capacity(k);
    let mut base = 0.0;
    while chosen.len() < k {
        let mut best: Option<(usize, f64)> = None;
        for i in (0..losses.len()).filter(|i| !chosen.contains(i)) {
            kept.push(losses[i].clone());
            let gain = hypervolume(&kept, &reference) - base;
            kept.pop();
            if best.is_none_or(|(_, b)| gain > b) {
                best = Some((i, gain));
            }
        }
        let (i, gain) = best.expect("fewer chosen than points");
        chosen.push(i);
        kept.push(losses[i].clone());
        base += gain;
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_holds_the_points_none_dominates() {
        let points = vec![
            vec![1.0, 10.0],     // 0: front (smallest loss)
            vec![2.0, 5.0],      // 1: front
            vec![3.0, 6.0],      // 2: dominated by 1
            vec![4.0, 1.0],      // 3: front (smallest size)
            vec![2.0, 5.0],      // 4: equal to 1: front too
            vec![f64::NAN, 0.5], // 5: front: nothing is as small in size
            vec![5.0, f64::NAN], // 6: dominated by 3 (NaN is the worst)
        ];
        assert_eq!(pareto_front(&points, &[Mode::Min, Mode::Min]), [0, 1, 3, 4, 5]);
        // Maximising the second objective instead: 0 has the largest.
        let max = pareto_front(&points, &[Mode::Min, Mode::Max]);
        assert_eq!(max, [0]);
        assert!(pareto_front(&[], &[Mode::Min]).is_empty());
    }

    /// The front checked against its definition (no other point dominates), on random points
    /// of few distinct values (ties), NaN among them, in 2 and 3 objectives and mixed modes.
    #[test]
    fn the_front_is_the_points_none_dominates_on_random_points() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for round in 0..200 {
            let d = 2 + round % 2;
            let modes: Vec<Mode> =
                (0..d).map(|k| if (round + k) % 3 == 0 { Mode::Max } else { Mode::Min }).collect();
            let points: Vec<Vec<f64>> = (0..rng.random_range(0..40))
                .map(|_| {
                    (0..d)
                        .map(|_| match rng.random_range(0..12) {
                            0 => f64::NAN,
                            v => f64::from(v),
                        })
                        .collect()
                })
                .collect();
            let score = |p: &[f64]| -> Vec<f64> {
                p.iter().zip(&modes).map(|(v, m)| m.score(*v)).collect()
            };
            let by_definition: Vec<usize> = (0..points.len())
                .filter(|&i| !points.iter().any(|o| dominates(&score(o), &score(&points[i]))))
                .collect();
            assert_eq!(pareto_front(&points, &modes), by_definition, "{points:?} {modes:?}");
        }
    }

    #[test]
    fn items_without_every_value_are_left_out() {
        let items =
            [(Some(1.0), Some(5.0)), (Some(0.5), None), (Some(2.0), Some(1.0)), (None, None)];
        let value = |t: &(Option<f64>, Option<f64>), k: usize| if k == 0 { t.0 } else { t.1 };
        let modes = [Mode::Min, Mode::Min];
        assert_eq!(pareto_front_where_finite(&items, &modes, value), [0, 2]);
        let infinite = [(Some(f64::INFINITY), Some(0.0))];
        assert!(pareto_front_where_finite(&infinite, &modes, value).is_empty());
    }

    #[test]
    fn hypervolume_is_the_dominated_area() {
        // Two steps under reference (4, 4): 3×1 + 1×2 (the second point's own strip).
        let area =
            hypervolume_2d(&[[1.0, 3.0], [3.0, 1.0], [2.0, 3.5], [f64::NAN, 0.0]], [4.0, 4.0]);
        assert_eq!(area, 3.0 * 1.0 + 1.0 * 2.0);
        assert_eq!(hypervolume_2d(&[[5.0, 0.0], [4.0, 1.0]], [4.0, 4.0]), 0.0);
        // Three objectives: a unit cube's corner and a slab, their union by inclusion-exclusion.
        let points = vec![vec![1.0, 1.0, 1.0], vec![0.0, 1.5, 1.5]];
        let union = 1.0 + 2.0 * 0.5 * 0.5 - 1.0 * 0.5 * 0.5;
        assert!((hypervolume(&points, &[2.0, 2.0, 2.0]) - union).abs() < 1e-12);
        let flat = [[1.0, 3.0], [3.0, 1.0]];
        let as_vecs: Vec<Vec<f64>> = flat.iter().map(|p| p.to_vec()).collect();
        assert_eq!(hypervolume(&as_vecs, &[4.0, 4.0]), hypervolume_2d(&flat, [4.0, 4.0]));
    }

    #[test]
    fn the_best_by_fronts_fill_whole_fronts_then_add_the_most_volume() {
        // Scores, higher is better: the first front is 0, 1, 2 (2 dominates 3); 3 and 4 next.
        let scores = vec![
            vec![-1.0, -10.0], // 0
            vec![-10.0, -1.0], // 1
            vec![-5.0, -5.0],  // 2
            vec![-6.0, -6.0],  // 3
            vec![-9.0, -9.0],  // 4
        ];
        assert_eq!(best_by_fronts(&scores, 3), [0, 1, 2]);
        assert_eq!(best_by_fronts(&scores, 4), [0, 1, 2, 3]);
        // Part of the first front, under the reference (11, 11): the middle point dominates the
        // most alone (36 against 10); then either extreme adds 4, and the first in
        // lexicographic order of losses is taken.
        assert_eq!(best_by_fronts(&scores, 1), [2]);
        assert_eq!(best_by_fronts(&scores, 2), [0, 2]);
        // Repeats of a point are taken only when distinct points run out.
        let same = vec![vec![-1.0, -1.0], vec![-1.0, -1.0], vec![-2.0, 0.0]];
        assert_eq!(best_by_fronts(&same, 2), [0, 2]);
        assert_eq!(best_by_fronts(&same, 3), [0, 1, 2]);
    }
}
