# imapmig: setup, demo and tests on Debian (run as root for the apt step).
#
#   make demo    set everything up and run a demo migration into a private Dovecot
#   make test    set everything up and run the whole test suite (mypy + trial)
#   make test-browser  only the dashboard's real-browser test (headless Chromium)

PYTHON  ?= python3
VENV    ?= .venv
BIN      = $(VENV)/bin
APT_PACKAGES = python3 python3-venv python3-dev dovecot-imapd openssl ca-certificates gcc libc6-dev iproute2 \
               chromium chromium-driver

.PHONY: setup system-packages servers venv demo test trial typecheck bench clean test-browser

setup: system-packages servers venv

system-packages:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	    if [ -n "$$missing" ]; then \
	        echo "Installing Debian packages:$$missing"; \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	    fi; \
	else \
	    echo "Not root or no apt-get: make sure these are installed: $(APT_PACKAGES)"; \
	fi

# Cyrus and Courier beside Dovecot, unpacked into /opt/imapmig-servers
# (.ci/install-servers says how); a second run does nothing.
servers: system-packages
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    .ci/install-servers; \
	else \
	    echo "Not root or no apt-get: the Cyrus and Courier tests need .ci/install-servers run as root"; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

venv: $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q ".[dev]"
	$(BIN)/python -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))"

demo: setup
	$(BIN)/python -m imapmig.demo

typecheck:
	$(BIN)/mypy

trial:
	$(BIN)/python -m twisted.trial --random=0 tests

test: setup typecheck trial

# Screenshots go to $IMAPMIG_SCREENSHOTS (default _trial_temp/screenshots/).
test-browser: setup
	CI=$${CI:-true} $(BIN)/python -m twisted.trial tests.test_browser

# The benchmark (issue 3): bench/run.py's docstring documents it.
#   make bench        the full matrix (about 60 minutes); BENCH_ARGS adds options
#   make bench-quick  a smoke run (under a minute)
BENCH_APT_PACKAGES = isync build-essential dovecot-imapd iproute2
BENCH_PIP_PACKAGES = matplotlib
BENCH_ARGS ?=

.PHONY: bench-quick bench-packages

bench-packages: setup
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    missing=""; for p in $(BENCH_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	    if [ -n "$$missing" ]; then \
	        echo "Installing Debian packages:$$missing"; \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	    fi; \
	else \
	    echo "Not root or no apt-get: make sure these are installed: $(BENCH_APT_PACKAGES)"; \
	fi
	$(BIN)/python -m pip install -q $(BENCH_PIP_PACKAGES)

bench: bench-packages
	$(BIN)/python -m bench.run $(BENCH_ARGS)

bench-quick: bench-packages
	$(BIN)/python -m bench.run --quick $(BENCH_ARGS)

clean:
	rm -rf $(VENV) _trial_temp demo build *.egg-info
