//! Sweep overhead, measured end to end with real worker processes (no timing asserts anywhere):
//!
//! * `fit_loop`: 30 plain `TorchTrainer::fit` runs of 1 worker that report once, one after the
//!   other (the baseline: what a hand-written loop of trainings costs per run);
//! * `tuner_200`: the same trainer swept 200 times by the `Tuner` (trials run side by side as
//!   the machine's CPUs allow): trials per second, end to end;
//! * `results_8x500`: 8 trials of 1 worker reporting 500 times each, persistence on (every row
//!   written to result.json and progress.csv): results per second;
//! * `results_8x5000`: the same with 5,000 reports each, where start-up no longer counts;
//! * `rss_10000`: 10,000 one-report trials through one Tuner; the driver's resident memory
//!   after 1,000, 5,000 and 10,000 finished trials (read by a callback).
//!
//! Workers start warm (forked by the driver's fork server); `RTUNE_WARM_START=0` measures
//! exec'd workers instead.
//!
//! `cargo bench --bench sweep` prints one line per workload; `cargo bench --bench sweep -- NAME`
//! runs only the workloads whose names contain NAME.

use std::sync::Mutex;
use std::time::Instant;

use rtune::search::{SearchSpace, grid_search};
use rtune::{Mode, RunConfig, ScalingConfig, TorchTrainer, TrainContext, TuneConfig, Tuner};

fn report_n(ctx: &mut TrainContext) -> anyhow::Result<()> {
    let n = ctx.params().get::<u64>("reports")?;
    for i in 0..n {
        ctx.report([("score", i as f64)], None)?;
    }
    Ok(())
}

fn trainer(reports: u64) -> TorchTrainer {
    TorchTrainer::new(report_n)
        .train_loop_config(rtune::Params::new().with("reports", reports))
        .scaling(ScalingConfig::workers(1))
}

fn sweep(dir: &std::path::Path, name: &str, trials: i64, reports: u64) -> anyhow::Result<f64> {
    let space = SearchSpace::new().add("i", grid_search(0..trials));
    let started = Instant::now();
    let grid = Tuner::new(trainer(reports), space)
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max))
        .run_config(RunConfig::new(name).storage_path(dir))
        .fit()?;
    anyhow::ensure!(grid.trials.len() == trials as usize && grid.errors().is_empty());
    Ok(started.elapsed().as_secs_f64())
}

/// The driver's resident memory in MB (VmRSS).
fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// Notes the driver's RSS when 1,000, 5,000 and 10,000 trials have completed.
#[derive(Default)]
struct RssProbe(Mutex<(u64, Vec<(u64, f64)>)>);

impl rtune::callback::Callback for RssProbe {
    fn on_trial_complete(&self, _: &rtune::callback::TrialInfo) -> rtune::Result<()> {
        let mut state = self.0.lock().unwrap();
        state.0 += 1;
        if [1_000, 5_000, 10_000].contains(&state.0) {
            let n = state.0;
            state.1.push((n, rss_mb()));
        }
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    rtune::init();
    // `cargo test --benches` runs bench targets without `--bench`: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let dir = tempfile::tempdir()?;
    if wanted("fit_loop") {
        fit_loop(dir.path())?;
    }
    if wanted("tuner_200") {
        let seconds = sweep(dir.path(), "tuner_200", 200, 1)?;
        println!("tuner_200      200 trials in {seconds:.2} s: {:.1} trials/s", 200.0 / seconds);
    }
    if wanted("results_8x500") {
        // The driver's fork server starts with its first sweep (about 0.3 s of CPU once per
        // driver process): started here, whatever ran before, so the figure is the sweep's own.
        sweep(dir.path(), "warm_up", 8, 1)?;
        let seconds = sweep(dir.path(), "results_8x500", 8, 500)?;
        println!(
            "results_8x500  4000 results in {seconds:.2} s: {:.0} results/s",
            4000.0 / seconds
        );
    }
    // The same at 10x the reports: the report path alone, start-up amortised.
    if wanted("results_8x5000") {
        let seconds = sweep(dir.path(), "results_8x5000", 8, 5000)?;
        println!(
            "results_8x5000 40000 results in {seconds:.2} s: {:.0} results/s",
            40000.0 / seconds
        );
    }
    if wanted("rss_10000") {
        rss_10000(dir.path())?;
    }
    Ok(())
}

fn fit_loop(dir: &std::path::Path) -> anyhow::Result<()> {
    let runs = 30;
    let started = Instant::now();
    for i in 0..runs {
        trainer(1).run_config(RunConfig::new(format!("fit_{i}")).storage_path(dir)).fit()?;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "fit_loop       {runs} runs in {seconds:.2} s: {:.1} runs/s ({:.0} ms each)",
        f64::from(runs) / seconds,
        seconds * 1e3 / f64::from(runs)
    );
    Ok(())
}

fn rss_10000(dir: &std::path::Path) -> anyhow::Result<()> {
    let probe = std::sync::Arc::new(RssProbe::default());
    let before = rss_mb();
    let started = Instant::now();
    let grid = Tuner::new(trainer(1), SearchSpace::new().add("i", grid_search(0..10_000i64)))
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max))
        .run_config(RunConfig::new("rss_10000").storage_path(dir).callback(probe.clone()))
        .fit()?;
    anyhow::ensure!(grid.trials.len() == 10_000 && grid.errors().is_empty());
    let seconds = started.elapsed().as_secs_f64();
    let marks: Vec<String> =
        probe.0.lock().unwrap().1.iter().map(|(n, mb)| format!("{n}: {mb:.0} MB")).collect();
    println!(
        "rss_10000      10000 trials in {seconds:.1} s ({:.0} trials/s); driver RSS before {before:.0} MB, after {}",
        10_000.0 / seconds,
        marks.join(", ")
    );
    Ok(())
}
