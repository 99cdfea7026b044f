"""The peers of `rtune serve` in bench/serve.py: the same exported TorchScript model and fitted
scaler (the export's model.pt and preprocessor.json) behind
  ray      Ray Serve 2.60: one replica of 1 CPU, @serve.batch(max_batch_size, batch_wait_timeout_s)
  fastapi  a plain FastAPI app on uvicorn, one request at a time (no batching)
Both take POST / with {"data": [[64 numbers], ...]} and answer {"prediction": [...],
"probabilities": [[...], ...]}.

    python bench/serve_peers.py ray|fastapi EXPORT_DIR PORT [MAX_BATCH WAIT_S]
"""

import json
import sys

import numpy as np
import torch


def load(export):
    torch.set_num_threads(1)
    model = torch.jit.load(f"{export}/model.pt")
    model.eval()
    schema = json.load(open(f"{export}/preprocessor.json"))
    fitted = schema["preprocessor"]["fitted"]
    offset = np.array(fitted["offset"], dtype=np.float64)
    scale = np.array(fitted["scale"], dtype=np.float64)

    def predict(rows):
        x = ((np.asarray(rows, dtype=np.float32).astype(np.float64) - offset) / scale).astype(np.float32)
        with torch.no_grad():
            logits = model(torch.from_numpy(x))
        probs = torch.softmax(logits, -1)
        return logits.argmax(-1).tolist(), probs.tolist()

    return predict


def ray_app(export, port, max_batch, wait_s):
    import ray
    from ray import serve
    from starlette.requests import Request

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=64)
    class Model:
        def __init__(self):
            self.predict = load(export)

        @serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=wait_s)
        async def batch(self, requests):
            rows = [r for req in requests for r in req]
            counts = [len(req) for req in requests]
            classes, probs = self.predict(rows)
            out, at = [], 0
            for n in counts:
                out.append({"prediction": classes[at : at + n], "probabilities": probs[at : at + n]})
                at += n
            return out

        async def __call__(self, request: Request):
            body = await request.json()
            return await self.batch(body["data"])

    serve.run(Model.bind(), route_prefix="/")
    print("ready", flush=True)
    import time

    while True:
        time.sleep(3600)


def fastapi_app(export, port):
    import uvicorn
    from fastapi import FastAPI, Request

    predict = load(export)
    app = FastAPI()

    @app.post("/")
    async def infer(request: Request):
        body = await request.json()
        classes, probs = predict(body["data"])
        return {"prediction": classes, "probabilities": probs}

    print("ready", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


if __name__ == "__main__":
    mode, export, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "ray":
        ray_app(export, port, int(sys.argv[4]), float(sys.argv[5]))
    else:
        fastapi_app(export, port)
