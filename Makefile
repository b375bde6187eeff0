# One entry point for every task. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Built Kubernetes binaries and Go caches live outside git (see hack/cluster/README.md).
export KERASJOB_CACHE ?= $(HOME)/.cache/kerasjob
# Runtime state (certificates, etcd data, logs, kubeconfig) of the local cluster.
export KERASJOB_RUN ?= $(CURDIR)/.run
PYTEST_ARGS ?=
# Trainer image variants `make images` builds (kind-e2e builds cpu and jax-cpu).
IMAGE_VARIANTS ?= cpu gpu

.PHONY: help deps deps-demo venv venv-demo lint fmt test test-bench test-unit test-trainer test-integration test-e2e test-gpu-image \
        binaries cluster-up cluster-down cluster-env crds demo bench bench-scale bench-gang bench-tfjob bench-docs images \
        helm-lint kind-e2e clean docs docs-ref docs-serve

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

FIRST_RUN = [ -n "$$(ls -A $(KERASJOB_CACHE)/bin 2>/dev/null)" ] || echo "first run: builds etcd, Kubernetes, containerd, CoreDNS, Helm (and KWOK, for the tests) from Go modules (~10-13 min on 2 cores) and the images (~3-5 min); later runs reuse $(KERASJOB_CACHE)"
deps: ## Install the Debian packages make test needs (root), check Go and Python >= 3.11
	@PYTHON=$(PYTHON) hack/deps.sh test
	@$(FIRST_RUN)

# make demo's set: the cluster's, the images' and the run's (not chromium, shellcheck, clang-19).
deps-demo: ## Install only the Debian packages make demo needs (root), check Go and Python >= 3.11
	@PYTHON=$(PYTHON) hack/deps.sh demo
	@$(FIRST_RUN)

# The recipe's comments are here, not in it: make echoes a recipe's comment lines.
# - PYTHONWARNINGS: setuptools warns of every editable install of a flat layout (a wall of
#   '!!' lines, no error).
# - Then backend jax: JAX and the pinned Keras 3 ([tool.kerasjob] jax).
# - tf-keras and mlxtend: --no-deps (why: [tool.kerasjob] in trainer_image/pyproject.toml),
#   last: a later resolving install would complain about mlxtend's plotting dependencies.
venv-demo: $(VENV)/.demo-installed ## The Python environment of make demo only: the contract, the operator (SDK), the dev tools
$(VENV)/.demo-installed: contract/pyproject.toml operator/pyproject.toml dev/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	PYTHONWARNINGS=ignore::UserWarning $(BIN)/pip install -q -e ./contract -e ./operator -e ./dev
	touch $@

venv: $(VENV)/.installed ## Create the Python environment (make demo's, plus the trainer and its frameworks)
$(VENV)/.installed: $(VENV)/.demo-installed trainer_image/pyproject.toml
	PYTHONWARNINGS=ignore::UserWarning $(BIN)/pip install -q -e './trainer_image[buckets]'
	$(BIN)/pip install -q $$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('trainer_image/pyproject.toml', 'rb'))['tool']['kerasjob']['jax']))")
	$(BIN)/pip install -q --no-deps $$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('trainer_image/pyproject.toml', 'rb'))['tool']['kerasjob']['no-deps']))")
	$(BIN)/pip install -q --no-deps $$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('trainer_image/pyproject.toml', 'rb'))['tool']['kerasjob']['jax-no-deps']))")
	touch $@

lint: venv ## ruff check and format check, the import layers (lint-imports), mypy; shellcheck and the SIGPIPE rule (hack/lint-shell.sh)
	hack/lint-shell.sh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

fmt: venv ## ruff format + autofix
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The documentation site (mkdocs.yml, docs/): reference pages generated from the code, then a
# strict build (a broken link or anchor fails it). tests/unit/test_docs.py checks both.
DOCS_SITE ?= $(KERASJOB_RUN)/site
docs-ref: venv ## Regenerate docs/reference/api.md and cli.md from the API models and the CLI
	$(BIN)/python -m kerasjob.tools.docgen --out docs/reference

docs: docs-ref ## Build the documentation site into .run/site (mkdocs build --strict)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(DOCS_SITE)
	@echo "open $(DOCS_SITE)/index.html"

docs-serve: docs-ref ## Serve the documentation site on http://127.0.0.1:8000 with live reload
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict

binaries: ## Build etcd, kube-*, kubectl, helm, kwok from the Go module proxy (cached)
	hack/cluster/build.sh

# tests/gpu_image reads the 6.3 GB gpu trainer image's archive: `make test-gpu-image` (opt-in).
# Then the kind path (hack/kind/README.md): 5-12 min here, within CI's 90 min next to the rest.
test: deps venv binaries lint ## Everything CI runs: lint, unit, trainer, integration and e2e tests, then kind-e2e
	$(BIN)/pytest $(PYTEST_ARGS) -m "not bench" tests --ignore=tests/gpu_image
	hack/kind/e2e.sh

# The benchmarks' quick modes (pytest marker `bench`): they check that bench/ does not rot
# (each script runs and writes its JSON); figures come from `make bench`. Not in `make test`.
test-bench: venv binaries ## The benchmarks' quick modes as smoke tests (pytest -m bench; not in make test)
	$(BIN)/pytest $(PYTEST_ARGS) -m bench tests --ignore=tests/gpu_image

test-unit: venv ## Unit tests (no cluster, no TensorFlow processes)
	$(BIN)/pytest $(PYTEST_ARGS) tests/unit

test-trainer: venv ## Trainer tests with real TensorFlow in several processes
	$(BIN)/pytest $(PYTEST_ARGS) tests/trainer

test-integration: venv binaries ## Operator tests against a real API server
	$(BIN)/pytest $(PYTEST_ARGS) tests/integration

test-e2e: venv binaries ## Real training on the real node: built images, the Helm-installed operator
	$(BIN)/pytest $(PYTEST_ARGS) tests/e2e

cluster-up: binaries ## Start the local cluster: control plane, KWOK nodes and the real node (containerd, kubelet, kube-proxy, CoreDNS)
	hack/cluster/up.sh

cluster-down: ## Stop the local control plane and remove its state
	hack/cluster/down.sh

cluster-env: ## Print exports for kubectl/helm against the local cluster: eval "$$(make -s cluster-env)"
	@hack/cluster/env.sh

crds: venv ## Regenerate crds/ and the status wire types (api/wire.py) from the pydantic models
	$(BIN)/python -m kerasjob.tools.crdgen --out crds
	$(BIN)/python -m kerasjob.tools.wiregen
# The chart ships the same file (Helm installs CRDs only from its own crds/ folder);
# tests/unit/test_chart.py fails if the two copies differ.
	cp crds/kerasjob.dev_kerasjobs.yaml charts/kerasjob-operator/crds/

# The demo builds the binaries itself, with the images in the background (each phase timed).
# On a local cluster the binaries' build starts first (demo-binaries: it needs Go alone), in
# the background while the Debian packages are installed and the Python environment is made
# (on a bare machine the three overlap); demo.py's own `build.sh demo` then waits for it (the
# build lock) and finds the set built, or builds what is still missing. The demo's Python
# environment (venv-demo) has what demo.py imports, no TensorFlow or JAX: the training runs
# in the images, and on a bare machine their ~1.5 GB would compete with the build for the
# CPUs (`make venv`, for the tests, adds them to the same environment).
demo: $(if $(filter current,$(CLUSTER)),,demo-binaries deps-demo) venv-demo ## Train MNIST on 2 workers under the real operator, evict one, resume (CLUSTER=current to use KUBECONFIG)
	$(BIN)/python -m kerasjob_dev.demo $(if $(filter current,$(CLUSTER)),--cluster current,)

.PHONY: demo-binaries
demo-binaries:
	@hack/cluster/build.sh demo &

bench: venv binaries ## Benchmarks: print figures, write JSON to bench/results/
	$(BIN)/python bench/trainer.py
	$(BIN)/python bench/operator.py
	$(BIN)/python bench/recovery.py
	$(BIN)/python bench/strategies.py
	$(BIN)/python bench/keras3.py
	$(BIN)/python bench/keras3_orbax.py
	$(BIN)/python bench/keras3_mesh.py
	# one accelerator's figures: full size on a GPU (hack/gpu/check.sh); here, CPU: quick sizes
	$(BIN)/python bench/keras3_device.py --quick

bench-scale: venv binaries ## 10, 100, 1000 KerasJobs x 8 workers on KWOK: create, disrupt, finish, delete (JSON + SVG plot)
	$(BIN)/python bench/scale.py

bench-gang: venv binaries ## 50 KerasJobs x 8 workers competing on KWOK for room for 3: gang scheduling on vs off (JSON)
	$(BIN)/python bench/gang.py

bench-tfjob: venv binaries ## 100 KerasJobs vs 100 TFJobs (Kubeflow training-operator v1.9.3) x 4 workers on KWOK (JSON)
	hack/cluster/training-operator.sh build
	$(BIN)/python bench/compare_tfjob.py

# The tables between <!-- bench:NAME --> markers in docs/ are written from bench/results/NAME.json
# (a block whose JSON is absent is kept; a --quick result is refused).
bench-docs: venv ## Rewrite the docs' benchmark tables from bench/results/*.json (after make bench*)
	$(BIN)/python -m kerasjob_dev.benchpage

# `make images` runs hack/images/build.sh (see hack/images/README.md): with no reachable
# Docker daemon it starts a private one (root, Debian's docker.io); when the official Python
# base cannot be pulled it builds FROM a local Debian base (KERASJOB_LOCAL_BASE=auto|1|0).
# The gpu variant: tensorflow[and-cuda] from PyPI on the same Python base (6.3 GB, about
# 6 min the first time); TRAINER_GPU_BASE=tensorflow/tensorflow:<TF>-gpu builds it on
# TensorFlow's official GPU image instead.
IMAGES_EXPORT_DIR ?= $(KERASJOB_CACHE)/images/export
images: ## Build the operator and trainer images (IMAGE_VARIANTS="cpu gpu"; needs docker)
	IMAGE_VARIANTS="$(IMAGE_VARIANTS)" hack/images/build.sh

.PHONY: images-export
images-export: ## make images + docker save them to IMAGES_EXPORT_DIR (for ctr images import)
	IMAGE_VARIANTS="$(IMAGE_VARIANTS)" hack/images/build.sh --export "$(IMAGES_EXPORT_DIR)"

# Not in `make test`: the gpu image is 6.3 GB to build, save and read (tests/gpu_image says
# what it checks). No GPU needed.
test-gpu-image: venv ## Build the gpu trainer image, save it, check the archive (CUDA build, libraries load)
	IMAGE_VARIANTS=gpu hack/images/build.sh --export "$(IMAGES_EXPORT_DIR)"
	IMAGES_EXPORT_DIR="$(IMAGES_EXPORT_DIR)" $(BIN)/pytest $(PYTEST_ARGS) tests/gpu_image

helm-lint: binaries ## helm lint the chart
	$$(hack/cluster/env.sh --bin-dir)/helm lint charts/kerasjob-operator

# hack/kind/README.md: KIND_NODE_IMAGE=auto|local|<image>, KEEP_CLUSTER=1, PYTEST_ARGS, ...
kind-e2e: venv ## kind cluster (3 nodes): images, the chart, mnist through a worker deletion, the e2e suite; deleted after (needs docker, go)
	hack/kind/e2e.sh

clean: cluster-down ## Remove local state (keeps the binary cache)
	rm -rf $(KERASJOB_RUN)
