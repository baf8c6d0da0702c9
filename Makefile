# pagestore — the two commands of the README, and the long runs.
#   make bench    set up, then the main benchmark job (quick matrix, peers, report)
#   make test     set up, then the whole test suite
#   make bench-servers  the torn-page comparison against PostgreSQL and InnoDB
#   make bench-cluster  the Spark jobs on a local standalone cluster
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

.PHONY: setup build test torture gc-stress microbench bench bench-cluster bench-servers java chromium clean

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

# The report's layout test renders it in headless Chromium (Debian's package).
chromium:
	@command -v chromium >/dev/null 2>&1 || { echo "installing Chromium (the report's layout test needs it)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

test: setup java chromium
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

# A Spark standalone master and two workers from pyspark's jars on 127.0.0.1;
# generate, a 2-node run and the report against it; the JVMs are stopped by
# PID whatever happens (trap). Results: results/cluster/, report in its report/.
bench-cluster: setup java
	@d=$$(mktemp -d /tmp/pagestore-cluster.XXXXXX); \
	trap '$(BIN)/python -m bench.spark.cluster stop --dir '"$$d"'; rm -rf '"$$d"'/workload' EXIT INT TERM; \
	url=$$($(BIN)/python -m bench.spark.cluster start --dir $$d) && echo "cluster $$url ($$d)" && \
	$(BIN)/python -m bench.spark generate $$d/workload --ops 400000 --partitions 2 --mix put=0.9,get=0.1 --master $$url && \
	$(BIN)/python -m bench.spark run $$d/workload $(CURDIR)/results/cluster --nodes 2 --master $$url \
	  --set duration=8 --set checkpoint_interval=2 && \
	$(BIN)/python -m bench.spark report $(CURDIR)/results/cluster --out $(CURDIR)/results/cluster/report --master $$url

clean:
	rm -rf build pagestore/_core*.so pagestore/_fastget*.so pagestore/_core.c results

# Torn-page protection against PostgreSQL and InnoDB (docs/bench.md): installs the
# servers from the distribution's packages when missing, then runs the comparison.
bench-servers: setup
	@need=""; ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need="postgresql"; \
	test -x /usr/sbin/mariadbd || command -v mariadbd >/dev/null 2>&1 || need="$$need mariadb-server"; \
	if [ -n "$$need" ]; then echo "installing $$need"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need; fi
	$(BIN)/python -m bench.servers --results results
