//! Small numerical helpers shared by the policies (normal CDF and quantile for TPE's Parzen
//! estimators, numpy-compatible percentile and median for the schedulers). Private: they serve
//! the pipeline, they are not part of it.

use std::cmp::Ordering;

const SQRT_2: f64 = std::f64::consts::SQRT_2;

/// Complementary error function, relative error below 1.2e-7 everywhere (a Chebyshev fit,
/// Numerical Recipes' `erfcc`). Relative accuracy in the tails is what the truncated-normal
/// masses below need.
pub(crate) fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let ans = t * poly.exp();
    if x >= 0.0 { ans } else { 2.0 - ans }
}

/// Standard normal CDF Φ(x).
pub(crate) fn norm_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / SQRT_2)
}

/// Standard normal quantile Φ⁻¹(p) for `p ∈ (0, 1)` (Acklam's rational approximation, then
/// one Halley step). Clamps `p` away from 0 and 1.
pub(crate) fn norm_ppf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = if p.is_nan() { 0.5 } else { p.clamp(1e-300, 1.0 - 1e-16) };
    let p_low = 0.02425;
    let x = if p < p_low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - p_low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    // One Halley refinement step against our CDF.
    let e = norm_cdf(x) - p;
    let u = e * (2.0 * std::f64::consts::PI).sqrt() * (x * x / 2.0).exp();
    let refined = x - u / (1.0 + x * u / 2.0);
    if refined.is_finite() { refined } else { x }
}

/// `ln(Φ(b) − Φ(a))` for `a < b`, accurate in the tails. Narrow intervals use the midpoint
/// density (the difference of two nearly equal tail masses would cancel).
pub(crate) fn log_gauss_mass(a: f64, b: f64) -> f64 {
    if a.partial_cmp(&b) != Some(Ordering::Less) {
        return f64::NEG_INFINITY;
    }
    let width = b - a;
    let mid = 0.5 * (a + b);
    if width * mid.abs().max(1.0) < 1e-3 {
        // ∫φ over a narrow interval: φ(mid)·width·(1 + (mid² − 1)·width²/24).
        let corr = 1.0 + (mid * mid - 1.0) * width * width / 24.0;
        return -0.5 * mid * mid - 0.5 * (2.0 * std::f64::consts::PI).ln() + width.ln() + corr.ln();
    }
    let mass = if a >= 0.0 {
        0.5 * (erfc(a / SQRT_2) - erfc(b / SQRT_2))
    } else if b <= 0.0 {
        0.5 * (erfc(-b / SQRT_2) - erfc(-a / SQRT_2))
    } else {
        1.0 - 0.5 * erfc(-a / SQRT_2) - 0.5 * erfc(b / SQRT_2)
    };
    if mass > 0.0 {
        mass.ln()
    } else {
        // Both ends deep in one tail: fall back to the density at the nearer end.
        let near = if a >= 0.0 { a } else { -b };
        -0.5 * near * near - 0.5 * (2.0 * std::f64::consts::PI).ln() + width.min(1.0).ln()
    }
}

/// `Φ(b) − Φ(a)` in linear space, for sums over many kernels (no logarithm). Tail-aware, but a
/// tiny mass far in a tail may lose relative precision: callers fall back to
/// [`log_gauss_mass`] when a whole sum is tiny.
pub(crate) fn gauss_mass(a: f64, b: f64) -> f64 {
    if a.partial_cmp(&b) != Some(Ordering::Less) {
        return 0.0;
    }
    let width = b - a;
    let mid = 0.5 * (a + b);
    if width * mid.abs().max(1.0) < 1e-3 {
        let corr = 1.0 + (mid * mid - 1.0) * width * width / 24.0;
        return (-0.5 * mid * mid).exp() * INV_SQRT_2PI * width * corr;
    }
    let m = if a >= 0.0 {
        0.5 * (erfc(a / SQRT_2) - erfc(b / SQRT_2))
    } else if b <= 0.0 {
        0.5 * (erfc(-b / SQRT_2) - erfc(-a / SQRT_2))
    } else {
        1.0 - 0.5 * erfc(-a / SQRT_2) - 0.5 * erfc(b / SQRT_2)
    };
    m.max(0.0)
}

/// `1/√(2π)`.
pub(crate) const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `ln Σ exp(xᵢ)`, `-inf` for an empty slice or all `-inf`.
#[cfg(test)]
pub(crate) fn logsumexp(xs: &[f64]) -> f64 {
    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return m;
    }
    m + xs.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// `x` limited to `[lo, hi]` without `f64::clamp`'s panics (NaN bounds, `lo > hi`): bad
/// inputs give some value instead of a crash.
pub(crate) fn clamp_f64(x: f64, lo: f64, hi: f64) -> f64 {
    x.max(lo).min(hi)
}

/// Streaming `ln Σ exp(xᵢ)` (one pass, no allocation).
pub(crate) fn logsumexp_iter(xs: impl Iterator<Item = f64>) -> f64 {
    let mut m = f64::NEG_INFINITY;
    let mut s = 0.0;
    for x in xs {
        if x == f64::NEG_INFINITY || x.is_nan() {
            continue;
        }
        if x > m {
            s = s * (m - x).exp() + 1.0;
            m = x;
        } else {
            s += (x - m).exp();
        }
    }
    if s > 0.0 { m + s.ln() } else { f64::NEG_INFINITY }
}

/// Total order on scores for sorting (callers keep NaN out, or place it themselves).
pub(crate) fn cmp_f64(a: &f64, b: &f64) -> Ordering {
    a.total_cmp(b)
}

/// NumPy's `_lerp(a, b, t)`, the interpolation of its `linear` percentile, bit for bit on finite
/// values: `a + (b − a)·t`, except `b − (b − a)·(1 − t)` where `t ≥ 0.5` (the two differ in the
/// last bit for many inputs, so a score exactly on a cutoff needs this form to be judged as in
/// Ray).
///
/// Where NumPy's arithmetic would turn an infinite neighbour into NaN (`inf·0`, `inf − inf`) or
/// overflow, this takes the limit instead: an infinite neighbour with weight gives that
/// infinity, one without weight (`t = 0` for `b`) is ignored, and a result outside `[a, b]`
/// (only an overflowing `b − a` gets there) is clamped into it.
pub(crate) fn np_lerp(a: f64, b: f64, t: f64) -> f64 {
    if a.is_finite() && b.is_finite() {
        let d = b - a;
        let x = if t >= 0.5 { b - d * (1.0 - t) } else { a + d * t };
        return if x.is_nan() { a } else { x.max(a).min(b) };
    }
    if a == b || t <= 0.0 {
        return a;
    }
    match (a == f64::NEG_INFINITY, b == f64::INFINITY) {
        (true, false) => a,
        (false, true) => b,
        // −inf and +inf both with weight: the nearer one.
        _ => {
            if t < 0.5 {
                a
            } else {
                b
            }
        }
    }
}

/// NumPy's default (`linear`) percentile of an ascending slice without NaN, `percent` in
/// `[0, 100]` as NumPy takes it: `q = percent / 100`, virtual index `h = (n − 1)·q`, neighbours
/// `floor(h)` and `floor(h) + 1` (both the last element once `h ≥ n − 1`), weight
/// `t = h − floor(h)`, then [`np_lerp`]. `None` if empty.
pub(crate) fn percentile_sorted(sorted: &[f64], percent: f64) -> Option<f64> {
    let n = sorted.len();
    let last = *sorted.last()?;
    let q = percent.clamp(0.0, 100.0) / 100.0;
    let h = (n - 1) as f64 * q;
    if h >= (n - 1) as f64 {
        return Some(last);
    }
    let lo = h.floor();
    let i = lo as usize;
    let (a, b) = (*sorted.get(i)?, *sorted.get(i + 1)?);
    Some(np_lerp(a, b, h - lo))
}

/// NumPy's `nanpercentile` of a slice sorted with `f64::total_cmp` (which puts NaNs of either
/// sign at the two ends): the NaNs are left out, then [`percentile_sorted`]. `None` if nothing
/// but NaN (NumPy answers NaN there, which stops no trial).
pub(crate) fn nanpercentile_sorted(sorted: &[f64], percent: f64) -> Option<f64> {
    let start = sorted.iter().position(|x| !x.is_nan())?;
    let end = sorted.iter().rposition(|x| !x.is_nan())?;
    percentile_sorted(sorted.get(start..=end)?, percent)
}

/// NumPy's pairwise summation of float64 (`np.add.reduce` on a contiguous array): eight
/// accumulators over blocks of up to 128 values, halving above that.
fn np_pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut r = 0.0;
        for x in a {
            r += x;
        }
        r
    } else if n <= 128 {
        let mut r = [0.0; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - n % 8 {
            for (j, acc) in r.iter_mut().enumerate() {
                *acc += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for x in &a[i..] {
            res += x;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        np_pairwise_sum(&a[..n2]) + np_pairwise_sum(&a[n2..])
    }
}

/// `np.mean`, bit for bit: `(0 + pairwise sum) / n`. `None` if empty.
pub(crate) fn np_mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    Some((0.0 + np_pairwise_sum(values)) / values.len() as f64)
}

/// `np.median` of values without NaN: the middle value, or the `np.mean` of the two middle
/// ones. `None` if empty.
pub(crate) fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(cmp_f64);
    let n = values.len();
    if n == 0 {
        return None;
    }
    if n % 2 == 1 { Some(values[n / 2]) } else { np_mean(&values[n / 2 - 1..=n / 2]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_matches_reference_values() {
        let refs = [
            (0.0, 1.0),
            (0.5, 0.479_500_122_186_953_5),
            (1.0, 0.157_299_207_050_285_13),
            (2.0, 0.004_677_734_981_047_266),
            (3.0, 2.209_049_699_858_544e-5),
            (5.0, 1.537_459_794_428_035e-12),
            (-1.0, 1.842_700_792_949_715),
        ];
        for (x, want) in refs {
            let got = erfc(x);
            assert!(((got - want) / want).abs() < 2e-7, "erfc({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn ppf_inverts_cdf() {
        assert!((norm_ppf(0.975) - 1.959_963_984_540_054).abs() < 1e-6);
        for i in -60..=60 {
            let x = f64::from(i) / 10.0;
            let back = norm_ppf(norm_cdf(x));
            assert!((back - x).abs() < 1e-5 * x.abs().max(1.0), "{x} -> {back}");
        }
    }

    #[test]
    fn gauss_mass_is_consistent() {
        assert!((log_gauss_mass(-1.0, 1.0).exp() - 0.682_689_492_137_085_9).abs() < 1e-6);
        let tail = log_gauss_mass(8.0, 8.0001).exp();
        let approx = (-32.0f64).exp() / (2.0 * std::f64::consts::PI).sqrt() * 0.0001;
        assert!((tail / approx - 1.0).abs() < 1e-2, "{tail} {approx}");
        assert!(log_gauss_mass(30.0, 31.0).is_finite());
        assert_eq!(log_gauss_mass(1.0, 1.0), f64::NEG_INFINITY);
        for (a, b) in [(-1.0, 1.0), (0.5, 2.0), (-3.0, -2.5), (2.0, 2.0005), (-0.2, 0.1)] {
            let lin = gauss_mass(a, b);
            assert!((lin.ln() - log_gauss_mass(a, b)).abs() < 1e-5, "{a} {b}");
        }
    }

    #[test]
    fn percentile_matches_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&v, 75.0), Some(3.25));
        assert_eq!(percentile_sorted(&v, 0.0), Some(1.0));
        assert_eq!(percentile_sorted(&v, 100.0), Some(4.0));
        assert_eq!(percentile_sorted(&[7.0], 50.0), Some(7.0));
        assert_eq!(percentile_sorted(&[], 50.0), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert!((logsumexp(&[0.0, 0.0]) - 2f64.ln()).abs() < 1e-12);
        let xs = [-3.0, 1.0, f64::NEG_INFINITY, 0.5];
        assert!((logsumexp_iter(xs.iter().copied()) - logsumexp(&xs)).abs() < 1e-12);
    }

    /// `a + (b − a)·t`, the formula NumPy does not use where `t ≥ 0.5`.
    fn naive_lerp(a: f64, b: f64, t: f64) -> f64 {
        a + (b - a) * t
    }

    /// Values where the textbook interpolation and NumPy's differ in the last bit. The expected
    /// numbers are what NumPy 2.4 answers: `np.percentile([0.1, 0.4], 75)` and so on (75 is
    /// ASHA's percentile at reduction factor 4).
    #[test]
    fn percentile_rounds_as_numpy_where_the_textbook_formula_does_not() {
        let cases = [
            // (sorted values, percent, NumPy's answer, the textbook formula's)
            (vec![0.1, 0.4], 75.0, 0.325, 0.325_000_000_000_000_07),
            (vec![0.1, 1.3], 75.0, 1.0, 0.999_999_999_999_999_9),
            (vec![0.1, 1.1], 75.0, 0.850_000_000_000_000_1, 0.85),
            (vec![-0.4, -0.1], 75.0, -0.175_000_000_000_000_02, -0.175),
        ];
        for (v, pct, numpy, textbook) in cases {
            let t = (v.len() - 1) as f64 * (pct / 100.0);
            assert_eq!(naive_lerp(v[0], v[1], t), textbook, "{v:?}: the textbook formula");
            assert_ne!(numpy, textbook, "{v:?}: the case must tell the formulas apart");
            assert_eq!(percentile_sorted(&v, pct), Some(numpy), "{v:?} at {pct}");
        }
        // A search: on a grid of neighbours, t ≥ 0.5 often tells the formulas apart, and every
        // time ours is NumPy's `b − (b − a)·(1 − t)`; below 0.5 it is the textbook formula.
        let mut differ = 0;
        for i in 1..60 {
            for j in i + 1..i + 40 {
                let (a, b) = (f64::from(i) / 10.0, f64::from(j) / 10.0);
                for pct in [50.0, 75.0, 80.0, 66.666_666_666_666_67, 25.0, 10.0] {
                    let t = pct / 100.0;
                    let got = percentile_sorted(&[a, b], pct).unwrap();
                    if t >= 0.5 {
                        assert_eq!(got, b - (b - a) * (1.0 - t));
                        differ += usize::from(got != naive_lerp(a, b, t));
                    } else {
                        assert_eq!(got, naive_lerp(a, b, t));
                    }
                }
            }
        }
        assert!(differ > 100, "only {differ} grid cases differ");
    }

    /// NumPy divides the percent by 100 before the index: at reduction factor 6, Ray asks for
    /// `(1 − 1/6)·100` = 83.33…, whose `/ 100` is one bit above `1 − 1/6`; NumPy answers
    /// `np.percentile([0, 0.1, 0.2, 0.30000000000000004], (1 - 1/6) * 100)` = 0.25000000000000006.
    #[test]
    fn percentile_takes_the_percent_through_the_same_division_as_numpy() {
        let v = [0.0, 0.1, 0.2, 0.1 + 0.2];
        let pct = (1.0 - 1.0 / 6.0) * 100.0;
        assert_ne!(pct / 100.0, 1.0 - 1.0 / 6.0);
        assert_eq!(percentile_sorted(&v, pct), Some(0.250_000_000_000_000_06));
        let h: f64 = 3.0 * (1.0 - 1.0 / 6.0);
        assert_eq!(naive_lerp(v[2], v[3], h - h.floor()), 0.25, "the direct fraction");
    }

    #[test]
    fn nanpercentile_leaves_nan_of_either_sign_out() {
        let mut v = vec![0.4, f64::NAN, -f64::NAN, 0.1];
        v.sort_by(cmp_f64);
        assert!(v[0].is_nan() && v[3].is_nan(), "total_cmp puts NaNs at both ends: {v:?}");
        assert_eq!(
            nanpercentile_sorted(&v, 75.0),
            Some(0.325),
            "np.nanpercentile([.1, nan, .4], 75)"
        );
        assert_eq!(nanpercentile_sorted(&[f64::NAN, f64::NAN], 50.0), None);
        assert_eq!(nanpercentile_sorted(&[], 50.0), None);
    }

    /// Infinite neighbours: the limit, where NumPy's arithmetic gives NaN.
    #[test]
    fn percentile_next_to_an_infinity_takes_the_limit() {
        let (ninf, inf) = (f64::NEG_INFINITY, f64::INFINITY);
        assert_eq!(percentile_sorted(&[ninf, 1.0], 50.0), Some(ninf));
        assert_eq!(percentile_sorted(&[ninf, 1.0], 25.0), Some(ninf));
        assert_eq!(percentile_sorted(&[1.0, inf], 50.0), Some(inf));
        assert_eq!(percentile_sorted(&[1.0, inf], 25.0), Some(inf));
        // h = 1 exactly: the upper neighbour has no weight.
        assert_eq!(percentile_sorted(&[1.0, 2.0, inf], 50.0), Some(2.0));
        assert_eq!(percentile_sorted(&[ninf, ninf, 1.0], 50.0), Some(ninf));
        assert_eq!(percentile_sorted(&[inf, inf], 50.0), Some(inf));
        assert_eq!(percentile_sorted(&[ninf, inf], 25.0), Some(ninf));
        assert_eq!(percentile_sorted(&[ninf, inf], 75.0), Some(inf));
        assert_eq!(percentile_sorted(&[1.0, inf], 100.0), Some(inf));
        // Finite neighbours whose difference overflows stay between them.
        let big = f64::MAX;
        let c = percentile_sorted(&[-big, big], 75.0).unwrap();
        assert!((-big..=big).contains(&c), "{c}");
        assert_eq!(percentile_sorted(&[-big, big], 0.0), Some(-big));
    }

    /// `np.mean` sums pairwise: `np.mean([0.1, 0.2, …, 0.8])` is 0.45 where a running sum gives
    /// 0.44999999999999996.
    #[test]
    fn mean_sums_as_numpy() {
        let v: Vec<f64> = (1..=8).map(|i| f64::from(i) / 10.0).collect();
        assert_eq!(v.iter().sum::<f64>() / 8.0, 0.449_999_999_999_999_96);
        assert_eq!(np_mean(&v), Some(0.45));
        assert_eq!(np_mean(&[]), None);
        assert_eq!(np_mean(&[2.0]), Some(2.0));
        // Above one block of 128 the sum halves; it still sums every value once.
        let long: Vec<f64> = (0..1000).map(f64::from).collect();
        assert_eq!(np_mean(&long), Some(499.5));
        assert_eq!(median(&mut [f64::NEG_INFINITY, 1.0]), Some(f64::NEG_INFINITY));
    }
}
