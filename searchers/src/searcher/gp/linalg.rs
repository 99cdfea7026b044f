//! The GP's dense linear algebra on row-major n × n matrices: the Cholesky factor, triangular
//! solves (one right-hand side, or many at once), and the inverse from the factor. The inner
//! loops run over contiguous rows, as dot products in four lanes or as row updates, so that
//! they vectorise: at 500 trials a fit is a few hundred of these n³ operations.

/// `a · b`, summed in four lanes.
pub(super) fn dot(a: &[f64], b: &[f64]) -> f64 {
    let (a, b) = (&a[..a.len().min(b.len())], &b[..a.len().min(b.len())]);
    let mut lanes = [0.0; 4];
    let (head, tail) = (a.len() / 4 * 4, a.len() % 4);
    for (x, y) in a[..head].chunks_exact(4).zip(b[..head].chunks_exact(4)) {
        for k in 0..4 {
            lanes[k] += x[k] * y[k];
        }
    }
    let rest: f64 = (0..tail).map(|k| a[head + k] * b[head + k]).sum();
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + rest
}

/// The lower Cholesky factor of the symmetric positive-definite `a`; a failing pivot is
/// floored (the kernel's jitter keeps it from happening in practice).
pub(super) fn cholesky(a: &[f64], n: usize) -> Vec<f64> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s = a[i * n + j] - dot(&l[i * n..i * n + j], &l[j * n..j * n + j]);
            l[i * n + j] = if i == j { s.max(1e-12).sqrt() } else { s / l[j * n + j] };
        }
    }
    l
}

/// `L⁻¹ b` for the lower triangular `l`.
pub(super) fn forward(l: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut x = vec![0.0; n];
    for i in 0..n {
        x[i] = (b[i] - dot(&l[i * n..i * n + i], &x[..i])) / l[i * n + i];
    }
    x
}

/// `L⁻ᵀ b` for the lower triangular `l`.
pub(super) fn backward(l: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut x = b.to_vec();
    for i in (0..n).rev() {
        x[i] /= l[i * n + i];
        let xi = x[i];
        // Row i of L is column i of Lᵀ: what x[i] takes from each earlier unknown.
        for (xk, lik) in x[..i].iter_mut().zip(&l[i * n..i * n + i]) {
            *xk -= lik * xi;
        }
    }
    x
}

/// `L⁻¹ B` in place, for `b` holding `m` right-hand sides as its columns (n × m, row-major):
/// row by row, each an update by the rows above it.
pub(super) fn forward_many(l: &[f64], b: &mut [f64], n: usize, m: usize) {
    for i in 0..n {
        let (done, rest) = b.split_at_mut(i * m);
        let row = &mut rest[..m];
        for (k, &lik) in l[i * n..i * n + i].iter().enumerate() {
            if lik != 0.0 {
                for (r, v) in row.iter_mut().zip(&done[k * m..k * m + m]) {
                    *r -= lik * v;
                }
            }
        }
        let pivot = 1.0 / l[i * n + i];
        row.iter_mut().for_each(|r| *r *= pivot);
    }
}

/// `K⁻¹ = L⁻ᵀ L⁻¹` from the lower Cholesky factor `l` of `K`.
pub(super) fn inverse_from(l: &[f64], n: usize) -> Vec<f64> {
    // The rows of M = L⁻¹ (lower triangular): M[i] = (e_i − Σ_{k<i} L[i][k] M[k]) / L[i][i].
    let mut m = vec![0.0; n * n];
    for i in 0..n {
        let (done, rest) = m.split_at_mut(i * n);
        let row = &mut rest[..=i];
        for (k, &lik) in l[i * n..i * n + i].iter().enumerate() {
            if lik != 0.0 {
                for (r, v) in row[..=k].iter_mut().zip(&done[k * n..k * n + k + 1]) {
                    *r -= lik * v;
                }
            }
        }
        row[i] += 1.0;
        let pivot = 1.0 / l[i * n + i];
        row.iter_mut().for_each(|r| *r *= pivot);
    }
    // K⁻¹[a][b] = Σ_k M[k][a] M[k][b], over the rows k ≥ a, b.
    let mut inverse = vec![0.0; n * n];
    for k in 0..n {
        let mk = &m[k * n..k * n + k + 1];
        for (a, &mka) in mk.iter().enumerate() {
            if mka != 0.0 {
                for (r, v) in inverse[a * n..a * n + k + 1].iter_mut().zip(mk) {
                    *r += mka * v;
                }
            }
        }
    }
    inverse
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symmetric positive-definite matrix of `n`, from random rows.
    fn spd(n: usize) -> Vec<f64> {
        let g: Vec<f64> = (0..n * n).map(|i| ((i * 7919 % 97) as f64 / 97.0) - 0.5).collect();
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = (0..n).map(|k| g[i * n + k] * g[j * n + k]).sum::<f64>()
                    + if i == j { 1.0 } else { 0.0 };
            }
        }
        a
    }

    /// The factor reproduces the matrix, the solves solve, and the inverse is one, against
    /// plain definitions.
    #[test]
    fn factor_solves_and_inverse_agree_with_their_definitions() {
        let n = 13;
        let a = spd(n);
        let l = cholesky(&a, n);
        for i in 0..n {
            for j in 0..n {
                let back: f64 = (0..n).map(|k| l[i * n + k] * l[j * n + k]).sum();
                assert!((back - a[i * n + j]).abs() < 1e-10);
            }
        }
        let b: Vec<f64> = (0..n).map(|i| (i as f64).sin()).collect();
        let x = backward(&l, &forward(&l, &b, n), n);
        for i in 0..n {
            let ax: f64 = (0..n).map(|k| a[i * n + k] * x[k]).sum();
            assert!((ax - b[i]).abs() < 1e-10, "{i}");
        }
        let inverse = inverse_from(&l, n);
        for i in 0..n {
            for j in 0..n {
                let e: f64 = (0..n).map(|k| a[i * n + k] * inverse[k * n + j]).sum();
                assert!((e - if i == j { 1.0 } else { 0.0 }).abs() < 1e-10, "{i} {j}");
            }
        }
        // Three right-hand sides at once, as three single solves.
        let m = 3;
        let mut many: Vec<f64> = (0..n * m).map(|i| (i as f64 * 0.37).cos()).collect();
        let columns: Vec<Vec<f64>> = (0..m)
            .map(|c| forward(&l, &(0..n).map(|i| many[i * m + c]).collect::<Vec<_>>(), n))
            .collect();
        forward_many(&l, &mut many, n, m);
        for c in 0..m {
            for i in 0..n {
                assert!((many[i * m + c] - columns[c][i]).abs() < 1e-12);
            }
        }
        assert!((dot(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1.0; 5]) - 15.0).abs() < 1e-15);
    }
}
