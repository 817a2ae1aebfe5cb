//! Interval arithmetic shared by the families: the normal quantile for 95%, normal intervals
//! floored at what a sketch proves it saw, and exact (Garwood) Poisson intervals for small
//! retained counts, where a normal approximation would claim far more precision than a handful
//! of samples can give.

/// The two-sided 95% standard normal quantile.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The normal 95% interval `value ± 1.96 sd`, its lower end raised to `floor`: what the sketch
/// proves it saw (HLL's distinct coupons, or its non-zero registers, each at least one distinct
/// item), as DataSketches floors its HLL lower bound. The width is the estimator's own standard
/// error where the sketch is: near 0 for HLL's sparse coupons and a HIP accumulator just past
/// them, growing with the count (see `HyperLogLog`'s estimate).
pub fn normal_interval(value: f64, sd: f64, floor: f64) -> (f64, f64) {
    ((value - Z95 * sd).max(floor), value + Z95 * sd)
}

/// Tail probability on each side of a two-sided 95% interval.
const TAIL: f64 = 0.025;

/// Counts above this use the Wilson–Hilferty approximation of the chi-square quantiles, whose
/// relative error there is below 1e-4; below it the Poisson CDF is inverted exactly.
const EXACT_LIMIT: u64 = 400;

/// A two-sided 95% confidence interval for the mean `λ` of a Poisson variable observed as `c`
/// (Garwood's interval: `χ²(0.025; 2c)/2 ≤ λ ≤ χ²(0.975; 2c+2)/2`). Its coverage is at least 95%
/// for every λ, which is what makes small intersections' bounds honest.
pub fn poisson_interval(c: u64) -> (f64, f64) {
    if c > EXACT_LIMIT {
        let c = c as f64;
        return (
            chi_square_quantile(TAIL, 2.0 * c) / 2.0,
            chi_square_quantile(1.0 - TAIL, 2.0 * c + 2.0) / 2.0,
        );
    }
    let lower = if c == 0 {
        0.0
    } else {
        // P(X >= c | λ) = TAIL  <=>  P(X <= c-1 | λ) = 1 - TAIL; the CDF falls as λ grows.
        solve_decreasing(|l| poisson_cdf(c - 1, l), 1.0 - TAIL, c as f64)
    };
    let upper = solve_decreasing(|l| poisson_cdf(c, l), TAIL, c as f64);
    (lower, upper)
}

/// `P(X <= c)` for `X ~ Poisson(λ)`, summed in log space so large λ does not underflow.
fn poisson_cdf(c: u64, lambda: f64) -> f64 {
    if lambda <= 0.0 {
        return 1.0;
    }
    let ln_l = lambda.ln();
    let mut ln_term = -lambda;
    let mut sum = ln_term.exp();
    for i in 1..=c {
        ln_term += ln_l - (i as f64).ln();
        sum += ln_term.exp();
    }
    sum.min(1.0)
}

/// Finds λ ≥ 0 with `f(λ) = target` for a decreasing `f`, by bisection from a bracket around
/// `scale`.
fn solve_decreasing(f: impl Fn(f64) -> f64, target: f64, scale: f64) -> f64 {
    let mut lo = 0.0;
    let mut hi = scale.max(1.0) * 2.0 + 10.0;
    while f(hi) > target {
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if f(mid) > target {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-12 * hi {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// Wilson–Hilferty approximation of the chi-square quantile with `dof` degrees of freedom.
pub fn chi_square_quantile(p: f64, dof: f64) -> f64 {
    let z = normal_quantile(p);
    let a = 2.0 / (9.0 * dof);
    dof * (1.0 - a + z * a.sqrt()).powi(3)
}

/// The standard normal quantile (Acklam's rational approximation, relative error < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
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
    let p_low = 0.02425;
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    if p < p_low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - p_low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -normal_quantile(1.0 - p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantile_matches_tables() {
        assert!((normal_quantile(0.975) - Z95).abs() < 1e-8);
        assert!((normal_quantile(0.5)).abs() < 1e-12);
        assert!((normal_quantile(0.001) + 3.090_232_306).abs() < 1e-7);
    }

    #[test]
    fn garwood_intervals_match_published_values() {
        // Standard tables of exact Poisson 95% limits.
        let cases: [(u64, f64, f64); 4] = [
            (0, 0.0, 3.689),
            (1, 0.0253, 5.572),
            (10, 4.795, 18.390),
            (100, 81.364, 121.627),
        ];
        for (c, lo, hi) in cases {
            let (l, h) = poisson_interval(c);
            assert!(
                (l - lo).abs() < 2e-3 * lo.max(1.0),
                "c={c}: lower {l} vs {lo}"
            );
            assert!((h - hi).abs() < 2e-3 * hi, "c={c}: upper {h} vs {hi}");
        }
    }

    #[test]
    fn exact_and_approximate_regimes_agree_at_the_switch() {
        let exact_at = |c: u64| {
            let lower = solve_decreasing(|l| poisson_cdf(c - 1, l), 1.0 - TAIL, c as f64);
            let upper = solve_decreasing(|l| poisson_cdf(c, l), TAIL, c as f64);
            (lower, upper)
        };
        let c = EXACT_LIMIT + 1;
        let (el, eh) = exact_at(c);
        let (al, ah) = poisson_interval(c);
        assert!((el - al).abs() / el < 1e-4, "{el} vs {al}");
        assert!((eh - ah).abs() / eh < 1e-4, "{eh} vs {ah}");
    }
}
