"""A benchmark runs the product: read as source (tests do not import benchmarks), it must import each
shared function from the module production takes it from, define none of them again, and name none of
the loop's internals (a benchmark that uses one copies the loop)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def assert_drives_product(benchmark: str, shared: set[tuple[str, str]], internals: Iterable[str]) -> str:
    """Check ``benchmarks/<benchmark>.py`` against ``shared`` (module, name) imports and ``internals``;
    returns its source for further needles."""
    source = (BENCHMARKS / f"{benchmark}.py").read_text()
    tree = ast.parse(source)
    imported = {(n.module or "", a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert imported >= shared, sorted(shared - imported)
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert not defined & {name for _, name in shared}, "the benchmark redefines a shared function"
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & set(internals), sorted(names & set(internals))
    return source
