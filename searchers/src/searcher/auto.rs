//! `auto`: the searcher a sweep's space, budget and objectives call for (the default of sweep
//! files, `search = "auto"`).

use crate::space::domain::Domain;
use crate::space::{Param, SearchSpace};

/// The most trials `auto` gives the GP over numeric params (CMA-ES leads from 250: Hartmann-6,
/// Rosenbrock-10 and Levy-10 at 250 and 500 trials) and over params with categorical ones (it
/// led TPE on all four HPOLib tables at 100 and 500 trials; its cost is cubic in the trials),
/// and the fewest it gives NSGA-II for several objectives.
const GP_TRIALS: u64 = 200;
const GP_TRIALS_CATEGORICAL: u64 = 500;
const NSGA2_TRIALS: u64 = 500;

/// Which searcher a sweep calls for, by the name a sweep file gives it (`random`, `tpe`,
/// `nsga2`, `gp`, `cmaes`), and why, in a phrase: what `search = "auto"` runs. `objectives` is
/// how many the sweep ranks by (0: none), `budget` its trial count (None: unbounded),
/// `explores` whether its scheduler explores the params itself (PBT), `constrained` whether it
/// has constraints (CMA-ES takes none). The rule, with the figures behind it, is
/// docs/sweep-files.md's "Which searcher: auto"; in order:
///
/// * a grid, nothing to search, PBT (which explores itself), no metric, or 10 trials or fewer
///   (every model's first 10 are random draws): random search;
/// * several objectives: TPE up to 500 trials, NSGA-II from there (and unbounded);
/// * numeric params only: the GP up to 200 trials, CMA-ES past them (the GP up to 500 with
///   constraints);
/// * with categorical params: the GP up to 500 trials (one-hot);
/// * past those, or unbounded: TPE.
pub fn auto(
    space: &SearchSpace,
    objectives: usize,
    budget: Option<u64>,
    explores: bool,
    constrained: bool,
) -> (&'static str, String) {
    let sampled = space.sampled();
    let trials = budget.map_or("no trial count".to_owned(), |n| format!("{n} trials"));
    let categorical = |(_, p): &&(String, &Param)| matches!(p, Param::Sample(Domain::Choice(_)));
    let choices = sampled.iter().filter(categorical).count();
    if sampled.iter().any(|(_, p)| matches!(p, Param::Grid(_))) {
        return ("random", "the space has a grid_search: its every point runs".into());
    }
    if sampled.is_empty() {
        return ("random", "the space has no param to search".into());
    }
    if explores {
        return ("random", "PBT explores the params itself from random draws".into());
    }
    if objectives == 0 {
        return ("random", "no metric to rank trials by".into());
    }
    if budget.is_some_and(|n| n <= 10) {
        return ("random", format!("{trials}: a model's first 10 trials are random draws"));
    }
    let numeric = format!("{} numeric params and {trials}", sampled.len());
    match budget {
        _ if objectives > 1 && budget.is_some_and(|n| n < NSGA2_TRIALS) => {
            ("tpe", format!("{objectives} objectives and {trials}"))
        }
        _ if objectives > 1 => {
            ("nsga2", format!("{objectives} objectives and {trials} (TPE below {NSGA2_TRIALS})"))
        }
        Some(n) if n <= GP_TRIALS_CATEGORICAL && choices > 0 => {
            ("gp", format!("{} params ({choices} categorical) and {trials}", sampled.len()))
        }
        Some(n) if n <= GP_TRIALS && choices == 0 => ("gp", numeric),
        Some(_) if choices == 0 && !constrained => {
            ("cmaes", format!("{numeric} (the GP up to {GP_TRIALS})"))
        }
        Some(n) if n <= GP_TRIALS_CATEGORICAL && choices == 0 => {
            ("gp", format!("{numeric}, constrained (CMA-ES takes no constraints)"))
        }
        Some(_) => ("tpe", format!("{trials} (the GP up to {GP_TRIALS_CATEGORICAL})")),
        None => ("tpe", trials),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` picks by the rule its docs write down, for each kind of space, budget, objective
    /// and scheduler, and says why.
    #[test]
    fn auto_picks_by_space_budget_and_objectives() {
        use crate::space::domain::{choice, loguniform, randint};
        use crate::space::grid_search;
        let numeric =
            SearchSpace::new().add("lr", loguniform(1e-4, 1e-1).unwrap()).add("n", randint(1, 9));
        let mixed = numeric.clone().add("act", choice(["relu", "tanh"]));
        let grid = numeric.clone().add("g", grid_search([1, 2]));
        let constants = SearchSpace::new().add("lr", 0.1);
        // (space, objectives, budget, PBT, pick, why)
        type Case<'a> = (&'a SearchSpace, usize, Option<u64>, bool, &'a str, &'a str);
        let cases: [Case<'_>; 17] = [
            (&numeric, 1, Some(50), false, "gp", "2 numeric params and 50 trials"),
            (&numeric, 1, Some(200), false, "gp", "200 trials"),
            (&numeric, 1, Some(201), false, "cmaes", "201 trials (the GP up to 200)"),
            (&numeric, 1, None, false, "tpe", "no trial count"),
            (&mixed, 1, Some(50), false, "gp", "3 params (1 categorical) and 50 trials"),
            (&mixed, 1, Some(500), false, "gp", "3 params (1 categorical) and 500 trials"),
            (&mixed, 1, Some(501), false, "tpe", "501 trials (the GP up to 500)"),
            (&mixed, 1, None, false, "tpe", "no trial count"),
            (&numeric, 2, Some(100), false, "tpe", "2 objectives and 100 trials"),
            (&mixed, 2, Some(500), false, "nsga2", "2 objectives and 500 trials"),
            (&grid, 1, Some(50), false, "random", "grid_search"),
            (&constants, 1, Some(50), false, "random", "no param to search"),
            (&numeric, 1, Some(50), true, "random", "PBT explores"),
            (&numeric, 0, Some(50), false, "random", "no metric"),
            (&numeric, 1, Some(10), false, "random", "10 trials: a model's first 10"),
            (&numeric, 1, Some(400), false, "cmaes", "2 numeric params and 400 trials"),
            (&numeric, 1, Some(1000), false, "cmaes", "1000 trials"),
        ];
        for (space, objectives, budget, explores, kind, why) in cases {
            let (chosen, reason) = auto(space, objectives, budget, explores, false);
            assert_eq!(chosen, kind, "{reason}");
            assert!(reason.contains(why), "{kind}: {reason}");
        }
        // With constraints (CMA-ES takes none) past 200 trials over numeric params: the GP up
        // to 500, TPE past them; below 200, constraints change nothing.
        let constrained = [
            (Some(400), "gp", "constrained (CMA-ES takes no constraints)"),
            (Some(501), "tpe", "501 trials (the GP up to 500)"),
            (Some(100), "gp", "2 numeric params and 100 trials"),
        ];
        for (budget, kind, why) in constrained {
            let (chosen, reason) = auto(&numeric, 1, budget, false, true);
            assert_eq!(chosen, kind, "{reason}");
            assert!(reason.contains(why), "{kind}: {reason}");
        }
    }
}
