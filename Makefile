# dlog: every target installs what it needs on a fresh Debian machine.
#   make demo   install, start a sandbox (ZooKeeper + 3 bookies), run the end-to-end job
#   make test   install, lint and format check (ruff), type-check (mypy), run the whole test suite
#   make proto  regenerate dlog/protocol/*_pb2.py from proto/
#   make bench  install, run the benchmarks (JSON on stdout)
#   make chaos  install, run the chaos suite (about 20 minutes; needs root)

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
EXTRAS ?= all,test
STAMP := $(VENV)/.installed-$(EXTRAS)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PROTOS := $(wildcard proto/*.proto)
# Three test processes on the 2-core VM: the suite mostly waits on real
# ZooKeeper, bookie and Spark processes (1.3 cores busy on average with two),
# so a third runs in that slack: 13.0 min against 14.5 min for the suite.
PYTEST_ARGS ?= -n 3 --dist loadfile

.PHONY: demo test proto bench chaos install system-deps lint clean

system-deps:
	@if ! dpkg -s zookeeper >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then \
		echo "installing ZooKeeper (Debian package) and Java"; \
		$(SUDO) apt-get update && $(SUDO) apt-get install -y zookeeper; \
	fi

$(STAMP): pyproject.toml | system-deps
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip >/dev/null
	$(PIP) install -e '.[$(EXTRAS)]'
	@touch $(STAMP)

# setuptools' editable install finds dlog with an import hook that Python
# asks only after every sys.path entry, so a folder named dlog/ in the
# current directory (even an empty one, taken as a namespace package) would
# win: "module 'dlog' has no attribute 'Namespace'". A directory of links to
# our packages, on sys.path through a .pth file, makes them regular packages
# found before any namespace folder, as a non-editable install is, and new
# modules still show up. (setuptools' compat mode would put the whole
# checkout on sys.path instead: tests, bench, examples and proto, a PyPI
# package's name, would become importable.)
PACKAGES := dlog subscriptions
LINKS := $(VENV)/dlog-packages

$(LINKS)/.linked: $(STAMP)
	@mkdir -p $(LINKS)
	@for p in $(PACKAGES); do ln -sfn $(CURDIR)/$$p $(LINKS)/$$p; done
	@echo $(abspath $(LINKS)) > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/dlog-packages.pth"
	@touch $@

# The C extensions (dlog/_record_codec.c, dlog/protocol/_add_codec.c; optional:
# dlog has the same code in Python, see dlog.extensions). The editable install
# builds them in place; they are rebuilt here whenever a source changes.
# Without a compiler the build only warns.
EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
EXT_SOURCES := dlog/_record_codec.c dlog/protocol/_add_codec.c dlog/_slots.h
EXTENSIONS := $(patsubst %.c,%$(EXT_SUFFIX),$(filter %.c,$(EXT_SOURCES)))

$(EXTENSIONS): $(EXT_SOURCES) | $(STAMP)
	$(PY) setup.py -q build_ext --inplace

# Bytecode for dlog's own modules, even where PYTHONDONTWRITEBYTECODE is set:
# every Spark Python worker and planner would otherwise compile them afresh.
install: system-deps $(STAMP) $(LINKS)/.linked $(EXTENSIONS)
	@$(PY) -m compileall -q dlog subscriptions >/dev/null

demo: install
	$(PY) examples/demo.py

test: install
	$(PY) -m ruff check dlog subscriptions tests bench examples
	$(PY) -m ruff format --check dlog subscriptions tests bench examples
	$(PY) -m mypy
	$(PY) -m pytest $(PYTEST_ARGS) tests

proto: install
	$(PY) -m grpc_tools.protoc -I proto --python_out=dlog/protocol --pyi_out=dlog/protocol $(PROTOS)

BENCHES ?= bookie_add flush_loop_lag ledger_throughput dlog_write subscriptions_store spark_read proxy

bench: install
	@for b in $(BENCHES); do echo "== bench/$$b.py"; $(PY) bench/$$b.py || exit 1; done

CHAOS_ARGS ?=

chaos: install
	$(PY) -m tests.chaos.run $(CHAOS_ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis
