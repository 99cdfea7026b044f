//! Every collective gives exact results, identical on every rank, for world sizes 1 to 4 and
//! buffer sizes that exercise empty, tiny, odd and multi-megabyte transfers.

use std::time::{Duration, Instant};

use rtune_collective::{GroupOptions, ProcessGroup, ReduceOp};

use crate::common::{bits, run_ranks, value};

const WORLDS: [usize; 4] = [1, 2, 3, 4];
const SIZES: [usize; 5] = [0, 1, 7, 1000, 1_000_003];

/// Element `i` of every rank's `value`s reduced exactly (they are small integers).
fn reduced(world: usize, i: usize, op: ReduceOp) -> f32 {
    let sum: usize = (0..world).map(|r| value(r, i) as usize).sum();
    match op {
        ReduceOp::Sum => sum as f32,
        ReduceOp::Avg => sum as f32 / world as f32,
    }
}

fn check_all_reduce(opts: GroupOptions, sizes: &[usize]) {
    for world in WORLDS {
        let results = run_ranks(world, opts.clone(), |rank, mut g| {
            let mut out = Vec::new();
            for &n in sizes {
                for op in [ReduceOp::Sum, ReduceOp::Avg] {
                    let mut buf: Vec<f32> = (0..n).map(|i| value(rank, i)).collect();
                    g.all_reduce(&mut buf, op).unwrap();
                    out.push((n, op, buf));
                }
            }
            out
        });
        for (k, (n, op, buf)) in results[0].iter().enumerate() {
            let expected: Vec<f32> = (0..*n).map(|i| reduced(world, i, *op)).collect();
            assert!(buf == &expected, "world {world} n {n} {op:?}: wrong values");
            for (rank, r) in results.iter().enumerate() {
                assert_eq!(bits(&r[k].2), bits(buf), "world {world} n {n} {op:?} rank {rank}");
            }
        }
    }
}

#[test]
fn all_reduce_is_exact_and_identical() {
    check_all_reduce(GroupOptions::new(1), &SIZES);
}

#[test]
fn all_reduce_directions_on_two_threads() {
    check_all_reduce(GroupOptions::new(11).lane_threads_min_bytes(0), &SIZES);
}

#[test]
fn all_reduce_one_direction() {
    check_all_reduce(GroupOptions::new(2).bidirectional(false), &SIZES);
}

#[test]
fn all_reduce_one_thread() {
    check_all_reduce(GroupOptions::new(12).lane_threads_min_bytes(usize::MAX), &SIZES);
}

/// A staging buffer of three floats forces partial elements across reads.
#[test]
fn all_reduce_tiny_staging_buffer() {
    check_all_reduce(GroupOptions::new(3).chunk_bytes(12), &[0, 1, 7, 1000, 70_001]);
}

/// Values that are not exactly representable: sums depend on the order, yet all ranks agree.
#[test]
fn all_reduce_inexact_values_still_identical() {
    for world in [2, 3, 4] {
        let results = run_ranks(world, GroupOptions::new(4), |rank, mut g| {
            let mut buf: Vec<f32> =
                (0..300_007).map(|i| ((i * 31 + rank * 7) as f32).sin() * 1e-3 + 0.1).collect();
            g.all_reduce(&mut buf, ReduceOp::Avg).unwrap();
            buf
        });
        for r in &results[1..] {
            assert_eq!(bits(r), bits(&results[0]), "world {world}");
        }
    }
}

#[test]
fn repeated_calls_stay_in_step() {
    let results = run_ranks(3, GroupOptions::new(5), |rank, mut g| {
        let mut last = Vec::new();
        for round in 0..50usize {
            let n = 1 + round * 997 % 5000;
            let mut buf = vec![(rank + round) as f32; n];
            g.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
            assert!(buf.iter().all(|&x| x == (3 * round + 3) as f32), "round {round}");
            g.barrier().unwrap();
            last = buf;
        }
        last
    });
    assert_eq!(results[0], results[2]);
}

#[test]
fn broadcast_from_every_root() {
    for world in WORLDS {
        for root in 0..world {
            let opts = GroupOptions::new(6).lane_threads_min_bytes(if root % 2 == 1 {
                0
            } else {
                usize::MAX
            });
            let results = run_ranks(world, opts, |rank, mut g| {
                let mut out = Vec::new();
                for n in SIZES {
                    let mut buf: Vec<f32> = (0..n).map(|i| value(rank, i) - 100.0).collect();
                    g.broadcast(&mut buf, root).unwrap();
                    out.push(buf);
                }
                out
            });
            for (k, n) in SIZES.iter().enumerate() {
                let expected: Vec<f32> = (0..*n).map(|i| value(root, i) - 100.0).collect();
                for (rank, r) in results.iter().enumerate() {
                    assert!(r[k] == expected, "world {world} root {root} n {n} rank {rank}");
                }
            }
        }
    }
}

#[test]
fn broadcast_bytes_sends_the_length_too() {
    for world in WORLDS {
        for root in 0..world {
            let results = run_ranks(world, GroupOptions::new(7), |rank, mut g| {
                let mut out = Vec::new();
                for n in [0usize, 5, 300_001] {
                    // Non-roots start with other lengths (longer and shorter) and contents.
                    let mut buf: Vec<u8> = if rank == root {
                        (0..n).map(|i| (i % 251) as u8).collect()
                    } else {
                        vec![0xAA; 3 + rank * 1000]
                    };
                    g.broadcast_bytes(&mut buf, root).unwrap();
                    out.push(buf);
                }
                out
            });
            for (k, n) in [0usize, 5, 300_001].iter().enumerate() {
                let expected: Vec<u8> = (0..*n).map(|i| (i % 251) as u8).collect();
                for (rank, r) in results.iter().enumerate() {
                    assert!(r[k] == expected, "world {world} root {root} n {n} rank {rank}");
                }
            }
        }
    }
}

#[test]
fn all_gather_in_rank_order() {
    for world in WORLDS {
        let sizes = [0usize, 1, 7, 1000, 300_001];
        let results = run_ranks(world, GroupOptions::new(8), |rank, mut g| {
            sizes
                .iter()
                .map(|&m| {
                    let input: Vec<f32> = (0..m).map(|i| value(rank, i)).collect();
                    let mut output = vec![-1.0; world * m];
                    g.all_gather(&input, &mut output).unwrap();
                    output
                })
                .collect::<Vec<_>>()
        });
        for (k, m) in sizes.iter().enumerate() {
            let expected: Vec<f32> =
                (0..world).flat_map(|r| (0..*m).map(move |i| value(r, i))).collect();
            for (rank, r) in results.iter().enumerate() {
                assert!(r[k] == expected, "world {world} m {m} rank {rank}");
            }
        }
    }
}

/// Pieces of `n` for `world` ranks: even, uneven, with empty ones, and one rank holding all.
fn piece_sets(world: usize, n: usize) -> Vec<Vec<usize>> {
    let even: Vec<usize> = (0..world).map(|r| n / world + usize::from(r < n % world)).collect();
    let mut uneven: Vec<usize> = (0..world).map(|r| (r * 3) % (n / world + 2)).collect();
    uneven[world - 1] = n - uneven[..world - 1].iter().sum::<usize>().min(n);
    if uneven.iter().sum::<usize>() != n {
        uneven = even.clone();
    }
    let mut last = vec![0; world];
    last[world - 1] = n;
    vec![even, uneven, last]
}

fn check_reduce_scatter(opts: GroupOptions) {
    for world in WORLDS {
        let results = run_ranks(world, opts.clone(), |rank, mut g| {
            let mut out = Vec::new();
            for n in [0usize, 7, 1000, 300_001] {
                for counts in piece_sets(world, n) {
                    for op in [ReduceOp::Sum, ReduceOp::Avg] {
                        let mut input: Vec<f32> = (0..n).map(|i| value(rank, i)).collect();
                        let mut output = vec![-1.0; counts[rank]];
                        g.reduce_scatter(&mut input, &counts, &mut output, op).unwrap();
                        // Its all-gather is the all-reduce, bit for bit.
                        let mut whole = vec![0.0; n];
                        let mut reduced: Vec<f32> = (0..n).map(|i| value(rank, i)).collect();
                        g.all_reduce(&mut reduced, op).unwrap();
                        if counts.iter().all(|&c| c == counts[0]) {
                            g.all_gather(&output, &mut whole).unwrap();
                            assert_eq!(bits(&whole), bits(&reduced), "world {world} n {n}");
                        }
                        out.push((n, counts.clone(), op, output, reduced));
                    }
                }
            }
            out
        });
        for (rank, r) in results.iter().enumerate() {
            for (n, counts, op, output, all_reduced) in r {
                let start: usize = counts[..rank].iter().sum();
                let piece = &all_reduced[start..start + counts[rank]];
                let expected: Vec<f32> =
                    (start..start + counts[rank]).map(|i| reduced(world, i, *op)).collect();
                assert!(output == &expected, "world {world} n {n} {counts:?} {op:?} rank {rank}");
                assert_eq!(bits(output), bits(piece), "world {world} n {n} {counts:?} rank {rank}");
            }
        }
    }
}

/// Reduce-scatter gives each rank its piece of the exact reduction (pieces of any size,
/// empty ones too), the same bits as the all-reduce's, on both ring directions and on one.
#[test]
fn reduce_scatter_gives_each_rank_its_reduced_piece() {
    check_reduce_scatter(GroupOptions::new(12));
}

#[test]
fn reduce_scatter_one_direction() {
    check_reduce_scatter(GroupOptions::new(13).bidirectional(false));
}

/// No rank leaves the barrier before the last one entered it.
#[test]
fn barrier_waits_for_everyone() {
    for world in WORLDS {
        let times = run_ranks(world, GroupOptions::new(9), |rank, mut g| {
            std::thread::sleep(Duration::from_millis(60 * rank as u64));
            let entered = Instant::now();
            g.barrier().unwrap();
            (entered, Instant::now())
        });
        let last_entry = times.iter().map(|t| t.0).max().unwrap();
        for (rank, (_, left)) in times.iter().enumerate() {
            assert!(*left >= last_entry, "world {world}: rank {rank} left the barrier early");
        }
    }
}

#[test]
fn rank_and_world_size() {
    let got = run_ranks(3, GroupOptions::new(10), |_, g| (g.rank(), g.world_size()));
    assert_eq!(got, vec![(0, 3), (1, 3), (2, 3)]);
}
