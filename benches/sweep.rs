//! Sweep overhead, measured end to end with real worker processes (no timing asserts anywhere):
//!
//! * `fit_loop`: 30 plain `TorchTrainer::fit` runs of 1 worker that report once, one after the
//!   other (the baseline: what a hand-written loop of trainings costs per run);
//! * `tuner_200`: the same trainer swept 200 times by the `Tuner` (trials run side by side as
//!   the machine's CPUs allow): trials per second, end to end;
//! * `tuner_200_noreuse`: the same with `reuse_actors(false)` (every worker started with exec;
//!   `RTUNE_BENCH_NOREUSE_TRIALS` sets another count);
//! * `results_8x500`: 8 trials of 1 worker reporting 500 times each, persistence on (every row
//!   written to result.json and progress.csv): results per second;
//! * `results_8x500_mlflow`: `results_8x500` with an `MlflowLogger` sending every report to the
//!   MLflow server that `RTUNE_BENCH_MLFLOW` names (`bench/suite.py` starts one), run right
//!   after `results_8x500`: until the sweep's end, and (`results_8x500_mlflow_sent`) until the
//!   logger has sent everything;
//! * `results_8x5000`: the same with 5,000 reports each, where start-up no longer counts;
//! * `rss_10000`: 10,000 one-report trials through one Tuner; the driver's resident memory
//!   after 10%, 50% and 100% of them finished (read by a callback; `RTUNE_BENCH_RSS_TRIALS`
//!   sets another count);
//! * `rss_long`: the same with 1,000 trials that report 100 times each (a sweep of long trials,
//!   where what an ended trial keeps in memory would grow with its reports);
//! * `metrics_on_off`: `results_8x500` with no callback, with a callback that does nothing (as
//!   every `rtune run` has callbacks: its views), and with the metrics endpoint's `Monitor`,
//!   served on loopback and scraped every 100 ms by a thread; six rounds, each in another
//!   order: the median results per second of each, and the monitor's over the no-op's;
//! * `metrics_answer_1000`: a `Monitor` that heard 1,000 trials (each started, 10 results; 750
//!   completed, 250 running with 40 ranks each: 10,000 rank series, then 4 each: 1,000) answers
//!   `GET /metrics` over HTTP, as Prometheus asks and in the text format: the median of 100
//!   answers of each, and of the monitor's render alone;
//! * `digits_95`: the demo sweep (`examples/sweeps/digits_tpe_asha.toml`): wall time from the
//!   start until a trial's validation accuracy first reaches 95%, and the whole sweep's.
//!
//! Each figure is also printed as one machine-readable line, `BENCH {"name":..,"value":..,
//! "unit":..}`, which `bench/suite.py` (`make bench`) collects.
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
        ctx.report([("score", i as f64)])?;
    }
    Ok(())
}

fn trainer(reports: u64) -> TorchTrainer {
    TorchTrainer::new(report_n)
        .train_loop_config(rtune::Params::new().with("reports", reports))
        .scaling(ScalingConfig::workers(1))
}

/// One figure, for `bench/suite.py`.
fn figure(name: &str, value: f64, unit: &str) {
    println!("BENCH {}", serde_json::json!({ "name": name, "value": value, "unit": unit }));
}

fn sweep(dir: &std::path::Path, name: &str, trials: i64, reports: u64) -> anyhow::Result<f64> {
    sweep_with(dir, trials, reports, true, RunConfig::new(name))
}

fn sweep_with(
    dir: &std::path::Path,
    trials: i64,
    reports: u64,
    reuse_actors: bool,
    run: RunConfig,
) -> anyhow::Result<f64> {
    let space = SearchSpace::new().add("i", grid_search(0..trials));
    let started = Instant::now();
    let grid = Tuner::new(trainer(reports), space)
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max).reuse_actors(reuse_actors))
        .run_config(run.storage_path(dir))
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

/// When the sweep's end was heard.
#[derive(Default)]
struct EndClock(Mutex<Option<Instant>>);

impl rtune::callback::Callback for EndClock {
    fn on_experiment_end(&self, _: &[rtune::callback::TrialInfo]) -> rtune::Result<()> {
        *self.0.lock().unwrap() = Some(Instant::now());
        Ok(())
    }
}

/// Notes the driver's RSS when the trial counts in `.1` have completed.
#[derive(Default)]
struct RssProbe(Mutex<(u64, Vec<(u64, f64)>)>, Vec<u64>);

impl rtune::callback::Callback for RssProbe {
    fn on_trial_complete(&self, _: &rtune::callback::TrialInfo) -> rtune::Result<()> {
        let mut state = self.0.lock().unwrap();
        state.0 += 1;
        if self.1.contains(&state.0) {
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
        figure("tuner_200", 200.0 / seconds, "trials/s");
    }
    if wanted("tuner_200_noreuse") {
        // `RTUNE_BENCH_NOREUSE_TRIALS`: fewer trials (each costs an exec with libtorch loaded).
        let trials: i64 =
            std::env::var("RTUNE_BENCH_NOREUSE_TRIALS").map_or(Ok(200), |n| n.parse())?;
        let run = RunConfig::new("tuner_200_noreuse");
        let seconds = sweep_with(dir.path(), trials, 1, false, run)?;
        println!(
            "tuner_200_noreuse {trials} trials in {seconds:.2} s: {:.1} trials/s",
            trials as f64 / seconds
        );
        figure("tuner_200_noreuse", trials as f64 / seconds, "trials/s");
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
        figure("results_8x500", 4000.0 / seconds, "results/s");
    }
    if wanted("results_8x500_mlflow")
        && let Ok(uri) = std::env::var("RTUNE_BENCH_MLFLOW")
    {
        // The sweep's end is heard first by the clock, then by the logger, which sends what
        // is left before the sweep returns: the first figure is the sweep with the logger
        // working beside it, the second includes the wait for the server.
        let name = "results_8x500_mlflow";
        let clock = std::sync::Arc::new(EndClock::default());
        let run = RunConfig::new(name)
            .callback(clock.clone())
            .callback(rtune::callback::MlflowLogger::new(uri));
        let began = Instant::now();
        let seconds = sweep_with(dir.path(), 8, 500, true, run)?;
        let ended = clock.0.lock().unwrap().map_or(seconds, |at| (at - began).as_secs_f64());
        println!("{name} 4000 results in {ended:.2} s ({seconds:.2} s with the last sends)");
        figure(name, 4000.0 / ended, "results/s");
        figure("results_8x500_mlflow_sent", 4000.0 / seconds, "results/s");
    }
    // The same at 10x the reports: the report path alone, start-up amortised.
    if wanted("results_8x5000") {
        let seconds = sweep(dir.path(), "results_8x5000", 8, 5000)?;
        println!(
            "results_8x5000 40000 results in {seconds:.2} s: {:.0} results/s",
            40000.0 / seconds
        );
        figure("results_8x5000", 40000.0 / seconds, "results/s");
    }
    if wanted("rss_10000") {
        let trials = std::env::var("RTUNE_BENCH_RSS_TRIALS").map_or(Ok(10_000), |n| n.parse())?;
        rss(dir.path(), "rss", trials, 1)?;
    }
    if wanted("rss_long") {
        rss(dir.path(), "rss_long", 1_000, 100)?;
    }
    if wanted("metrics_on_off") {
        metrics_on_off(dir.path())?;
    }
    if wanted("metrics_answer_1000") {
        // 250 of them running with 40 ranks each: 10,000 rank series; then with 4 ranks each.
        metrics_answer(1000, 250, 40)?;
        metrics_answer(1000, 250, 4)?;
    }
    if wanted("digits_95") {
        digits_95(dir.path())?;
    }
    Ok(())
}

/// A callback that does nothing.
struct NoOp;

impl rtune::callback::Callback for NoOp {}

/// A runtime of its own for the endpoint (a sweep's driver shares its own).
fn server_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()
}

/// `GET /metrics` on `address`, read whole (HTTP/1.0: the server closes).
fn scrape(address: std::net::SocketAddr, openmetrics: bool) -> std::io::Result<usize> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address)?;
    let accept = if openmetrics { "Accept: application/openmetrics-text\r\n" } else { "" };
    write!(stream, "GET /metrics HTTP/1.0\r\n{accept}\r\n")?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    Ok(answer.len())
}

fn metrics_on_off(dir: &std::path::Path) -> anyhow::Result<()> {
    sweep(dir, "warm_up_metrics", 8, 1)?;
    let runtime = server_runtime()?;
    // No callback; a callback that does nothing (every `rtune run` has callbacks, its views:
    // any callback has each result cross to the sweep's loop); the Monitor, served and scraped
    // every 100 ms. Each round runs the three in another order, so none always runs right
    // after another.
    let mut rates: [Vec<f64>; 3] = Default::default();
    let orders = [[0, 1, 2], [2, 0, 1], [1, 2, 0], [0, 2, 1], [1, 0, 2], [2, 1, 0]];
    for (round, order) in orders.iter().enumerate() {
        for &variant in order {
            let name = format!("metrics_{variant}_{round}");
            let rate = match variant {
                0 => 4000.0 / sweep(dir, &name, 8, 500)?,
                1 => {
                    let run = RunConfig::new(name).callback(NoOp);
                    4000.0 / sweep_with(dir, 8, 500, true, run)?
                }
                _ => {
                    let monitor = rtune::monitor::Monitor::local();
                    let handle = runtime.handle();
                    let server =
                        rtune::monitor::serve(monitor.clone(), "127.0.0.1:0", None, handle)?;
                    let address = server.address();
                    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let scraper = {
                        let stop = stop.clone();
                        std::thread::spawn(move || {
                            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                                let _ = scrape(address, true);
                                std::thread::sleep(std::time::Duration::from_millis(100));
                            }
                        })
                    };
                    let run = RunConfig::new(name).callback(monitor);
                    let rate = 4000.0 / sweep_with(dir, 8, 500, true, run)?;
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    let _ = scraper.join();
                    rate
                }
            };
            rates[variant].push(rate);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [none, noop, monitor] = [median(&rates[0]), median(&rates[1]), median(&rates[2])];
    println!(
        "metrics_on_off results/s: no callback {none:.0}, a no-op callback {noop:.0} ({:.3}x), \
         the monitor served and scraped {monitor:.0} ({:.3}x of the no-op); rounds: {rates:.0?}",
        noop / none,
        monitor / noop
    );
    figure("metrics_none_results_8x500", none, "results/s");
    figure("metrics_noop_callback_results_8x500", noop, "results/s");
    figure("metrics_monitor_results_8x500", monitor, "results/s");
    figure("metrics_monitor / noop_callback", monitor / noop, "x");
    Ok(())
}

/// A monitor that heard `trials` trials, each started with 10 results; the last `running` of
/// them still run with `ranks` ranks each (their per-rank series on the endpoint), the others
/// completed.
fn metrics_answer(trials: usize, running: usize, ranks: usize) -> anyhow::Result<()> {
    use rtune::callback::{Callback, TrialInfo};
    use rtune_driver::metrics::{RankFigures, add_rank_figures};
    let monitor = rtune::monitor::Monitor::local();
    let figures = vec![
        RankFigures {
            step_s: 0.1,
            data_s: 0.01,
            collective_s: 0.02,
            collective_bytes: Some(4e6),
            gpu_utilization: None,
            gpu_memory_bytes: None,
        };
        ranks
    ];
    for i in 0..trials {
        let trial = TrialInfo {
            trial_id: format!("t_{i:05}"),
            status: rtune::search::TrialStatus::Pending,
            params: rtune::Params::new(),
            path: std::path::PathBuf::from("t"),
            stopped: false,
            checkpoint: None,
        };
        monitor.on_trial_add(&trial)?;
        monitor.on_trial_start(&trial)?;
        for r in 0..10 {
            let mut result = rtune::search::Metrics::from([("score".to_string(), r as f64)]);
            add_rank_figures(&mut result, &figures);
            monitor.on_trial_result(&trial, &result)?;
        }
        if i < trials - running {
            monitor.on_trial_complete(&trial)?;
        }
    }
    let series =
        monitor.render().lines().filter(|l| l.starts_with("rtune_rank_step_seconds_count")).count();
    anyhow::ensure!(series == running * ranks, "{series} rank series, not {}", running * ranks);
    let rendered = monitor.render().len();
    // The median and the worst of 100 runs of `f`, in ms.
    let median_ms = |f: &mut dyn FnMut() -> anyhow::Result<usize>| -> anyhow::Result<(f64, f64)> {
        let mut times = Vec::new();
        for _ in 0..100 {
            let began = Instant::now();
            f()?;
            times.push(began.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        Ok((times[times.len() / 2], times[times.len() - 1]))
    };
    let (render, _) = median_ms(&mut || Ok(monitor.render().len()))?;
    let runtime = server_runtime()?;
    let server = rtune::monitor::serve(monitor, "127.0.0.1:0", None, runtime.handle())?;
    // As Prometheus asks (OpenMetrics), and as curl does (Prometheus' text format).
    let (open, open_max) = median_ms(&mut || Ok(scrape(server.address(), true)?))?;
    let (text, text_max) = median_ms(&mut || Ok(scrape(server.address(), false)?))?;
    println!(
        "metrics_answer_{trials} ({series} rank series, {:.1} MB): answer median {open:.3} ms \
         (max {open_max:.3}) as Prometheus asks, {text:.3} ms (max {text_max:.3}) in the text \
         format; of it, the monitor's render {render:.3} ms",
        rendered as f64 / 1e6
    );
    figure(&format!("metrics_answer_{trials}_ranks_{}", running * ranks), open, "ms");
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
    figure("fit_loop", f64::from(runs) / seconds, "runs/s");
    Ok(())
}

/// The driver's RSS as `trials` trials that report `reports` times each finish: figures
/// `{name}_after_{trials}`, `{name}_growth_..` (from a tenth of them to all) and
/// `{name}_per_finished_trial`.
fn rss(dir: &std::path::Path, name: &str, trials: u64, reports: u64) -> anyhow::Result<()> {
    let marks = vec![trials / 10, trials / 2, trials];
    let probe = std::sync::Arc::new(RssProbe(Mutex::default(), marks));
    let before = rss_mb();
    let started = Instant::now();
    let space = SearchSpace::new().add("i", grid_search(0..trials as i64));
    let grid = Tuner::new(trainer(reports), space)
        .tune_config(TuneConfig::new().metric("score").mode(Mode::Max))
        .run_config(RunConfig::new(name).storage_path(dir).callback(probe.clone()))
        .fit()?;
    anyhow::ensure!(grid.trials.len() == trials as usize && grid.errors().is_empty());
    anyhow::ensure!(grid.trials.iter().all(|t| t.history().len() == reports as usize));
    let seconds = started.elapsed().as_secs_f64();
    let noted = probe.0.lock().unwrap().1.clone();
    let text: Vec<String> = noted.iter().map(|(n, mb)| format!("{n}: {mb:.0} MB")).collect();
    println!(
        "{name} {trials} trials x {reports} reports in {seconds:.1} s ({:.0} trials/s); driver RSS before {before:.0} MB, after {}",
        trials as f64 / seconds,
        text.join(", ")
    );
    if let [(_, tenth), .., (_, last)] = noted.as_slice() {
        figure(&format!("{name}_after_{trials}"), *last, "MB");
        figure(&format!("{name}_growth_{}_to_{trials}", trials / 10), last - tenth, "MB");
        let per_trial_kb = (last - tenth) * 1024.0 / (trials - trials / 10) as f64;
        figure(&format!("{name}_per_finished_trial"), per_trial_kb, "KB");
    }
    Ok(())
}

/// Notes when a trial's `val_acc` first reaches 95%.
struct FirstGood(Instant, Mutex<Option<f64>>);

impl rtune::callback::Callback for FirstGood {
    fn on_trial_result(
        &self,
        _: &rtune::callback::TrialInfo,
        result: &rtune::search::Metrics,
    ) -> rtune::Result<()> {
        let mut first = self.1.lock().unwrap();
        if first.is_none() && result.get("val_acc").is_some_and(|&acc| acc >= 0.95) {
            *first = Some(self.0.elapsed().as_secs_f64());
        }
        Ok(())
    }
}

/// The demo sweep from its sweep file: time to the first trial at 95% validation accuracy.
fn digits_95(dir: &std::path::Path) -> anyhow::Result<()> {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sweeps/digits_tpe_asha.toml");
    let source = rtune_cli::doc::Source { name: file.into(), text: std::fs::read_to_string(file)? };
    let registry = rtune::cli::Registry::builtin();
    let spec = rtune_cli::program::SweepSpec::read(&source, &[], registry.trainables())?;
    let started = Instant::now();
    let probe = std::sync::Arc::new(FirstGood(started, Mutex::new(None)));
    let mut run = spec.run_config().storage_path(dir).callback(probe.clone());
    run.name = Some("digits_95".into());
    let grid = spec.tuner(run, rtune::tune::Control::new()).fit()?;
    let total = started.elapsed().as_secs_f64();
    anyhow::ensure!(grid.errors().is_empty(), "trials failed: {:?}", grid.errors());
    let first = probe.1.lock().unwrap().ok_or_else(|| anyhow::anyhow!("no trial reached 95%"))?;
    println!(
        "digits_95      first val_acc >= 95% after {first:.2} s; {} trials in {total:.2} s",
        grid.trials.len()
    );
    figure("digits_95", first, "s");
    figure("digits_sweep", total, "s");
    Ok(())
}
