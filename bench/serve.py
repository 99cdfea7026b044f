"""`rtune serve` against Ray Serve 2.60 and a plain FastAPI + PyTorch server (#65), side by side
in one run: the exported digits MLP and a larger MLP (about 10M parameters), each server with
one replica of 1 CPU batching at Ray Serve's defaults (10 rows, 10 ms; FastAPI does not batch),
loaded by 1, 8 and 64 concurrent clients (keep-alive HTTP/1.1 connections, a one-row request
each at a time, from 4 processes) for --seconds each. Prints throughput and p50/p99 latency
and the model called directly in a loop at batch 10 (its own limit), and writes
bench-serve.json.

    make bench-serve
    .venv-serve/bin/python bench/serve.py [--seconds S] [--clients 1,8,64] [--servers rtune]

rtune alone (--servers rtune) needs only .venv: bench/suite.py's group 15 runs it so.

Needs the release build (make bench-serve builds it) and .venv-serve (ray[serve] 2.60, with
.venv's torch).
"""

import argparse
import gzip
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTUNE = os.environ.get("RTUNE_BIN") or os.path.join(ROOT, "target", "release", "rtune")
PEERS = os.path.join(ROOT, "bench", "serve_peers.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def digits_rows():
    with gzip.open(os.path.join(ROOT, "data", "digits.csv.gz"), "rt") as f:
        return np.loadtxt(f, delimiter=",")[:, :64].astype(np.float32)


def exports(work):
    """The digits MLP (the demo's, 3 epochs) and a 10M-parameter MLP on the same columns."""
    sweep = os.path.join(work, "sweep.toml")
    with open(sweep, "w") as f:
        f.write(
            f'name = "digits"\nstorage_path = "{work}/results"\n[trainable]\nbuiltin = "digits-mlp"\n'
            '[param_space]\nepochs = 3\n[tune]\nmetric = "val_acc"\nmode = "max"\nnum_samples = 1\n'
        )
    subprocess.run([RTUNE, "run", sweep, "--no-tui"], check=True, capture_output=True)
    small = os.path.join(work, "digits-mlp")
    subprocess.run([RTUNE, "export", f"{work}/results/digits", "--to", small], check=True, capture_output=True)
    large = os.path.join(work, "mlp-10m")
    os.makedirs(large)
    for name in ("preprocessor.json", "metadata.json", "params.json"):
        with open(os.path.join(small, name)) as src, open(os.path.join(large, name), "w") as dst:
            dst.write(src.read())
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 3072), torch.nn.ReLU(), torch.nn.Linear(3072, 3072), torch.nn.ReLU(),
        torch.nn.Linear(3072, 10),
    ).eval()
    params = sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        torch.jit.trace(model, torch.zeros(16, 64)).save(os.path.join(large, "model.pt"))
    return {"digits MLP": small, f"MLP {params / 1e6:.1f}M": large}


def request(kind, row):
    if kind == "rtune":
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": row}]})
        path = "/v2/models/model/infer"
    else:
        body = json.dumps({"data": [row]})
        path = "/"
    body = body.encode()
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def read_response(sock, buf):
    """One HTTP/1.1 response from `sock` (`buf`: bytes already read): its status, body and what
    was read past it. Bodies of a Content-Length or chunked (Ray Serve's proxy)."""

    def more():
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        return chunk

    while b"\r\n\r\n" not in buf:
        buf += more()
    head, rest = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    length, chunked = 0, False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        while len(rest) < length:
            rest += more()
        return status, rest[:length], rest[length:]
    body = b""
    while True:
        while b"\r\n" not in rest:
            rest += more()
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        while len(rest) < size + 2:
            rest += more()
        body, rest = body + rest[:size], rest[size + 2 :]
        if size == 0:
            return status, body, rest


def client_process(port, requests, threads, start_at, stop_at, out):
    import threading

    lat, errors = [], [0]
    lock = threading.Lock()

    def one(k):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf, mine, i = b"", [], k
        while True:
            now = time.perf_counter()
            if now >= stop_at:
                break
            sock.sendall(requests[i % len(requests)])
            status, _, buf = read_response(sock, buf)
            done = time.perf_counter()
            if now >= start_at:
                if status == 200:
                    mine.append(done - now)
                else:
                    with lock:
                        errors[0] += 1
            i += 1
        sock.close()
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=one, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((lat, errors[0]))


def load(port, requests, clients, seconds):
    procs = min(clients, 4)
    per = [clients // procs + (1 if p < clients % procs else 0) for p in range(procs)]
    start_at = time.perf_counter() + 1.0  # a second of warm-up
    stop_at = start_at + seconds
    out = mp.Queue()
    ps = [mp.Process(target=client_process, args=(port, requests, n, start_at, stop_at, out)) for n in per]
    for p in ps:
        p.start()
    lat, errors = [], 0
    for _ in ps:
        got, e = out.get()
        lat.extend(got)
        errors += e
    for p in ps:
        p.join()
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1e3 if lat else float("nan")
    return {"rps": len(lat) / seconds, "p50_ms": q(0.5), "p99_ms": q(0.99), "errors": errors}


def wait_ready(port, kind, row, patience=180):
    until = time.time() + patience
    while time.time() < until:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(request(kind, row))
            status, body, _ = read_response(sock, b"")
            sock.close()
            if status == 200:
                return json.loads(body)
        except (OSError, ConnectionError, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the {kind} server on {port} never answered")


def start(kind, export, port):
    if kind == "rtune":
        argv = [RTUNE, "serve", export, "--http", f"127.0.0.1:{port}", "--grpc", "127.0.0.1:0", "--name", "model", "--quiet"]
    elif kind == "ray":
        argv = [sys.executable, PEERS, "ray", export, str(port), "10", "0.01"]
    else:
        argv = [sys.executable, PEERS, "fastapi", export, str(port)]
    log = open(os.path.join(tempfile.gettempdir(), f"bench-serve-{kind}.log"), "w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def direct(export, rows, batch, seconds=3.0):
    """The model called in a loop on `batch` rows at a time, on 1 thread: rows per second."""
    import torch

    torch.set_num_threads(1)
    model = torch.jit.load(os.path.join(export, "model.pt"))
    x = torch.from_numpy(rows[:batch].copy())
    n, until = 0, time.perf_counter() + seconds
    with torch.no_grad():
        while time.perf_counter() < until:
            model(x)
            n += batch
    return n / seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--servers", default="rtune,ray,fastapi")
    parser.add_argument("--json", default=os.path.join(ROOT, "bench-serve.json"), help="where the figures go")
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    rows = digits_rows()
    results = []
    with tempfile.TemporaryDirectory() as work:
        models = exports(work)
        for model, export in models.items():
            base = {"model": model, "direct_rows_per_s_batch10": direct(export, rows, 10), "direct_rows_per_s_batch1": direct(export, rows, 1)}
            print(f"{model}: the model alone, 1 thread: {base['direct_rows_per_s_batch10']:.0f} rows/s at batch 10, {base['direct_rows_per_s_batch1']:.0f} at batch 1", flush=True)
            for kind in args.servers.split(","):
                port = free_port()
                server = start(kind, export, port)
                try:
                    first = wait_ready(port, kind, rows[0].tolist())
                    reqs = [request(kind, rows[i].tolist()) for i in range(256)]
                    for c in clients:
                        figures = load(port, reqs, c, args.seconds)
                        results.append(dict(base, server=kind, clients=c, **figures))
                        print(f"  {kind:8} {c:3} clients: {figures['rps']:8.0f} requests/s, p50 {figures['p50_ms']:7.2f} ms, p99 {figures['p99_ms']:7.2f} ms, {figures['errors']} errors", flush=True)
                finally:
                    os.killpg(server.pid, 15)
                    server.wait(timeout=60)
                time.sleep(1)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    print("\n| model | server | clients | requests/s | p50 ms | p99 ms |\n|---|---|--:|--:|--:|--:|")
    for r in results:
        print(f"| {r['model']} | {r['server']} | {r['clients']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")


if __name__ == "__main__":
    main()
