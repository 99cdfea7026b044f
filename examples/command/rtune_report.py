"""rtune's command-trainable protocol in a few lines (copy this file next to your script).

    from rtune_report import params, checkpoint, report

    config = params()                # the trial's params, a dict
    resume_from = checkpoint()       # the folder to resume from, or None
    for epoch in range(config["epochs"]):
        ...                          # train, and save what resuming needs into `folder`
        if not report({"loss": loss}, checkpoint_dir=folder):
            break                    # rtune's scheduler stopped the trial: end cleanly

rtune starts the script once per worker, with torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, ...), so `torch.distributed.init_process_group("gloo")` works as
under torchrun. Every rank reports the same number of times; rank 0's metrics and checkpoint
are the trial's. The checkpoint folder is copied before report() returns: a temporary folder is
fine. Outside rtune (no RTUNE_PROTOCOL in the environment) report() prints and returns True.
The protocol itself is documented in rtune's `rtune::worker::run_command`.
"""

import json
import math
import os
import sys

PREFIX = "@rtune "


def under_rtune():
    return os.environ.get("RTUNE_PROTOCOL") == "1"


def params():
    return json.loads(os.environ.get("RTUNE_PARAMS", "{}"))


def checkpoint():
    return os.environ.get("RTUNE_CHECKPOINT") or None


def iteration():
    """Reports made before this start: a resumed script's next report is iteration() + 1."""
    return int(os.environ.get("RTUNE_ITERATION", "0"))


def _number(value):
    value = float(value)  # Python, NumPy and 0-d torch numbers alike
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def report(metrics, checkpoint_dir=None):
    """Reports one iteration; False when rtune asks the script to stop."""
    line = {"metrics": {name: _number(v) for name, v in metrics.items()}}
    if checkpoint_dir is not None:
        line["checkpoint"] = os.path.abspath(checkpoint_dir)
    if not under_rtune():
        print(line, flush=True)
        return True
    sys.stdout.write(PREFIX + json.dumps(line) + "\n")
    sys.stdout.flush()
    return sys.stdin.readline().strip() == "continue"
