//! Pareto fronts of results with several objectives: the points no other point dominates (at
//! least as good in every objective and better in one).

use crate::metrics::Mode;

/// The indices of the points of `points` on the Pareto front, in order, each point's values
/// judged in the `modes` of their objectives (one per value). A NaN is worse than every
/// number; equal points are both on the front (neither dominates the other).
pub fn pareto_front(points: &[Vec<f64>], modes: &[Mode]) -> Vec<usize> {
    let score = |p: &[f64]| -> Vec<f64> { p.iter().zip(modes).map(|(v, m)| m.score(*v)).collect() };
    let scores: Vec<Vec<f64>> = points.iter().map(|p| score(p)).collect();
    (0..scores.len())
        .filter(|&i| !scores.iter().any(|other| dominates(other, &scores[i])))
        .collect()
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

    #[test]
    fn hypervolume_is_the_dominated_area() {
        // Two steps under reference (4, 4): 3×1 + 1×2 (the second point's own strip).
        let area =
            hypervolume_2d(&[[1.0, 3.0], [3.0, 1.0], [2.0, 3.5], [f64::NAN, 0.0]], [4.0, 4.0]);
        assert_eq!(area, 3.0 * 1.0 + 1.0 * 2.0);
        assert_eq!(hypervolume_2d(&[[5.0, 0.0], [4.0, 1.0]], [4.0, 4.0]), 0.0);
    }
}
