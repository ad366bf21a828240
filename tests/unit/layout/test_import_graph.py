"""The project's import graph: no cycle, and every import runs with the layering of the design brief.

Top level: ``probes`` ← ``curriculum`` ← ``workers`` ← ``daemon`` (``migrations`` and ``propel_sdk``
sit beside ``workers``: they may use ``curriculum``, and only the daemon uses them). Inside
``daemon``: ``ops`` ← ``config`` ← ``loop`` ← ``http`` ← ``service`` ← ``cli``. Inside ``curriculum``:
the sub-packages of :data:`CURRICULUM_LAYERS` (docs/LAYOUT.md), each importing only those it rests on,
directly or through another; ``curriculum/`` itself holds no loose modules. Imports inside functions
count too: a lazy import that runs the wrong way is still a wrong-way dependency.
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
#: Each sub-package of ``curriculum`` and the ones it rests on; it may import those and, through
#: them, everything they rest on. Siblings (``frontier``, ``reward``, ``rl``) do not import each other.
CURRICULUM_LAYERS: dict[str, tuple[str, ...]] = {
    "common": (),                       # solver contract, fs/tiny-model utilities, pretraining corpus type
    "sandbox": ("common",),             # running untrusted code with per-candidate limits
    "domains": ("sandbox",),            # task formats: parse, validate, grade
    "solvers": ("domains",),            # solver backends (the contract is in common)
    "store": ("common",),               # database, queue, artifacts, solver versions
    "labelling": ("solvers", "store"),  # spot-check and active/sequential labelling
    "frontier": ("labelling",),         # following the solver: trainer labels, staleness, drift, refresh
    "reward": ("labelling",),           # the generator's reward and its diversity terms
    "rl": ("domains", "store"),         # the generator: bootstrap, GRPO + LoRA chunks, checkpoints
    "probing": ("frontier", "reward"),  # the probe's lifecycle: first probe, co-evolution, retrain, evaluation
}


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            if "versions" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
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


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = _modules(root)
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


def _below(layer: str) -> set[str]:
    """Every ``curriculum`` sub-package that ``layer`` rests on, directly or through another."""
    out: set[str] = set()
    todo = list(CURRICULUM_LAYERS[layer])
    while todo:
        nxt = todo.pop()
        if nxt not in out:
            out.add(nxt)
            todo.extend(CURRICULUM_LAYERS[nxt])
    return out


def curriculum_wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Imports between ``curriculum`` sub-packages that :data:`CURRICULUM_LAYERS` does not allow,
    and modules outside any known sub-package (a loose module, or a sub-package with no layer)."""
    wrong = []
    for a, deps in sorted(graph.items()):
        parts = a.split(".")
        if parts[0] != "curriculum" or a == "curriculum":
            continue
        if len(parts) < 3 and (len(parts) < 2 or parts[1] not in CURRICULUM_LAYERS):
            wrong.append(f"{a}: not in a sub-package of CURRICULUM_LAYERS")
            continue
        allowed = _below(parts[1]) | {parts[1]}
        wrong += [f"{a} → {b}" for b in sorted(deps)
                  if b.split(".")[0] == "curriculum" and (b == "curriculum" or b.split(".")[1] not in allowed)]
    return wrong


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


def test_curriculum_subpackages_follow_their_layers() -> None:
    assert curriculum_wrong_way(import_graph()) == []


def test_every_curriculum_subpackage_has_a_layer_and_the_layers_have_no_cycle() -> None:
    on_disk = {p.name for p in (ROOT / "curriculum").iterdir() if (p / "__init__.py").is_file()}
    assert on_disk == set(CURRICULUM_LAYERS)
    assert _cycles({k: set(v) for k, v in CURRICULUM_LAYERS.items()}) == []
    assert _below("probing") >= {"frontier", "reward", "labelling", "store", "common"}
    assert "frontier" not in _below("reward") and "reward" not in _below("frontier")


def test_a_wrong_way_import_inside_curriculum_fails(tmp_path: Path) -> None:
    """A synthetic tree: the store importing the frontier (lazily, as the old ``store/repo.py`` did),
    a sibling importing a sibling (relatively), and a loose module; the allowed arrows stay quiet."""
    files = {
        "curriculum/__init__.py": "",
        "curriculum/loose.py": "",
        "curriculum/store/__init__.py": "",
        "curriculum/store/db.py": "",
        "curriculum/store/repo.py": "def f():\n    from curriculum.frontier.staleness import weigh\n",
        "curriculum/frontier/__init__.py": "",
        "curriculum/frontier/staleness.py": "from curriculum.store import db\nfrom ..reward import rewards\n",
        "curriculum/reward/__init__.py": "",
        "curriculum/reward/rewards.py": "from curriculum.labelling.spotcheck import Band\n",
        "curriculum/labelling/__init__.py": "",
        "curriculum/labelling/spotcheck.py": "from curriculum.store.repo import f\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert curriculum_wrong_way(import_graph(tmp_path)) == [
        "curriculum.frontier.staleness → curriculum.reward.rewards",
        "curriculum.loose: not in a sub-package of CURRICULUM_LAYERS",
        "curriculum.store.repo → curriculum.frontier.staleness",
    ]


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
