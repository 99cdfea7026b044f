"""The clients of the `rtune serve` tests (tests/integration/serve.rs): Triton's own clients
(tritonclient's HTTP and gRPC) and plain HTTP/1.1 load from many threads. Each mode prints one
JSON line of what it saw; the Rust test checks it.

  check HTTP GRPC ROWS.csv PREDICTED.csv   health, metadata, inference (binary and JSON, HTTP
                                           and gRPC) against `rtune predict`'s file; every bad
                                           input over both protocols
  load HTTP ROWS.csv PREDICTED.csv CLIENTS REQUESTS   CLIENTS threads, REQUESTS one-row
                                           requests each, every answer checked
  burst HTTP ROWS.csv COUNT                COUNT requests at once (a thread each); the codes
"""

import http.client
import json
import sys
import threading

import numpy as np


def rows(rows_csv):
    # rtune reads a file's numbers as float32, as the clients send them.
    return np.loadtxt(rows_csv, delimiter=",", skiprows=1, dtype=np.float64)[:, :64].astype(
        np.float32
    )


def rows_and_predictions(rows_csv, predicted_csv):
    header = open(predicted_csv).readline().strip().split(",")
    table = np.loadtxt(predicted_csv, delimiter=",", skiprows=1, dtype=np.float64)
    prediction = table[:, header.index("prediction")].astype(np.int64)
    probs = table[:, [i for i, h in enumerate(header) if h.startswith("prob_")]]
    return rows(rows_csv), prediction, probs.astype(np.float32)


def post(port, body, headers=None, path="/v2/models/model/infer"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=body, headers=headers or {})
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, dict(reply.getheaders()), data


def one_row(x):
    inputs = [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": x.tolist()}]
    return json.dumps({"inputs": inputs})


def check(http_port, grpc_port, rows_csv, predicted_csv):
    import tritonclient.grpc as tg
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    x, want_class, want_probs = rows_and_predictions(rows_csv, predicted_csv)
    seen = {}
    h = th.InferenceServerClient(f"127.0.0.1:{http_port}")
    g = tg.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    seen["http_health"] = [h.is_server_live(), h.is_server_ready(), h.is_model_ready("model")]
    seen["grpc_health"] = [g.is_server_live(), g.is_server_ready(), g.is_model_ready("model")]
    meta = h.get_model_metadata("model")
    seen["http_metadata"] = {
        "platform": meta["platform"],
        "inputs": meta["inputs"],
        "outputs": meta["outputs"],
    }
    gmeta = g.get_model_metadata("model", as_json=True)
    seen["grpc_metadata"] = {
        "platform": gmeta["platform"],
        "inputs": [dict(i, shape=[int(s) for s in i["shape"]]) for i in gmeta["inputs"]],
        "outputs": [dict(o, shape=[int(s) for s in o["shape"]]) for o in gmeta["outputs"]],
    }

    def same(classes, probs):
        return bool(np.array_equal(classes, want_class) and np.array_equal(probs, want_probs))

    # Every row, in requests of 100 rows: binary tensors (tritonclient's default), JSON
    # tensors, and gRPC's raw contents.
    answers = {"http_binary": ([], []), "http_json": ([], []), "grpc": ([], [])}
    for start in range(0, len(x), 100):
        part = x[start : start + 100]
        for binary in (True, False):
            tensor = th.InferInput("input", list(part.shape), "FP32")
            tensor.set_data_from_numpy(part, binary_data=binary)
            outputs = [
                th.InferRequestedOutput("prediction", binary_data=binary),
                th.InferRequestedOutput("probabilities", binary_data=binary),
            ]
            r = h.infer("model", [tensor], outputs=outputs)
            key = "http_binary" if binary else "http_json"
            answers[key][0].append(r.as_numpy("prediction"))
            answers[key][1].append(r.as_numpy("probabilities").astype(np.float32))
        tensor = tg.InferInput("input", list(part.shape), "FP32")
        tensor.set_data_from_numpy(part)
        r = g.infer("model", [tensor])
        answers["grpc"][0].append(r.as_numpy("prediction"))
        answers["grpc"][1].append(r.as_numpy("probabilities"))
    for key, (classes, probs) in answers.items():
        seen[key] = same(np.concatenate(classes), np.concatenate(probs))
    # One input per column gives the same answers.
    columns = []
    for c in range(64):
        t = th.InferInput(f"pixel_{c}", [10], "FP64")
        t.set_data_from_numpy(x[:10, c].astype(np.float64))
        columns.append(t)
    r = h.infer("model", columns)
    seen["per_column"] = bool(
        np.array_equal(r.as_numpy("prediction"), want_class[:10])
        and np.array_equal(r.as_numpy("probabilities"), want_probs[:10])
    )

    # Bad input, over both protocols: (HTTP status, gRPC status, message) each.
    def http_error(inputs, model="model"):
        try:
            h.infer(model, inputs)
        except InferenceServerException as e:
            return [e.status(), e.message()]
        return None

    def grpc_error(inputs, model="model"):
        try:
            g.infer(model, inputs)
        except InferenceServerException as e:
            return [e.status(), e.message()]
        return None

    def both(name, shape, datatype, data):
        made = []
        for module in (th, tg):
            t = module.InferInput(name, shape, datatype)
            t.set_data_from_numpy(data)
            made.append([t])
        return made

    cases = {
        "unknown_input": both("pixels", [1, 64], "FP32", x[:1]),
        "wrong_datatype": both("input", [1, 64], "INT64", x[:1].astype(np.int64)),
        "wrong_shape": both("input", [1, 63], "FP32", x[:1, :63]),
        "missing_column": both("pixel_0", [1], "FP32", x[:1, 0]),
        "strings": both("input", [1, 64], "BYTES", x[:1].astype(np.object_)),
    }
    bad = {}
    for case, (hi, gi) in cases.items():
        bad[case] = {"http": http_error(hi), "grpc": grpc_error(gi)}
    good_h, good_g = both("input", [1, 64], "FP32", x[:1])
    bad["unknown_model"] = {"http": http_error(good_h, "nope"), "grpc": grpc_error(good_g, "nope")}
    # What only JSON can get wrong.
    raw = {
        "garbage": b"{not json",
        "no_name": json.dumps(
            {"inputs": [{"datatype": "FP32", "shape": [1, 64], "data": [0] * 64}]}
        ).encode(),
        "non_numeric": json.dumps(
            {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": ["a"] * 64}]}
        ).encode(),
    }
    for case, body in raw.items():
        status, _, data = post(http_port, body)
        bad[case] = {"http": [status, json.loads(data)["error"]]}
    seen["bad"] = bad
    print(json.dumps(seen))


def load(http_port, rows_csv, predicted_csv, clients, requests):
    x, want_class, want_probs = rows_and_predictions(rows_csv, predicted_csv)
    results = {"right": 0, "wrong": [], "codes": {}}
    lock = threading.Lock()

    def client(k):
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
        for i in range(requests):
            row = (k * requests + i) % len(x)
            conn.request("POST", "/v2/models/model/infer", body=one_row(x[row : row + 1]))
            reply = conn.getresponse()
            body = json.loads(reply.read())
            with lock:
                results["codes"][reply.status] = results["codes"].get(reply.status, 0) + 1
            if reply.status != 200:
                continue
            out = {o["name"]: o for o in body["outputs"]}
            got_class = out["prediction"]["data"][0]
            got_probs = np.array(out["probabilities"]["data"], dtype=np.float32)
            with lock:
                if got_class == want_class[row] and np.array_equal(got_probs, want_probs[row]):
                    results["right"] += 1
                else:
                    results["wrong"].append(row)
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results))


def burst(http_port, rows_csv, count):
    x = rows(rows_csv)
    codes = [None] * count
    retry_after = set()
    go = threading.Barrier(count)

    def one(k):
        body = one_row(x[k % len(x) : k % len(x) + 1])
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=120)
        conn.connect()
        go.wait()
        try:
            conn.request("POST", "/v2/models/model/infer", body=body)
            reply = conn.getresponse()
            reply.read()
            codes[k] = reply.status
            if reply.getheader("retry-after"):
                retry_after.add(reply.getheader("retry-after"))
        except Exception as e:  # an unanswered request is what the test looks for
            codes[k] = f"{type(e).__name__}: {e}"
        conn.close()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tally = {}
    for c in codes:
        tally[str(c)] = tally.get(str(c), 0) + 1
    print(json.dumps({"codes": tally, "retry_after": sorted(retry_after)}))


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "check":
        check(int(args[0]), int(args[1]), args[2], args[3])
    elif mode == "load":
        load(int(args[0]), args[1], args[2], int(args[3]), int(args[4]))
    elif mode == "burst":
        burst(int(args[0]), args[1], int(args[2]))
    else:
        sys.exit(f"unknown mode {mode}")
