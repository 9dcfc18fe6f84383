"""``pip install dlog`` is the client library: the bookie's, the command
line's and Spark's dependencies are extras, so client modules must import
without them; both packages ship ``py.typed``."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import dlog
import subscriptions

ROOT = Path(__file__).resolve().parents[2]
#: Installed only with an extra (bookie, cli, spark, server).
EXTRA_ONLY = ("rocksdict", "typer", "rich", "pyspark", "pyarrow", "grpc", "thriftpy2")

# Every client module: dlog's top-level modules, its ledger, conf and
# protocol packages, subscriptions, and the command line's entry point.
# Not the bookie, the sandbox, Spark or the command implementations.
IMPORT_CLIENT = f"""
import importlib, pkgutil, sys
for name in {EXTRA_ONLY!r}:
    sys.modules[name] = None  # importing one now fails
import dlog, dlog.conf, dlog.ledger, dlog.protocol, subscriptions
names = ["dlog.cli"]
names += [
    f"dlog.{{m.name}}" for m in pkgutil.iter_modules(dlog.__path__)
    if not m.ispkg and not m.name.startswith("__")
]
for pkg in (dlog.conf, dlog.ledger, dlog.protocol, subscriptions):
    names += [f"{{pkg.__name__}}.{{m.name}}" for m in pkgutil.iter_modules(pkg.__path__)]
for name in names:
    importlib.import_module(name)
loaded = {{n.split(".")[0] for n, m in sys.modules.items() if m is not None}}
assert not set({EXTRA_ONLY!r}) & loaded, set({EXTRA_ONLY!r}) & loaded
for required in ("dlog.namespace", "dlog.log", "dlog.sync", "dlog.writer", "dlog.reader",
                 "dlog.ledger.client", "subscriptions.consumer"):
    assert required in sys.modules, required
print(len(names))
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_client_modules_import_without_any_extra() -> None:
    done = run(IMPORT_CLIENT)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 20


def test_the_command_line_names_the_missing_extra() -> None:
    for module, extra in (("typer", "cli"), ("rich", "cli")):
        done = run(
            f"import sys; sys.modules[{module!r}] = None; sys.argv = ['dlog', '--help']\n"
            "from dlog.cli import main\nmain()"
        )
        assert done.returncode == 1
        assert f"pip install 'dlog[{extra}]'" in done.stderr
        assert "Traceback" not in done.stderr


def test_both_packages_are_typed() -> None:
    for package in (dlog, subscriptions):
        assert (Path(package.__file__).parent / "py.typed").is_file(), package.__name__
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = data["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["dlog"]
    assert "py.typed" in package_data["subscriptions"]


def test_core_dependencies_are_the_client_library() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {
            r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
            for r in requirements
        }

    core = names(project["dependencies"])
    assert not core & {"rocksdict", "typer", "rich", "pyspark", "pyarrow", "grpcio", "thriftpy2"}
    extras = project["optional-dependencies"]
    assert "rocksdict" in names(extras["bookie"])
    assert {"typer", "rich"} <= names(extras["cli"])
    assert {"pyspark", "pyarrow"} <= names(extras["spark"])
    for extra in ("bookie", "cli", "spark", "server"):
        assert any(extra in r for r in extras["all"] if r.startswith("dlog[")), extra


def test_metadata_builds_without_deprecation_warnings(tmp_path: Path) -> None:
    """The license is an SPDX expression (PEP 639), not the deprecated
    ``{ text = ... }`` table setuptools warns about on every install."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    for package in ("dlog", "subscriptions"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "always",
            "-c",
            "from setuptools import build_meta\n"
            "print(build_meta.prepare_metadata_for_build_wheel('out'))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "deprecated" not in output.lower(), output
    assert "Warning" not in output, output
    dist_info = done.stdout.strip().splitlines()[-1]
    metadata = (tmp_path / "out" / dist_info / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    # The SPDX form needs setuptools 77; an older one would fail the build.
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert "setuptools>=77" in requires


def test_a_dlog_folder_in_the_working_directory_does_not_shadow_the_package(
    tmp_path: Path,
) -> None:
    """``cd`` somewhere with a ``dlog/`` folder (no ``__init__.py``, so a
    namespace package): the installed dlog is still the one imported, from
    ``python -c`` and ``python -m dlog``. An editable install needs
    ``make install`` for this (see the Makefile's dlog-packages links)."""
    for folder in ("dlog", "subscriptions"):
        (tmp_path / folder).mkdir()
    hint = "(a venv made by `make install`? see the Makefile's dlog-packages)"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dlog, subscriptions.consumer\n"
            "print(dlog.Namespace.__module__, subscriptions.consumer.Consumer.__name__)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, f"{hint}\n{done.stderr}"
    assert done.stdout.split() == ["dlog.namespace", "Consumer"]
    done = subprocess.run(
        [sys.executable, "-m", "dlog", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, f"{hint}\n{done.stderr}"
    assert "Usage: python -m dlog" in done.stdout


def test_only_our_two_packages_are_importable(tmp_path: Path) -> None:
    """The checkout's other folders are no packages of an install: ``proto``
    is a PyPI package's name, ``tests`` many distributions' folder."""
    for name in ("proto", "tests", "bench", "examples", "conf"):
        done = subprocess.run(
            [sys.executable, "-c", f"import {name}; print({name}.__path__)"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        if done.returncode == 0:
            assert str(ROOT / name) not in done.stdout, f"{name} is importable: {done.stdout}"
