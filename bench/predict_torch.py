"""PyTorch's own batched inference of an rtune export, in one process: the baseline of bench
group 11 (`rtune predict`). Reads the parquet input with pyarrow a batch at a time, applies the
export's preprocessor.json (a standard or min-max scaler) in numpy, runs `torch.jit.load`'s
model.pt under inference mode, and writes the input's columns with `prediction` and
`prob_<class>` columns to a parquet file, as `rtune predict` does. Prints rows per second.

Usage: predict_torch.py EXPORT INPUT.parquet OUTPUT.parquet [--batch-rows N] [--threads N]
"""
import argparse
import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch


def scaler(step, columns):
    """(offset, scale) per model input from the fitted preprocessor (identity when none)."""
    offset = {c: 0.0 for c in columns}
    scale = {c: 1.0 for c in columns}

    def apply(s):
        if s is None:
            return
        if s["kind"] == "chain":
            for inner in s["steps"]:
                apply(inner)
        elif s["kind"] in ("standard_scaler", "min_max_scaler"):
            f = s["fitted"]
            for c, o, k in zip(f["columns"], f["offset"], f["scale"]):
                # Scalers compose: (x - o1) / k1, then (y - o2) / k2.
                offset[c] = offset[c] + o * scale[c]
                scale[c] = scale[c] * k
        else:
            raise SystemExit(f"no Python for the {s['kind']} preprocessor in this benchmark")

    apply(step)
    return (np.array([offset[c] for c in columns], dtype=np.float32),
            np.array([scale[c] for c in columns], dtype=np.float32))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("export")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--batch-rows", type=int, default=65536)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    began = time.time()
    if a.threads:
        torch.set_num_threads(a.threads)
    schema = json.load(open(f"{a.export}/preprocessor.json"))
    inputs = schema["model_inputs"]
    offset, scale = scaler(schema.get("preprocessor"), inputs)
    model = torch.jit.load(f"{a.export}/model.pt")
    model.eval()
    writer = None
    rows = 0
    for batch in pq.ParquetFile(a.input).iter_batches(batch_size=a.batch_rows):
        x = np.stack([batch.column(c).to_numpy().astype(np.float32) for c in inputs], axis=1)
        x = (x - offset) / scale
        with torch.inference_mode():
            out = model(torch.from_numpy(x)).float()
        probs = torch.softmax(out, dim=1).numpy()
        columns = list(batch.columns) + [pa.array(out.argmax(dim=1).numpy())]
        names = list(batch.schema.names) + ["prediction"]
        for k in range(probs.shape[1]):
            columns.append(pa.array(probs[:, k]))
            names.append(f"prob_{k}")
        table = pa.Table.from_arrays(columns, names=names)
        if writer is None:
            writer = pq.ParquetWriter(a.output, table.schema)
        writer.write_table(table)
        rows += batch.num_rows
    writer.close()
    seconds = time.time() - began
    print(json.dumps({"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}))


if __name__ == "__main__":
    main()
