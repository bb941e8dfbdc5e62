"""
The wheel and the service install (issue 19, point 6): what the wheel
holds and leaves out, its dependency bounds, and C{make install} into a
scratch prefix run as the service user would run it.

The wheel is built once for the module (C{pip wheel}, a few seconds) and
installed once (C{make install}, which fetches the dependencies: about 20
seconds).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from twisted.trial.unittest import SkipTest, SynchronousTestCase

CHECKOUT = Path(__file__).resolve().parent.parent

# What imapmig.testing ships: the demo's and python -m
# imapmig.testing.dovecot's modules (those of them this checkout has);
# every other one is a test fixture.
SHIPPED_TESTING = {
    name
    for name in (
        "imapmig/testing/__init__.py",
        "imapmig/testing/accounts.py",
        "imapmig/testing/children.py",
        "imapmig/testing/corpus.py",
        "imapmig/testing/dovecot.py",
        "imapmig/testing/localserver.py",
        "imapmig/testing/ports.py",
        "imapmig/testing/privateserver.py",
    )
    if (CHECKOUT / name).exists()
}

_PLUGIN_CACHE_WARNING = "Unable to write to plugin cache"


def installedEnvironment() -> dict[str, str]:
    """
    This process's environment without what would point the installed
    venv's interpreter (the system's) at this one's modules: trial's
    workers run with C{PYTHONPATH} set to their own C{sys.path}.
    """
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

# Built or installed once for the module; and why the install failed.
_built: dict[str, Path] = {}
_failed: dict[str, str] = {}


def _scratch() -> Path:
    """
    A directory every user may traverse, removed when the test run ends.
    """
    path = Path(tempfile.mkdtemp(prefix="imapmig-packaging-"))
    path.chmod(0o755)
    atexit.register(shutil.rmtree, path, True)
    return path


NEEDS_POSTGRESQL_EXTRA = (
    "imapmig.daemon.pgstate",
    "imapmig.queue._pgcontrols",
    "imapmig.queue._pgfleetview",
    "imapmig.queue._pgjoblist",
    "imapmig.queue._pgschema",
    "imapmig.queue._pgstatements",
    "imapmig.queue.postgresql",
    "imapmig.state._copysides",
    "imapmig.state._pgbase",
    "imapmig.state._pgbatch",
    "imapmig.state._pgoutcomes",
    "imapmig.state._pgrecords",
    "imapmig.state._pgschema",
    "imapmig.state._pgwrites",
    "imapmig.state.copying",
    "imapmig.state.pgconnect",
    "imapmig.state.postgresql",
)
"""
The modules of the wheel that import psycopg, which only the
C{imapmig[postgresql]} extra installs.
"""


def _copiedSource(out: Path, *ignored: str) -> Path:
    """
    Copy what the wheel and the sdist are made of from the checkout into
    C{out/source}, leaving out the names matching C{ignored}.

    @return: the copy's path.
    """
    source = out / "source"
    source.mkdir()
    for name in ("setup.cfg", "setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy(CHECKOUT / name, source / name)
    for name in ("imapmig", "twisted", "config", "systemd", "docs", "man"):
        shutil.copytree(CHECKOUT / name, source / name, ignore=shutil.ignore_patterns(*ignored))
    return source


def builtWheel() -> Path:
    """
    Build imapmig's wheel from the checkout, once for this module.

    @return: the wheel's path.
    """
    if "wheel" not in _built:
        out = _scratch()
        # pip builds in the source tree (build/, *.egg-info): build from a
        # copy of what the wheel is made of, so that trial's parallel
        # workers, each building its own, do not share one.
        source = _copiedSource(out, "__pycache__", "dropin.cache")
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        (_built["wheel"],) = out.glob("imapmig-*.whl")
    return _built["wheel"]


def requireRoot(testCase: SynchronousTestCase, why: str) -> None:
    """
    Skip C{testCase} unless it runs as root (fail it under C{CI=true}).
    """
    if os.geteuid() == 0 and shutil.which("runuser") and shutil.which("make"):
        return
    message = f"needs root, runuser and make: {why}"
    if os.environ.get("CI") == "true":
        testCase.fail(message)
    raise SkipTest(message)


def installed() -> Path:
    """
    Run C{make install} once for this module into a scratch tree: the
    venv, configuration, state and unit directories are all under it, the
    service user is C{nobody} (so no account is created), and the wheel is
    L{builtWheel}'s.

    @return: the scratch tree (C{opt/}, C{etc/}, C{state/}, C{units/}, C{man/}).
    """
    if "install" in _failed:
        raise AssertionError(_failed["install"])
    if "tree" not in _built:
        wheel = builtWheel()
        tree = _scratch()
        (tree / "units").mkdir()
        result = subprocess.run(
            [
                "make",
                "-C",
                str(CHECKOUT),
                "install",
                f"WHEEL={wheel}",
                f"PREFIX={tree / 'opt'}",
                f"SYSCONFDIR={tree / 'etc'}",
                f"STATEDIR={tree / 'state'}",
                f"UNITDIR={tree / 'units'}",
                f"MANDIR={tree / 'man'}",
                "SERVICE_USER=nobody",
                "SERVICE_GROUP=nogroup",
            ],
            env=installedEnvironment(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            # Once for the module: every test would fail the same way.
            _failed["install"] = f"make install failed:\n{result.stdout}{result.stderr}"
            raise AssertionError(_failed["install"])
        _built["tree"] = tree
    return _built["tree"]


class WheelTests(SynchronousTestCase):
    """
    What the wheel holds.
    """

    def setUp(self) -> None:
        self.names = set(zipfile.ZipFile(builtWheel()).namelist())

    def test_noTestFixtures(self) -> None:
        """
        Of imapmig.testing only the demo's modules are in the wheel; no
        test module, fixture file or plugin cache is.
        """
        testing = {name for name in self.names if name.startswith("imapmig/testing/")}
        self.assertEqual(testing, SHIPPED_TESTING)
        stray = [
            name
            for name in self.names
            if name.startswith("tests/") or "fixtures" in name or name.endswith("dropin.cache")
        ]
        self.assertEqual(stray, [])

    def test_shipsWhatRuns(self) -> None:
        """
        The daemon, the twistd plugin, the dashboard's files and py.typed
        are in the wheel.
        """
        for name in (
            "imapmig/daemon/__main__.py",
            "imapmig/daemon/main.py",
            "imapmig/daemon/tap.py",
            "imapmig/demo.py",
            "imapmig/py.typed",
            "imapmig/status/static/index.html",
            "twisted/plugins/imapmig_plugin.py",
            "imapmig/mail/_octets.pyi",
            "imapmig/sources/_listing.pyi",
            "imapmig/imap/_literal.pyi",
            "imapmig/imap/_append.pyi",
            "imapmig/job/_sent.pyi",
        ):
            self.assertIn(name, self.names)

    def test_octetsExtension(self) -> None:
        """
        Where a C compiler and Python's headers are, the wheel holds the C
        pass over messages' octets and the listing's file status
        (imapmig/mail/_octets.c and imapmig/sources/_listing.c built;
        without them, the build goes on and imapmig uses their Python
        twins), and not their sources; so the FETCH literal buffer
        (imapmig/imap/_literal.c) and the send side's loops
        (imapmig/imap/_append.c) and the job's loops over the messages it
        sends (imapmig/job/_sent.c).
        """
        headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
        for module in ("imapmig/mail/_octets", "imapmig/sources/_listing", "imapmig/imap/_literal",
                       "imapmig/imap/_append", "imapmig/job/_sent"):
            built = [name for name in self.names if name.startswith(module + ".")]
            if shutil.which(os.environ.get("CC", "gcc")) and headers.exists():
                self.assertEqual(len([name for name in built if name.endswith(".so")]), 1, built)
            self.assertNotIn(module + ".c", built)

    def test_documentation(self) -> None:
        """
        README.md and LICENSE install under share/doc/imapmig, every page
        of the manual (docs/*.md) under share/doc/imapmig/docs, the
        minimal and the example configuration and the units under
        share/doc/imapmig/examples, the manual pages under share/man.
        """
        data = {
            name.split(".data/data/", 1)[1]
            for name in self.names
            if ".data/data/" in name
        }
        self.assertEqual(
            data,
            {
                "share/doc/imapmig/README.md",
                "share/doc/imapmig/LICENSE",
                *(f"share/doc/imapmig/docs/{page.name}" for page in (CHECKOUT / "docs").glob("*.md")),
                "share/doc/imapmig/examples/imapmig.yaml",
                "share/doc/imapmig/examples/imapmig.example.yaml",
                "share/doc/imapmig/examples/users.example.csv",
                "share/doc/imapmig/examples/imapmig.service",
                "share/doc/imapmig/examples/imapmig@.service",
                "share/man/man1/imapmig.1",
                "share/man/man5/imapmig.yaml.5",
                "share/man/man8/imapmig-daemon.8",
            },
        )


class SourceDistributionTests(SynchronousTestCase):
    """
    The source distribution holds what the C extensions are built from.
    """

    def test_extensionSources(self) -> None:
        """
        Every source and header setup.py names for an extension (their
        sources and depends) is in the sdist MANIFEST.in makes: a wheel
        built from it builds the extensions.
        """
        named = re.findall(r'"(imapmig/[\w/]+\.[ch])"', (CHECKOUT / "setup.py").read_text())
        self.assertIn("imapmig/mail/_crlf.c", named)
        self.assertIn("imapmig/mail/_crlf.h", named)
        out = _scratch()
        source = _copiedSource(out, "__pycache__", "*.so")
        subprocess.run(
            [sys.executable, "setup.py", "-q", "sdist", "-d", str(out)],
            cwd=source,
            check=True,
            capture_output=True,
            timeout=300,
        )
        (sdist,) = out.glob("imapmig-*.tar.gz")
        with tarfile.open(sdist) as archive:
            members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        self.assertEqual([name for name in named if name not in members], [])


class MetadataTests(SynchronousTestCase):
    """
    The wheel's dependencies.
    """

    def requirements(self) -> list[str]:
        """
        The wheel's Requires-Dist lines outside extras.
        """
        wheel = zipfile.ZipFile(builtWheel())
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        lines = wheel.read(name).decode("utf-8").splitlines()
        return [
            line.split(":", 1)[1].strip()
            for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line
        ]

    def test_upperBounds(self) -> None:
        """
        Every dependency has an upper bound, and the version installed
        here (the one tested) is below it, in the bound's major version's
        range: the bound is the next major, not one further.
        """
        requirements = self.requirements()
        self.assertGreater(len(requirements), 5)
        for requirement in requirements:
            match = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*(.*)", requirement)
            assert match is not None
            name, specifiers = match.groups()
            upper = re.search(r"<\s*([0-9]+)(?:,|$)", specifiers)
            self.assertIsNotNone(upper, f"{requirement}: no upper bound")
            assert upper is not None
            bound = int(upper.group(1))
            tested = int(metadata.version(name).split(".")[0])
            self.assertEqual(
                (name, tested + 1),
                (name, bound),
                f"{requirement}: tested with {metadata.version(name)}",
            )


class InstallTests(SynchronousTestCase):
    """
    C{make install} into a scratch tree, and the installed daemon run as
    an unprivileged user.
    """

    def setUp(self) -> None:
        requireRoot(self, "make install sets owners and the test runs twistd as nobody")
        self.tree = installed()
        (self.sitePackages,) = (self.tree / "opt" / "lib").glob("python3*/site-packages")

    def test_documentationPath(self) -> None:
        """
        The README and the manual's index are where the units'
        Documentation= says, relative to the prefix (/opt/imapmig in the
        units).
        """
        doc = self.tree / "opt" / "share" / "doc" / "imapmig"
        unit = (self.tree / "units" / "imapmig.service").read_text()
        for page in ("README.md", "docs/README.md"):
            self.assertEqual((doc / page).read_bytes(), (CHECKOUT / page).read_bytes())
            self.assertIn(f"Documentation=file://{doc / page}\n", unit)
        self.assertTrue((doc / "LICENSE").exists())
        self.assertIn(f"ExecStart={self.tree / 'opt' / 'bin' / 'imapmig-daemon'} --config ", unit)

    def test_manPages(self) -> None:
        """
        The manual pages the units' Documentation= names are installed
        where man finds them (MANDIR, /usr/local/share/man by default), as
        built in man/.
        """
        for page in ("man1/imapmig.1", "man5/imapmig.yaml.5", "man8/imapmig-daemon.8"):
            self.assertEqual((self.tree / "man" / page).read_bytes(), (CHECKOUT / "man" / page).read_bytes())

    def test_directories(self) -> None:
        """
        The configuration is 0640 root:GROUP in a 0750 directory, the
        credentials directory root's alone, the state directory 0700 and
        the service user's.
        """
        import grp
        import pwd

        def described(path: Path) -> tuple[str, str, str]:
            st = path.stat()
            return (oct(st.st_mode & 0o7777), pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name)

        self.assertEqual(
            [
                described(self.tree / "etc"),
                described(self.tree / "etc" / "imapmig.yaml"),
                described(self.tree / "etc" / "credentials"),
                described(self.tree / "state"),
            ],
            [
                ("0o750", "root", "nogroup"),
                ("0o640", "root", "nogroup"),
                ("0o700", "root", "root"),
                ("0o700", "nobody", "nogroup"),
            ],
        )

    def test_minimalConfiguration(self) -> None:
        """
        The configuration make install writes is config/imapmig.yaml, its
        paths under the install's directories, and the installed
        C{imapmig-daemon --check-config} run as the service user accepts
        it as it is (its two password files hold a placeholder); the full
        reference is beside it as imapmig.example.yaml.
        """
        etc = self.tree / "etc"
        self.assertEqual(
            (etc / "imapmig.example.yaml").read_bytes(),
            (CHECKOUT / "config" / "imapmig.example.yaml").read_bytes(),
        )
        configuration = (etc / "imapmig.yaml").read_text()
        self.assertIn(f"password_file: {etc}/alice-old.pw", configuration)
        self.assertIn(f"state: {self.tree / 'state'}/state.sqlite", configuration)
        result = subprocess.run(
            [
                "runuser", "-u", "nobody", "--",
                str(self.tree / "opt" / "bin" / "imapmig-daemon"),
                "--config", str(etc / "imapmig.yaml"), "--check-config",
            ],
            cwd="/",
            env=installedEnvironment(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(
            (result.returncode, result.stdout + result.stderr),
            (
                0,
                f"{etc / 'imapmig.yaml'}: configuration OK: 1 job, 2 servers\n"
                f"{etc / 'imapmig.yaml'}: state: SQLite database {self.tree / 'state'}/state.sqlite\n",
            ),
        )

    def test_shippedModulesImport(self) -> None:
        """
        Every module in the installed package imports without the test
        fixtures left out of the wheel (run from /, so the checkout is not
        on the path), but for the PostgreSQL store and queue, which need
        the C{imapmig[postgresql]} extra (psycopg) that C{make install}
        leaves out: exactly those fail, and only for want of psycopg.
        """
        script = (
            "import pkgutil, importlib, imapmig\n"
            "for m in pkgutil.walk_packages(imapmig.__path__, 'imapmig.'):\n"
            "    try:\n"
            "        importlib.import_module(m.name)\n"
            "    except ModuleNotFoundError as e:\n"
            "        if e.name != 'psycopg':\n"
            "            raise\n"
            "        print('needs psycopg:', m.name)\n"
            "print(imapmig.__file__)\n"
        )
        result = subprocess.run(
            [str(self.tree / "opt" / "bin" / "python"), "-c", script],
            cwd="/",
            env=installedEnvironment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        *extraOnly, location = result.stdout.splitlines()
        self.assertEqual(
            sorted(line.removeprefix("needs psycopg: ") for line in extraOnly),
            sorted(NEEDS_POSTGRESQL_EXTRA),
        )
        self.assertTrue(location.startswith(str(self.sitePackages)), result.stdout)

    def twistdAsNobody(self) -> str:
        """
        Start the installed twistd as C{nobody} with a valid configuration
        and read its log until it reports that it is starting up (Twisted
        logs the plugin scan's problems, which happen before, first); then
        stop it.

        @return: the log lines up to that one.
        """
        work = Path(tempfile.mkdtemp(prefix="imapmig-nobody-"))
        self.addCleanup(shutil.rmtree, work, True)
        for sub in ("cur", "new", "tmp"):
            (work / "md" / sub).mkdir(parents=True)
        (work / "pw").write_text("pw\n")
        (work / "pw").chmod(0o600)
        (work / "imapmig.yaml").write_text(
            "state: s.sqlite\n"
            "status: off\n"
            "servers:\n"
            '  dst: {endpoint: "tcp:127.0.0.1:9", starttls: "off"}\n'
            "jobs:\n"
            "  - name: j\n"
            "    source: {maildir: md}\n"
            "    destination: {server: dst, user: u, password_file: pw}\n"
        )
        (work / "imapmig.yaml").chmod(0o600)
        subprocess.run(["chown", "-R", "nobody:nogroup", str(work)], check=True)
        process = subprocess.Popen(
            [
                "runuser", "-u", "nobody", "--",
                str(self.tree / "opt" / "bin" / "twistd"),
                "--nodaemon", "--pidfile=", "imapmig", "--config", "imapmig.yaml",
            ],
            cwd=work,
            env=installedEnvironment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen = []
        try:
            assert process.stdout is not None
            for line in process.stdout:
                seen.append(line)
                if "starting up." in line:
                    break
        finally:
            process.terminate()
            process.wait(30)
        self.assertTrue(seen and "starting up." in seen[-1], "".join(seen))
        return "".join(seen)

    def test_noPluginCacheWarning(self) -> None:
        """
        twistd run as an unprivileged user finds the plugin cache that
        make install wrote, fresh, and does not warn that it cannot write
        it.
        """
        self.assertNotIn(_PLUGIN_CACHE_WARNING, self.twistdAsNobody())

    def test_pluginCacheWarningWithoutCache(self) -> None:
        """
        The check above can fail: without the cache, the same run warns.
        """
        cache = self.sitePackages / "twisted" / "plugins" / "dropin.cache"
        aside = cache.with_name("dropin.cache.aside")
        cache.rename(aside)
        self.addCleanup(aside.rename, cache)
        self.assertIn(_PLUGIN_CACHE_WARNING, self.twistdAsNobody())
