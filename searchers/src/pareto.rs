//! Pareto fronts of results with several objectives: the points no other point dominates (at
//! least as good in every objective and better in one).

use crate::metrics::Mode;

/// The indices of the points of `points` on the Pareto front, in order, each point's values
/// judged in the `modes` of their objectives (one per value). A NaN is worse than every
/// number; equal points are both on the front (neither dominates the other).
pub fn pareto_front(points: &[Vec<f64>], modes: &[Mode]) -> Vec<usize> {
    let score = |p: &[f64]| -> Vec<f64> { p.iter().zip(modes).map(|(v, m)| m.score(*v)).collect() };
    let scores: Vec<Vec<f64>> = points.iter().map(|p| score(p)).collect();
    let dominates = |a: &[f64], b: &[f64]| {
        a.iter().zip(b).all(|(x, y)| x >= y) && a.iter().zip(b).any(|(x, y)| x > y)
    };
    (0..scores.len())
        .filter(|&i| !scores.iter().any(|other| dominates(other, &scores[i])))
        .collect()
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
}
