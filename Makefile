# imapmig: setup, demo and tests on Debian (run as root for the apt step).
#
#   make demo    install what the demo uses (Python, Dovecot, openssl; no browser, Cyrus or
#                Courier) and run a demo migration into a private Dovecot
#   make test    set everything up and run the whole test suite (mypy + trial)
#   make test-browser  only the dashboard's real-browser test (headless Chromium)
#   make install    install the service (as root): user, venv in /opt/imapmig,
#                   /etc/imapmig, the units; make uninstall / make purge undo it

PYTHON  ?= python3
VENV    ?= .venv
BIN      = $(VENV)/bin
# What the demo uses: Python and its venv, Dovecot, openssl (the demo's TLS
# certificates), the CA certificates pip needs.
DEMO_APT_PACKAGES = python3 python3-venv dovecot-imapd openssl ca-certificates
# What the tests use besides: systemd: systemd-analyze (tests/test_unit.py);
# adduser: make install; chromium: the dashboard's browser test; postgresql:
# the private clusters of imapmig/testing/postgresql.py (Debian 12: PostgreSQL
# 15 in /usr/lib/postgresql/15/bin; the packaged cluster is left alone).
APT_PACKAGES = $(DEMO_APT_PACKAGES) python3-dev gcc libc6-dev iproute2 \
               chromium chromium-driver systemd adduser postgresql

# apt-get waits up to APT_LOCK_WAIT seconds for the dpkg lock another apt-get
# (unattended-upgrades, a second make) holds, instead of failing at once;
# .ci/apt-update does the same for apt-get update's lists lock.
APT_LOCK_WAIT ?= 600
export APT_LOCK_WAIT
APT_GET = DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=$(APT_LOCK_WAIT)

# $(call apt_install,PACKAGES): install those of PACKAGES that are missing (as root).
define apt_install
@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
    missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
    if [ -n "$$missing" ]; then \
        echo "Installing Debian packages:$$missing"; \
        .ci/apt-update && $(APT_GET) install -y -qq $$missing; \
    fi; \
else \
    echo "Not root or no apt-get: make sure these are installed: $(1)"; \
fi
endef

.PHONY: setup system-packages demo-packages demo-venv servers venv demo test trial typecheck bench \
        clean test-browser wheel install uninstall purge

setup: system-packages servers venv

system-packages:
	$(call apt_install,$(APT_PACKAGES))

demo-packages:
	$(call apt_install,$(DEMO_APT_PACKAGES))

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

# imapmig and its dependencies only (the tests' tools come with make test).
demo-venv: demo-packages $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q .
	$(BIN)/python -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))"

demo: demo-packages demo-venv
	$(BIN)/python -m imapmig.demo

typecheck:
	$(BIN)/mypy

trial:
	$(BIN)/python -m twisted.trial -j2 --random=0 tests

test: setup typecheck trial

# Screenshots go to $IMAPMIG_SCREENSHOTS (default _trial_temp/screenshots/).
test-browser: setup
	CI=$${CI:-true} $(BIN)/python -m twisted.trial tests.test_browser tests.test_browser_controls

# The benchmark (issues 3, 17, 30 and 31): bench/run.py's docstring documents it;
# docs/benchmark.md "Running the benchmark" says what each target runs and costs.
#   make bench        every part but the fleet's, medians of 3 runs (about 50 minutes):
#                     results.md, and summary.md (issue 31's acceptance, one line per
#                     ratio), then README.md's Speed table from it; BENCH_ARGS adds
#                     options (BENCH_ARGS="--runs 5": about 75 minutes)
#   make bench-big    the big-account rows: 5,000 and 500,000 messages, spread over
#                     folders and in one folder (an hour or more)
#   make bench-fleet  the fleet part (issue 30, a private PostgreSQL; about 10 minutes)
#   make bench-quick  a smoke run (under a minute) into bench/work/quick-results
#   make bench-readme README.md's Speed table from bench/results/summary.md
BENCH_APT_PACKAGES = isync build-essential dovecot-imapd iproute2
BENCH_PIP_PACKAGES = matplotlib
BENCH_PARTS ?= tls,s2s,scale,main,servers,compress,nagle
BENCH_RUNS  ?= 3
BENCH_ARGS ?=

.PHONY: bench-quick bench-packages bench-big bench-fleet bench-readme

bench-packages: setup
	$(call apt_install,$(BENCH_APT_PACKAGES))
	$(BIN)/python -m pip install -q $(BENCH_PIP_PACKAGES)

bench: bench-packages
	$(BIN)/python -m bench.run --parts $(BENCH_PARTS) --runs $(BENCH_RUNS) $(BENCH_ARGS)
	$(BIN)/python -m bench.summary --readme

bench-big: bench-packages
	$(BIN)/python -m bench.run --bigaccount $(BENCH_ARGS)
	$(BIN)/python -m bench.summary --readme

# psycopg comes with the dev extra (make setup), PostgreSQL with system-packages.
bench-fleet: bench-packages
	$(BIN)/python -m bench.run --parts fleet $(BENCH_ARGS)

bench-quick: bench-packages
	$(BIN)/python -m bench.run --quick $(BENCH_ARGS)

bench-readme:
	$(BIN)/python -m bench.summary --readme

# The service install, Debian style (docs/install.md).
#   make install     as root: the system user imapmig, a venv at $(PREFIX) with
#                    imapmig's wheel and its dependencies, Twisted's plugin
#                    cache, /etc/imapmig (the minimal configuration, 0640
#                    root:imapmig, with its two placeholder password files,
#                    kept if present; the full reference beside it as
#                    imapmig.example.yaml), /var/lib/imapmig (0700),
#                    the units in $(UNITDIR); systemctl daemon-reload if
#                    systemd runs.  Enabling is left to the admin, once the
#                    configuration is written: systemctl enable --now imapmig
#   make uninstall   stops and disables the units, removes them and $(PREFIX);
#                    keeps /etc/imapmig, /var/lib/imapmig and the user
#   make purge       uninstall, then removes those too
# SERVICE_PYTHON: the venv's interpreter: the system's, which the service
# user can reach (not one under /root, which ProtectHome= hides).
PREFIX         ?= /opt/imapmig
SERVICE_PYTHON ?= /usr/bin/python3
SYSCONFDIR     ?= /etc/imapmig
STATEDIR       ?= /var/lib/imapmig
UNITDIR        ?= /etc/systemd/system
# The manual pages go where man finds them (the venv's copy is not on its path).
MANDIR         ?= /usr/local/share/man
MANPAGES        = man1/imapmig.1 man5/imapmig.yaml.5 man8/imapmig-daemon.8
SERVICE_USER   ?= imapmig
SERVICE_GROUP  ?= $(SERVICE_USER)
WHEELDIR       ?= build/wheel
# WHEEL: install this wheel instead of building one (tests/test_packaging.py).
WHEEL          ?=
UNITS           = imapmig.service imapmig@.service

# Built with the setup venv's pip (it fetches setuptools for the build).
wheel: $(BIN)/python
	rm -rf $(WHEELDIR)
	$(BIN)/python -m pip wheel -q --no-deps -w $(WHEELDIR) .

install: $(if $(WHEEL),,wheel)
	@[ "$$(id -u)" = 0 ] || { echo "make install: run as root"; exit 1; }
	getent passwd $(SERVICE_USER) >/dev/null || \
	    adduser --system --group --home $(STATEDIR) \
	        --gecos "imapmig migration daemon" $(SERVICE_USER)
	install -d -m 0700 -o $(SERVICE_USER) -g $(SERVICE_GROUP) $(STATEDIR)
	[ -x $(PREFIX)/bin/python ] || $(SERVICE_PYTHON) -m venv $(PREFIX)
	$(PREFIX)/bin/python -m pip install -q --force-reinstall --no-deps $(or $(WHEEL),$(WHEELDIR)/imapmig-*.whl)
	$(PREFIX)/bin/python -m pip install -q $(or $(WHEEL),$(WHEELDIR)/imapmig-*.whl)
	# Twisted's plugin cache, written now as root: twistd run as the service
	# user would find none and warn that it cannot write one.
	$(PREFIX)/bin/python -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))"
	ls $(PREFIX)/lib/python3*/site-packages/twisted/plugins/dropin.cache
	for page in $(MANPAGES); do \
	    install -D -m 0644 $(PREFIX)/share/man/$$page $(MANDIR)/$$page || exit 1; \
	done
	install -d -m 0750 -o root -g $(SERVICE_GROUP) $(SYSCONFDIR)
	install -d -m 0700 -o root -g root $(SYSCONFDIR)/credentials
	install -m 0640 -o root -g $(SERVICE_GROUP) config/imapmig.example.yaml $(SYSCONFDIR)/imapmig.example.yaml
	# The minimal configuration (docs/install.md), only if there is none, with
	# the two password files it names holding a placeholder.
	if [ ! -e $(SYSCONFDIR)/imapmig.yaml ]; then \
	    for pw in alice-old alice-new; do \
	        [ -e $(SYSCONFDIR)/$$pw.pw ] || { install -m 0600 -o $(SERVICE_USER) -g $(SERVICE_GROUP) /dev/null $(SYSCONFDIR)/$$pw.pw && \
	            echo change-me > $(SYSCONFDIR)/$$pw.pw; } || exit 1; \
	    done; \
	    sed -e 's|/etc/imapmig/|$(SYSCONFDIR)/|g' -e 's|/var/lib/imapmig/|$(STATEDIR)/|g' \
	        config/imapmig.yaml > $(SYSCONFDIR)/imapmig.yaml.new && \
	    chown root:$(SERVICE_GROUP) $(SYSCONFDIR)/imapmig.yaml.new && chmod 0640 $(SYSCONFDIR)/imapmig.yaml.new && \
	    mv $(SYSCONFDIR)/imapmig.yaml.new $(SYSCONFDIR)/imapmig.yaml || exit 1; \
	fi
	for unit in $(UNITS); do \
	    sed -e 's|/opt/imapmig/|$(PREFIX)/|g' -e 's|/etc/imapmig/|$(SYSCONFDIR)/|g' \
	        -e 's|^User=imapmig$$|User=$(SERVICE_USER)|' -e 's|^Group=imapmig$$|Group=$(SERVICE_GROUP)|' \
	        systemd/$$unit > $(UNITDIR)/$$unit.new && \
	    chmod 0644 $(UNITDIR)/$$unit.new && mv $(UNITDIR)/$$unit.new $(UNITDIR)/$$unit || exit 1; \
	done
	@if [ -d /run/systemd/system ]; then systemctl daemon-reload; \
	else echo "systemd is not running: no daemon-reload"; fi
	@echo "Installed.  Next: edit $(SYSCONFDIR)/imapmig.yaml, then: systemctl enable --now imapmig"

uninstall:
	@[ "$$(id -u)" = 0 ] || { echo "make uninstall: run as root"; exit 1; }
	@if [ -d /run/systemd/system ]; then \
	    systemctl disable --now imapmig.service || true; \
	    systemctl stop 'imapmig@*.service' || true; \
	fi
	for unit in $(UNITS); do rm -f $(UNITDIR)/$$unit; done
	for page in $(MANPAGES); do rm -f $(MANDIR)/$$page; done
	@if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	rm -rf $(PREFIX)

purge: uninstall
	rm -rf $(SYSCONFDIR) $(STATEDIR)
	case "$(SERVICE_USER)" in root|nobody) exit 0;; esac; \
	if getent passwd $(SERVICE_USER) >/dev/null; then deluser --system $(SERVICE_USER); fi; \
	if getent group $(SERVICE_GROUP) >/dev/null; then delgroup --system $(SERVICE_GROUP); fi

clean:
	rm -rf $(VENV) _trial_temp demo build *.egg-info
