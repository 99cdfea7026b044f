"""A PyTorch DDP training script that rtune sweeps as it is: the command trainable example.

rtune starts it once per worker with torchrun's environment, so the script is what it would be
under `torchrun --nproc-per-node 2 ddp_digits.py`: `init_process_group("gloo")`, a
DistributedDataParallel MLP on the 8x8 digits shipped in data/, each rank on its half of the
training set. Each epoch it reports the validation accuracy (`val_acc`) and loss with a
checkpoint, through rtune_report.py; when rtune's scheduler (ASHA in
examples/sweeps/ddp_digits_asha.toml) stops the trial, report() returns False and every rank
ends cleanly after that epoch. A restarted trial resumes from its checkpoint.

Expect val_acc around 0.95 after 8 epochs with lr = 0.05 and hidden = 64. Alone:
    torchrun --nproc-per-node 2 examples/command/ddp_digits.py
Copied elsewhere (with rtune_report.py beside it), it finds the data from the working directory
or above, or in $DIGITS_CSV.
"""

import gzip
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rtune_report import checkpoint, params, report  # noqa: E402

def find_data():
    """The digits: $DIGITS_CSV, else data/digits.csv.gz in the working directory or above the
    script (so a copy of the script elsewhere works from the repository, or given the file)."""
    if os.environ.get("DIGITS_CSV"):
        return Path(os.environ["DIGITS_CSV"])
    here = Path(__file__).resolve().parent
    for folder in [Path.cwd(), *Path.cwd().parents, here, *here.parents]:
        candidate = folder / "data" / "digits.csv.gz"
        if candidate.is_file():
            return candidate
    sys.exit(
        "ddp_digits.py: cannot find data/digits.csv.gz in the working directory or above this "
        "script; set DIGITS_CSV to the file (rtune's repository ships it in data/)"
    )


def load_digits():
    with gzip.open(find_data(), "rt") as f:
        rows = torch.tensor([[float(v) for v in line.split(",")] for line in f])
    return rows[:, :64] / 16.0, rows[:, 64].long()


def main():
    config = params()
    lr = float(config.get("lr", 0.05))
    hidden = int(config.get("hidden", 64))
    batch_size = int(config.get("batch_size", 32))  # global: split across the ranks
    epochs = int(config.get("epochs", 8))

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    features, labels = load_digits()
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    valid, train = order[: len(order) // 5], order[len(order) // 5 :]
    # Equal shards, so that every rank runs the same number of steps (DDP needs it).
    per_rank = len(train) // world
    shard = train[rank * per_rank : (rank + 1) * per_rank]
    local_batch = max(1, batch_size // world)

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    start = 0
    if checkpoint():
        state = torch.load(os.path.join(checkpoint(), "state.pt"))
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]

    for epoch in range(start, epochs):
        model.train()
        shuffled = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch))]
        for i in range(0, len(shuffled) - local_batch + 1, local_batch):
            batch = shuffled[i : i + local_batch]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(features[batch]), labels[batch])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model.module(features[valid])
            val_loss = nn.functional.cross_entropy(logits, labels[valid]).item()
            val_acc = (logits.argmax(1) == labels[valid]).float().mean().item()
        with tempfile.TemporaryDirectory() as folder:
            if rank == 0:
                state = {
                    "model": model.module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch + 1,
                }
                torch.save(state, os.path.join(folder, "state.pt"))
            go_on = report({"val_acc": val_acc, "val_loss": val_loss}, checkpoint_dir=folder)
        if not go_on:
            print(f"rank {rank}: stopped by the scheduler after epoch {epoch + 1}", flush=True)
            break

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
