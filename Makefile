# pagestore — the two commands of the README, and the long runs.
#   make bench    set up, then the main benchmark job (quick matrix, peers, report)
#   make test     set up, then the whole test suite
#   make torture  long crash / kill -9 loops (not part of make test)
#   make gc-stress the storage suites with the collector running constantly
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
CSRC    := $(wildcard pagestore/csrc/*.c pagestore/csrc/*.h)
PYTEST  := $(BIN)/python -m pytest
export PYTHONDONTWRITEBYTECODE := 1

ifeq ($(PAGESTORE_SANITIZE),1)
# The instrumented extension needs the sanitizer runtimes loaded before Python.
SANITIZE_ENV := LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
                ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
endif

.PHONY: setup build test torture gc-stress microbench bench java clean

setup: $(STAMP) build

$(STAMP): requirements.txt requirements-bench.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==25.3
	$(BIN)/pip install -q -r requirements.txt -r requirements-bench.txt
	# the checkout itself, editable: pagestore.wal, pagestore.checkpoint, ...
	# map to the top-level folders (pyproject.toml's package-dir)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

# The C core is rebuilt in place whenever a C source, the builder or the
# sanitizer switch changes.
build: $(STAMP)
	@want="sanitize=$(PAGESTORE_SANITIZE)"; have=$$(cat build/.flavour 2>/dev/null); \
	if [ "$$want" != "$$have" ] || [ -n "$$(find $(CSRC) pagestore/_build.py -newer build/.flavour 2>/dev/null)" ] \
	   || ! ls pagestore/_core*.so >/dev/null 2>&1; then \
	  rm -f pagestore/_core*.so; \
	  $(BIN)/python setup.py -q build_ext --inplace --force && mkdir -p build && echo "$$want" > build/.flavour; \
	fi

java:
	@command -v java >/dev/null 2>&1 || { echo "installing Java 17 (Spark needs it)"; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }

test: setup java
	$(SANITIZE_ENV) $(PYTEST) -q -m "not slow" --benchmark-disable -p no:warnings tests

gc-stress: setup
	PAGESTORE_GC_STRESS=1 $(PYTEST) -q -m "not slow" --benchmark-disable -p no:warnings \
	  tests/pagestore tests/crash tests/checkpoint tests/recovery tests/wal tests/diskio

microbench: setup
	$(PYTEST) -q --benchmark-only tests/pagestore/test_microbench.py

torture: setup
	PAGESTORE_TORTURE=1 $(PYTEST) -q -m slow tests

bench: setup java
	$(BIN)/python -m bench quick --results results
	$(BIN)/python -m bench.spark report results --out results/report

clean:
	rm -rf build pagestore/_core*.so pagestore/_core.c results
