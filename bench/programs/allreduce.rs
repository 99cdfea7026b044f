//! All-reduce bandwidth of `RingGroup` between 2 processes on loopback, for 1, 10 and 100 MB
//! of float32 (MB = 10^6 bytes). Compare with `bench/gloo_allreduce.py` (same definitions).
//!
//! Run: `cargo run --release --example bench_allreduce -- [--runs 20] [--warmup 3]
//!       [--sizes 1,10,100] [--one-direction] [--lane-threads-min-bytes N] [--chunk-bytes N]
//!       [--socket-buffer N] [--op all_reduce|reduce_scatter|all_gather]`
//!
//! With `--op reduce_scatter`: one `reduce_scatter` of the buffer into two halves instead
//! (bandwidth: the whole buffer's bytes / median time, as for the all-reduce), against
//! `bench/gloo_allreduce.py --op reduce_scatter` (gloo's `reduce_scatter_tensor`). With
//! `--op all_gather`: one `all_gather` of the two ranks' halves into the buffer (the same
//! definition), against gloo's `all_gather_into_tensor`.
//!
//! Each timed run is: barrier, start clock, one all_reduce (sum), stop clock, on rank 0. The
//! printed figure is algorithm bandwidth = buffer bytes / median time, in GB/s (10^9 B/s).
//! Also printed: rank 0's CPU time (all threads, user + system) per call, median: on a loaded
//! machine wall time depends on the CPU share a process gets, CPU time per call does not.
//! (For 2 ranks the NCCL-style "bus bandwidth" 2(n-1)/n x algbw is the same number.)
//! Expected: about 1.8-2.0 GB/s at 100 MB on the 2-core dev machine.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rtune::collective::{GroupOptions, ProcessGroup, ReduceOp, RingGroup};

#[derive(Debug, Clone)]
struct Args {
    runs: usize,
    warmup: usize,
    sizes_mb: Vec<f64>,
    opts: GroupOptions,
    worker: Option<usize>,
    raw: Vec<String>,
    op: Op,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    AllReduce,
    ReduceScatter,
    AllGather,
}

fn parse() -> anyhow::Result<Args> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut a = Args {
        runs: 20,
        warmup: 3,
        sizes_mb: vec![1.0, 10.0, 100.0],
        opts: GroupOptions::new(0xbe9c),
        worker: None,
        raw: raw.clone(),
        op: Op::AllReduce,
    };
    let mut it = raw.into_iter();
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--runs" => a.runs = val()?.parse()?,
            "--warmup" => a.warmup = val()?.parse()?,
            "--sizes" => {
                a.sizes_mb = val()?.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--one-direction" => a.opts.bidirectional = false,
            "--lane-threads-min-bytes" => a.opts.lane_threads_min_bytes = val()?.parse()?,
            "--chunk-bytes" => a.opts.chunk_bytes = val()?.parse()?,
            "--socket-buffer" => a.opts.socket_buffer_bytes = Some(val()?.parse()?),
            "--worker" => a.worker = Some(val()?.parse()?),
            "--op" => match val()?.as_str() {
                "all_reduce" => a.op = Op::AllReduce,
                "reduce_scatter" => a.op = Op::ReduceScatter,
                "all_gather" => a.op = Op::AllGather,
                other => bail!("--op {other}: use all_reduce, reduce_scatter or all_gather"),
            },
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(a)
}

fn main() -> anyhow::Result<()> {
    let args = parse()?;
    match args.worker {
        Some(rank) => worker(rank, &args),
        None => launch(&args),
    }
}

/// Starts two copies of this binary as ranks 0 and 1 and plays the rendezvous: collects each
/// one's listener address from its stdout and sends both to both on stdin.
fn launch(args: &Args) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    let mut addrs = Vec::new();
    for rank in 0..2 {
        let mut child = Command::new(&exe)
            .args(&args.raw)
            .args(["--worker", &rank.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line)?;
        let addr = line.trim().strip_prefix("ADDR ").context("worker did not publish")?;
        addrs.push(addr.to_string());
        children.push((child, out));
    }
    for (child, _) in &mut children {
        writeln!(child.stdin.as_mut().unwrap(), "{}", addrs.join(" "))?;
    }
    let mut ok = true;
    for (rank, (mut child, out)) in children.into_iter().enumerate() {
        for line in out.lines() {
            let line = line?;
            if rank == 0 {
                println!("{line}");
            }
        }
        ok &= child.wait()?.success();
    }
    if !ok {
        bail!("a worker failed");
    }
    Ok(())
}

fn worker(rank: usize, args: &Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("ADDR {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let peers: Vec<SocketAddr> =
        line.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    let mut g = RingGroup::connect(rank, 2, listener, &peers, args.opts.clone())?;
    if rank == 0 {
        println!(
            "rtune RingGroup, 2 processes, loopback; bidirectional={} lane_threads_min_bytes={} \
             chunk_bytes={} socket_buffer={:?}; median of {} runs (+{} warm-up)",
            args.opts.bidirectional,
            args.opts.lane_threads_min_bytes,
            args.opts.chunk_bytes,
            args.opts.socket_buffer_bytes,
            args.runs,
            args.warmup
        );
    }
    for &mb in &args.sizes_mb {
        let n = (mb * 1e6) as usize / 4;
        let mut buf = vec![1.0f32; n];
        let counts = [n / 2, n - n / 2];
        let mut piece = vec![0.0f32; counts[rank]];
        let mut times = Vec::with_capacity(args.runs);
        let mut cpu = Vec::with_capacity(args.runs);
        for i in 0..args.warmup + args.runs {
            buf.fill(1.0);
            // An all-gather's pieces are the same length on every rank: each rank's, its
            // number plus one (the result's halves then say whose they are).
            let mine = &mut piece[..n / 2];
            mine.fill(rank as f32 + 1.0);
            g.barrier()?;
            let (t, c) = (Instant::now(), process_cpu());
            let (result, first, last) = match args.op {
                Op::ReduceScatter => {
                    g.reduce_scatter(&mut buf, &counts, &mut piece, ReduceOp::Sum)?;
                    (&piece, 2.0, 2.0)
                }
                Op::AllReduce => {
                    g.all_reduce(&mut buf, ReduceOp::Sum)?;
                    (&buf, 2.0, 2.0)
                }
                Op::AllGather => {
                    g.all_gather(&piece[..n / 2], &mut buf[..n / 2 * 2])?;
                    (&buf, 1.0, if n.is_multiple_of(2) { 2.0 } else { 1.0 })
                }
            };
            let (took, cpu_took) = (t.elapsed(), process_cpu() - c);
            anyhow::ensure!(result[0] == first && result[result.len() - 1] == last, "wrong result");
            if i >= args.warmup {
                times.push(took);
                cpu.push(cpu_took);
            }
        }
        times.sort();
        cpu.sort();
        let median = times[times.len() / 2];
        let gbps = |d: Duration| (n * 4) as f64 / d.as_secs_f64() / 1e9;
        if rank == 0 {
            println!(
                "{mb:>6} MB  median {:>8.3} ms  algbw {:>6.3} GB/s  (min {:.3}, max {:.3} GB/s)  \
                 cpu/call {:>7.3} ms",
                median.as_secs_f64() * 1e3,
                gbps(median),
                gbps(times[times.len() - 1]),
                gbps(times[0]),
                cpu[cpu.len() / 2].as_secs_f64() * 1e3,
            );
        }
    }
    Ok(())
}

/// CPU time of this process so far, all threads, user + system.
fn process_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
