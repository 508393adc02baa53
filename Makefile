# `make install` then `make test`; `make bench` measures; see README.md.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA ?= ../shared/data
# CPU wheel of torch: an unpinned torch would pull gigabytes of CUDA wheels.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install browser pandoc libreoffice container services test lint bench clean

install: $(BIN)/mt browser pandoc libreoffice container services

$(BIN)/mt: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e ".[dev,plot,export,serve,language,formats,hf]"
	@touch $@

# Headless Chromium and its driver for the web page's test (tests/serve/test_serve_process.py), from
# Debian's packages when we may install them (root, as CI is); else that test skips.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  chromium chromium-driver >/dev/null; } || \
	echo "make: no chromium and chromedriver: the browser test will skip"

# pandoc, to make the document corpus's .docx, .odt, .html, .epub and .pptx from markdown at
# test time (tests/formats/test_document_corpus.py), as the browser is; else those tests skip.
pandoc:
	@command -v pandoc >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  pandoc >/dev/null; } || \
	echo "make: no pandoc: the document corpus tests will skip"

# LibreOffice's Writer and Impress without their desktop (210 MB, a minute), to remake the
# corpus's documents (.odt and .docx from each other, .odp from the .pptx) and open the
# translations; else those tests skip.
libreoffice:
	@command -v soffice >/dev/null && [ -e /usr/lib/libreoffice/share/registry/impress.xcd ] && \
	[ -e /usr/lib/libreoffice/share/registry/writer.xcd ] || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends libreoffice-writer-nogui libreoffice-impress-nogui >/dev/null; } || \
	echo "make: no LibreOffice: the tests that open documents in it will skip"

# podman, to build and run the image of the Dockerfile (tests/serve/test_container.py), from a
# Debian base made by mmdebstrap (no image registry needed); runc, which runs containers where
# crun cannot (cgroups v1 beside a v2 controller); else that test skips.
container:
	@command -v podman >/dev/null && command -v mmdebstrap >/dev/null && command -v runc >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  podman mmdebstrap runc >/dev/null; } || \
	echo "make: no podman: the container test will skip"

# Redis (6 MB), nginx (2 MB) and Prometheus (96 MB), which the tests of replicas sharing Redis
# behind nginx and of a Prometheus scraping mt serve start on 127.0.0.1 (tests/helpers/
# services.py); Debian's packages do not start them here (no init, or policy-rc.d). Else those
# tests skip.
services:
	@command -v redis-server >/dev/null && command -v nginx >/dev/null && \
	command -v prometheus >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends redis-server nginx prometheus >/dev/null; } || \
	echo "make: no redis-server, nginx or prometheus: the tests of replicas and metrics will skip"

test: install
	HF_DATASETS_OFFLINE=1 $(BIN)/pytest

lint: install
	$(BIN)/ruff check mt tests scripts
	$(BIN)/ruff format --check mt tests scripts

bench: install
	$(BIN)/python scripts/bench.py --data $(DATA)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache  # never runs/: it holds trained models
