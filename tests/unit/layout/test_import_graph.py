"""The project's import graph: no cycle, and every import runs with the layering of the design brief.

Top level: ``probes`` ← ``curriculum`` ← ``workers`` ← ``daemon`` (``migrations`` and ``propel_sdk``
sit beside ``workers``: they may use ``curriculum``, and only the daemon uses them). Inside
``daemon``: ``ops`` ← ``config`` ← ``loop`` ← ``http`` ← ``service`` ← ``cli``. Imports inside
functions count too: a lazy import that runs the wrong way is still a wrong-way dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("probes", "curriculum", "workers", "daemon", "migrations", "propel_sdk")
ALLOWED = {
    "probes": {"probes"},
    "curriculum": {"curriculum", "probes"},
    "migrations": {"migrations", "curriculum"},
    "propel_sdk": {"propel_sdk", "curriculum", "probes"},
    "workers": {"workers", "curriculum", "probes"},
    "daemon": set(PACKAGES),
}
DAEMON_LAYERS = ("ops", "config", "loop", "http", "service", "cli")


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "versions" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported dotted name lives in (``a.b.C`` → ``a.b``), if any."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod if is_pkg else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                names = [f"{base}.{a.name}" for a in node.names] or [base]
            for name in names:
                target = _resolve(name, modules)
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def _daemon_layer(mod: str) -> int | None:
    parts = mod.split(".")
    if parts[0] != "daemon" or len(parts) < 2:
        return None
    return DAEMON_LAYERS.index(parts[1]) if parts[1] in DAEMON_LAYERS else None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert "daemon.loop.driver" in graph["daemon.service.runtime"]
    assert "curriculum.store.db" in graph["daemon.loop.driver"]


def test_no_import_cycle() -> None:
    assert _cycles(import_graph()) == []


def test_top_level_imports_follow_the_layers() -> None:
    wrong = [f"{a} → {b}" for a, deps in import_graph().items() for b in deps
             if b.split(".")[0] not in ALLOWED[a.split(".")[0]]]
    assert wrong == []


def test_daemon_subpackages_follow_their_layers() -> None:
    wrong = []
    for a, deps in import_graph().items():
        la = _daemon_layer(a)
        for b in deps:
            lb = _daemon_layer(b)
            if la is not None and lb is not None and lb > la:
                wrong.append(f"{a} → {b}")
    assert wrong == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
