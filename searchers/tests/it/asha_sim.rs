//! ASHA against random search in a simulated sweep: 64 trials with synthetic learning curves,
//! 4 workers, 100 epochs each. Over 20 seeds, ASHA must find a final accuracy within noise of
//! the best random search finds while training at most 40% of its epochs.

use rtune_searchers::{Asha, Fifo, Mode};

use crate::problems::median;
use crate::sim::{curves, run};

const TRIALS: usize = 64;
const MAX_T: u64 = 100;
const WORKERS: usize = 4;

#[test]
fn asha_matches_random_search_with_a_fraction_of_the_epochs() {
    let mut gaps = Vec::new();
    let mut ratios = Vec::new();
    for seed in 0..20 {
        let c = curves(TRIALS, MAX_T, seed);
        let random = run(&c, MAX_T, WORKERS, &mut Fifo::new(), None);
        let mut asha = Asha::new().metric("acc").mode(Mode::Max).max_t(MAX_T as f64);
        let early = run(&c, MAX_T, WORKERS, &mut asha, None);

        let best_final = |o: &crate::sim::Outcome| {
            o.last.iter().filter(|(_, e)| *e == MAX_T).map(|(a, _)| *a).fold(f64::MIN, f64::max)
        };
        let (r, a) = (best_final(&random), best_final(&early));
        assert_eq!(random.epochs, TRIALS as u64 * MAX_T);
        let ratio = early.epochs as f64 / random.epochs as f64;
        println!("seed {seed}: random {r:.4} asha {a:.4} epochs {:.1}%", 100.0 * ratio);
        assert!(ratio <= 0.4, "seed {seed}: ASHA used {:.0}% of the epochs", 100.0 * ratio);
        gaps.push(a - r);
        ratios.push(ratio);
    }
    let gap = median(gaps.clone());
    // The curves carry ±0.003 noise per epoch: "within noise".
    assert!(gap >= -0.006, "median gap {gap}: {gaps:?}");
    println!("median gap {gap:.4}, median epoch ratio {:.3}", median(ratios));
}
