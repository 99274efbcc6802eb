# fedbayes — set-up and the main targets. `make table1` and `make test` work on a fresh clone.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch/torchvision from this machine's local wheels (pip's constraint file caps them at these versions)
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help setup data table1 mlflow smoke rehearsal report test test-all bench clean-smoke clean-rehearsal mlflow-ui dvc.yaml

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_PINS)
	$(PIP) install -q -e '.[test]'
	touch $@

# the venv and the data sources: 5 min 10 s measured in a fresh clone (2 cores, loaded)
setup: $(VENV)/.installed data-source

# Fashion-MNIST: Debian's dataset-fashion-mnist package when we are root with apt (offline), otherwise
# `fedbayes data` falls back to the official download (URLs + checksums in src/fedbayes/data).
.PHONY: data-source
data-source:
	@if [ ! -d /usr/share/datasets/fashion-mnist ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing dataset-fashion-mnist (Debian package)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	fi

# the raw data (what the first table build fetches too), then into DVC's cache: `dvc status` reads up to date
data: setup
	$(VENV)/bin/fedbayes data fmnist mnist5k
	$(VENV)/bin/dvc commit -q data/raw/fmnist data/raw/mnist5k

# Snakemake without its per-job blocks and step counts: the jobs' own summary lines (what each table holds, what it
# wrote) and errors; every job's full output is in work/logs/<rule>/…
QUIET := --quiet rules host progress   # last on the line: --quiet takes the words after it

# the headline table, its figures and DVC's view of it (reports/metrics/, reports/plots/); no MLflow import.
# With the committed runs: 35 s measured in a fresh clone (2 cores, load 1.2; its one numerics-check job included)
table1: setup
	snakemake --cores all reports/table1.csv reports/metrics $(QUIET)

# every table's runs imported into the MLflow store (mlflow.db), one process per table (one table's: snakemake --cores all mlflow_table1):
# 3 min 17 s measured in a fresh clone after make table1 (2 cores, load 3: the CI suite beside it)
mlflow: setup
	snakemake --cores all mlflow $(QUIET)

# dvc.yaml's table stages (one per paper folder, papers/<paper>/) and the scorecard's, written whole from
# params.yaml's tables, the paper folders and the committed runs (after adding a paper or a table, an
# experiment or method to a table, or committing runs;
# `dvc repro` stops and names this target when they are out of date)
dvc.yaml:
	python3 workflow/dvc_stages.py

# the same DAG shrunk: 3 min 55 s measured in a fresh clone (--cores 1, no other load: 149 jobs); its outputs live under reports/smoke/ (and results/runs/smoke/,
# data/partitions/smoke/, work/smoke/), git-ignored: it never writes over the paper-scale files
smoke: setup
	snakemake --cores all reports/smoke/table1.csv reports/smoke/metrics --config scale=smoke $(QUIET)

# every experiment of the five papers (CIFAR, SVHN, EMNIST, MNIST, UCI, FLamby too) through the same DAG at
# smoke scale on stand-in data (generated files in each dataset's real format; never results): tables under
# reports/rehearsal/, what ran in reports/rehearsal/summary.md (git-ignored, as the smoke outputs)
rehearsal: setup
	snakemake --cores all --config scale=rehearsal $(QUIET)

# Snakemake's report (report.html): the scorecard first, every table, figure and notes file, after a build;
# the .md and .csv files rendered to HTML pages first (rule report_pages) so the report shows them in place,
# and workflow/report/style.css keeps the rule graph of its front page to a scrolling box. Files this clone
# did not make (the committed runs) have no Snakemake metadata, and Snakemake warns once per file; those
# warnings are counted in one line (each run's provenance is its run.json).
# 6 min 26 s measured in a fresh clone after make table1 and make mlflow (2 cores, load 4-6: the CI suite beside it)
report: setup
	snakemake --cores 1 report_pages $(QUIET)
	set -o pipefail; snakemake --report report.html --report-stylesheet workflow/report/style.css all report_pages 2>&1 \
		| awk '/^Missing metadata for file/ {n++; next} {print} \
		END {if (n) print n " files made outside this clone (the committed runs) have no Snakemake metadata: not an error"}'

clean-smoke:
	rm -rf reports/smoke results/runs/smoke data/partitions/smoke work/smoke

clean-rehearsal:
	rm -rf reports/rehearsal results/runs/rehearsal data/partitions/rehearsal work/rehearsal data/raw-stand-in

# the first tier: unit and workflow tests (the real DAG on synthetic data), without the rehearsal, the
# integration DAG and Slurm
test: setup
	$(VENV)/bin/pytest -q -n auto --dist loadfile --no-loadscope-reorder -m "not full"

# every test, both tiers: what CI runs (.ci/run)
test-all: setup
	$(VENV)/bin/pytest -q -n auto --dist loadfile --no-loadscope-reorder

bench: setup
	$(PY) benchmarks/bench_fedavg.py

mlflow-ui: mlflow
	mlflow ui --backend-store-uri sqlite:///mlflow.db

# every target with the comment above it (the times quoted are measured, cores and load stated)
help:
	@awk '/^# /{c = c (c ? " " : "") substr($$0, 3); next} /^[a-z][a-z0-9._-]*:/{split($$0, a, ":"); printf "%-16s %s\n", a[1], c} {c = ""}' $(firstword $(MAKEFILE_LIST))
