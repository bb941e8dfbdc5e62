# imapmig: setup, demo and tests on Debian (run as root for the apt step).
#
#   make demo    set everything up and run a demo migration into a private Dovecot
#   make test    set everything up and run the whole test suite (mypy + trial)

PYTHON  ?= python3
VENV    ?= .venv
BIN      = $(VENV)/bin
APT_PACKAGES = python3 python3-venv python3-dev dovecot-imapd openssl ca-certificates gcc libc6-dev iproute2

.PHONY: setup system-packages venv demo test trial typecheck bench clean

setup: system-packages venv

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

clean:
	rm -rf $(VENV) _trial_temp demo build *.egg-info
