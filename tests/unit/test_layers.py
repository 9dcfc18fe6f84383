"""The layers of dlog and subscriptions point one way, with no cycles.

Every import of every module is read from its source (module level,
inside functions and under TYPE_CHECKING alike) and checked against the
layer map below, written once, here: a module may import modules of its
own layer or of a lower one, never of a higher one, and no set of modules
may import each other in a loop. Where two parts of one layer must stay
apart (the bookie server and the ledger client), that is stated too.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dlog", "subscriptions")

#: The layers, top first. A module belongs to the layer of the longest
#: prefix that names it (a package prefix covers its submodules).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "applications: the CLI, Spark, the sandbox",
        ("dlog.__main__", "dlog.cli", "dlog.spark", "dlog.sandbox"),
    ),
    ("the write proxy: its server (on the facade) and its clients", ("dlog.proxy",)),
    ("blocking facade", ("dlog.sync",)),
    ("facade: Namespace, LogManager", ("dlog", "dlog.namespace", "dlog.log")),
    (
        "stream parts: subscriptions, the writer, the reader, positions, retention",
        (
            "subscriptions",
            "dlog.writer",
            "dlog.reader",
            "dlog.positions",
            "dlog.retention",
        ),
    ),
    ("the stream context", ("dlog.stream",)),
    ("segment reader and ledger appender", ("dlog.segment_reader", "dlog.ledger.appender")),
    ("a bookie run as a service", ("dlog.bookie.service", "dlog.bookie.main")),
    (
        "AutoRecovery: the auditor and replication workers (a bookie may host them)",
        ("dlog.autorecovery",),
    ),
    ("the bookie's network server", ("dlog.bookie.server", "dlog.bookie.request_processor")),
    (
        "clients and stores: ledger client, bookie core, stream metadata, the lock",
        ("dlog.ledger", "dlog.bookie", "dlog.log_metadata", "dlog.lock"),
    ),
    (
        "ledger metadata in ZooKeeper, shared by the ledger client and the bookie "
        "(BookKeeper's meta package: the bookie's garbage collector reads it too)",
        ("dlog.ledger.metadata_store", "dlog.ledger.underreplication"),
    ),
    (
        "the gRPC control plane: hosts pass their providers down",
        ("dlog.control",),
    ),
    ("the ZooKeeper session: the one module that imports kazoo", ("dlog.zk",)),
    (
        "runtime helpers",
        (
            "dlog.blocking",
            "dlog.loop_thread",
            "dlog.tasks",
            "dlog.periodic",
            "dlog.singleflight",
            "dlog.retry",
            "dlog.failpoints",
            "dlog.loop_metrics",
            "dlog.stall_watchdog",
        ),
    ),
    (
        "formats, configuration and errors",
        (
            "dlog.errors",
            "dlog.dlsn",
            "dlog.record",
            "dlog._record_codec",  # dlog.record's loops in C (its stub: imports nothing)
            "dlog.extensions",
            "dlog.segment",
            "dlog.uri",
            "dlog.protocol",
            "dlog.conf",
            "dlog.ledger.metadata",
            "dlog.ledger.layout",
            "dlog.ledger.digest",
            "dlog.ledger.quorum",
            "dlog.spark.columns",  # the Spark executor's entry decoder: format code only
            "subscriptions.format",
        ),
    ),
]

#: Parts of one layer that must not import each other (either way); what
#: they share (the metadata layer and the bottom layer) excepted.
APART: list[tuple[str, str]] = [
    ("dlog.ledger", "dlog.bookie"),  # the client speaks to bookies over the wire only
    ("dlog.spark", "dlog.cli"),  # two applications, each on the facade
]


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package in PACKAGES:
        # A stub without a .py twin is a compiled module's (its source is C).
        stubs = [p for p in (ROOT / package).rglob("*.pyi") if not p.with_suffix(".py").exists()]
        for path in sorted([*(ROOT / package).rglob("*.py"), *stubs]):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()

#: Layers every part may use: ledger metadata and the bottom layer.
SHARED = {
    len(LAYERS) - 1,
    next(i for i, (n, _) in enumerate(LAYERS) if n.startswith("ledger metadata")),
}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@functools.cache
def layer_of(module: str) -> int:
    """Index in LAYERS (0 is the top)."""
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise AssertionError(f"module {module} is in no layer: add it to LAYERS")
    return best


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """Every module of ours that ``module`` imports, anywhere in its source."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                names.append(sub if sub in MODULES else target)
        for name in names:
            # ``import a.b.c`` needs a.b.c itself; its parents are packages.
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name.split(".")[0] in PACKAGES and name != module:
                found.add(name)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m, targets in sorted(GRAPH.items())
        for t in sorted(targets)
        if layer_of(t) < layer_of(m)
    ]
    assert upward == []


def test_parts_that_must_stay_apart_do() -> None:
    crossing = [
        f"{m} imports {t}"
        for m, targets in sorted(GRAPH.items())
        for t in sorted(targets)
        for a, b in APART
        if layer_of(t) not in SHARED
        and (
            (_within(m, a) and _within(t, b) and not _within(t, a))
            or (_within(m, b) and _within(t, a) and not _within(t, b))
        )
    ]
    assert crossing == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


# -- the checker itself ------------------------------------------------------


def test_the_checker_sees_function_local_and_type_checking_imports(tmp_path: Path) -> None:
    """The writer imports the reader's layer peers at module level; these
    two facts are what a broken walker would miss."""
    assert "dlog.segment_reader" in GRAPH["dlog.reader"]
    assert "subscriptions.factory" in GRAPH["dlog.log"]
    tree_source = "def f():\n    from dlog.namespace import Namespace\n"
    module = ast.parse(tree_source)
    seen = [n for n in ast.walk(module) if isinstance(n, ast.ImportFrom)]
    assert seen and seen[0].module == "dlog.namespace"


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("dlog.writer", "dlog.log"),
        ("subscriptions.store", "dlog.namespace"),
        ("dlog.zk", "dlog.ledger.client"),
    ],
)
def test_an_upward_import_would_be_caught(module: str, target: str) -> None:
    assert layer_of(target) < layer_of(module)
