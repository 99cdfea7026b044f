"""Start-up of rtune's commands: `rtune` (which links no libtorch) against `rtune-torch` (the full
program), the same arguments, in interleaved rounds. Each command fails or finds nothing at
once, so what is measured is what a process pays before and around its work.

    python3 bench/startup.py [BIN_DIR (target/debug)] [ROUNDS (20)]

Wall time per run (spawned directly, waited for), median, min and max; peak RSS as
`/usr/bin/time -f %M` reports it (median of 5 runs: a child spawned from Python would count
Python's own pages before its exec).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

BIN_DIR = sys.argv[1] if len(sys.argv) > 1 else "target/debug"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
WARM_UP = 3
# The last two: a cluster that is not there (refused at once), and a command rtune hands on.
CASES = [["--version"], ["--help"], ["completions", "bash"], ["ls", "rtune_results"],
         ["show", "rtune_results/none"], ["status", "--address", "127.0.0.1:1"],
         ["export", "rtune_results/none", "--to", "x"]]
PROGRAMS = ["rtune", "rtune-torch"]


def peak_rss_mb(exe, args):
    sizes = []
    for _ in range(5):
        out = subprocess.run(["/usr/bin/time", "-f", "%M", exe, *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sizes.append(int(out.stderr.strip().splitlines()[-1]))
    return statistics.median(sizes) / 1024


def main():
    exes = {p: os.path.abspath(os.path.join(BIN_DIR, p)) for p in PROGRAMS}
    os.chdir(tempfile.mkdtemp())
    os.mkdir("rtune_results")
    null = os.open(os.devnull, os.O_WRONLY)
    quiet = [(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]
    times = {}
    for round_ in range(WARM_UP + ROUNDS):
        for args in CASES:
            for program, exe in exes.items():
                start = time.perf_counter()
                pid = os.posix_spawn(exe, [exe, *args], os.environ, file_actions=quiet)
                os.waitpid(pid, 0)
                took = (time.perf_counter() - start) * 1000
                if round_ >= WARM_UP:
                    times.setdefault((" ".join(args), program), []).append(took)
    print(f"{'command':<34} {'program':<12} {'median ms':>10} {'min':>7} {'max':>7} {'peak RSS MB':>12}")
    for (command, program), ms in times.items():
        rss = peak_rss_mb(exes[program], command.split())
        print(f"{command:<34} {program:<12} {statistics.median(ms):>10.1f} {min(ms):>7.1f} "
              f"{max(ms):>7.1f} {rss:>12.1f}")


if __name__ == "__main__":
    main()
