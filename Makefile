# The README's two commands, `make demo` and `make test`, install everything they need:
# Debian packages through apt, a virtualenv at .venv, and pip packages. Both are safe to
# run twice.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DEBS := kcat zookeeper docker-compose openjdk-17-jdk-headless maven postgresql chromium iproute2
STAMP := $(VENV)/.installed
JAVA_STAMP := $(VENV)/.java-installed

export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: demo demo-cluster test bench deps debs java clean

demo: deps
	$(VENV)/bin/pylog demo

# The docker-compose topology as local processes: ZooKeeper, 3 brokers, HDFS, a Spark
# standalone cluster, Airflow's scheduler on PostgreSQL (see the README).
demo-cluster: deps
	$(VENV)/bin/pylog demo --cluster --workdir demo-cluster-data

# The modules run on TEST_WORKERS pytest-xdist workers, a module to a worker (tests of one
# module share its broker, ZooKeeper or SparkSession): most tests wait on processes, so
# three workers keep two cores busy. TEST_WORKERS=0 runs them in this process, in order.
TEST_WORKERS ?= 3

test: deps
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: deps
	$(PY) benchmarks/run_all.py

deps: debs $(STAMP) $(JAVA_STAMP)

# The Java components the tests and the cluster demo run as real processes (HDFS's
# daemons, Apache Kafka, ...), one pom each under pylog/testing/maven/, fetched from Maven
# Central into ~/.m2 and cached; see pylog/testing/maven.py.
$(JAVA_STAMP): $(STAMP) $(wildcard pylog/testing/maven/*/pom.xml)
	$(PY) -m pylog.testing.maven fetch
	touch $(JAVA_STAMP)

# Installs the Debian packages only when one is missing, so a second run is quick.
debs:
	@if ! dpkg -s $(DEBS) >/dev/null 2>&1; then \
	  echo "installing Debian packages: $(DEBS)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBS); \
	fi

$(STAMP): pyproject.toml setup.py pylog/records/_speedups.c pylog/protocol/_speedups.c
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[all]"
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
