"""Procedural bug injection over Python's ``ast``: 13 operators, applied as minimal text edits.

A mutation is addressed by a :class:`~curriculum.domains.swe.spec.BugSpec` (file, function
qualname, operator, site): the ``site``-th node the operator matches inside the function, counted
in source order (nested functions and classes are separate targets). The edit replaces only that
node's source span (expressions, re-rendered with ``ast.unparse``) or removes the statement's
lines (``pass`` when a block would become empty), so the diff is as small as the change. Every
edit is checked by re-parsing: the result must equal the expected mutated tree, else the
replacement is parenthesised, else the mutation is refused (a value with a reason).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from curriculum.domains.swe.patches import is_test_path, unified_diff
from curriculum.domains.swe.spec import BugSpec

_BINOP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
          ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.LShift: ast.RShift, ast.RShift: ast.LShift,
          ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.BitXor: ast.BitOr}
_NEGATE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
           ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_COMMUTATIVE = (ast.Mult, ast.BitAnd, ast.BitOr, ast.BitXor)
_SKIP_FILES = {"setup.py", "conftest.py", "ez_setup.py", "versioneer.py", "_version.py", "noxfile.py"}
_SKIP_DIRS = {"docs", "doc", "examples", "example", "benchmarks", "benchmark", "scripts", "tools", "build"}


@dataclass(frozen=True)
class Operator:
    name: str
    description: str  # what the bug does, in words (used by task text and docs, never the fix)
    statement: bool  # True: removes the matched statement; False: replaces the matched expression
    matches: Callable[[ast.AST, ast.AST | None, str], bool]
    rewrite: Callable[[ast.AST], ast.AST]


def _int_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _swap_binop(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.BinOp)
    node.op = _BINOP[type(node.op)]()
    return node


def _swap_operands(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.BinOp):
        node.left, node.right = node.right, node.left
    else:
        assert isinstance(node, ast.Compare)
        node.left, node.comparators = node.comparators[0], [node.left]
    return node


def _const(delta: int) -> Callable[[ast.AST], ast.AST]:
    def rewrite(node: ast.AST) -> ast.AST:
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)
        value = node.value + delta
        if value < 0:  # ``-1`` parses as a unary minus applied to 1
            return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(-value))
        node.value = value
        return node
    return rewrite


def _compare(table: dict[type[ast.cmpop], type[ast.cmpop]]) -> Callable[[ast.AST], ast.AST]:
    def rewrite(node: ast.AST) -> ast.AST:
        assert isinstance(node, ast.Compare)
        node.ops = [table[type(node.ops[0])](), *node.ops[1:]]
        return node
    return rewrite


def _swap_boolop(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.BoolOp)
    node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    return node


def _flip_bool(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.Constant)
    node.value = not node.value
    return node


def _drop_not(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.UnaryOp)
    return node.operand


def _identity(node: ast.AST) -> ast.AST:
    return node


OPERATORS: dict[str, Operator] = {op.name: op for op in (
    Operator("binop_change", "an arithmetic or bitwise operator is replaced by another", False,
             lambda n, p, f: isinstance(n, ast.BinOp) and type(n.op) in _BINOP, _swap_binop),
    Operator("operand_swap", "the operands of a binary operation or comparison are swapped", False,
             lambda n, p, f: (isinstance(n, ast.BinOp) and not isinstance(n.op, _COMMUTATIVE))
             or (isinstance(n, ast.Compare) and len(n.ops) == 1), _swap_operands),
    Operator("const_inc", "an integer constant is increased by one", False, lambda n, p, f: _int_const(n), _const(1)),
    Operator("const_dec", "an integer constant is decreased by one", False, lambda n, p, f: _int_const(n), _const(-1)),
    Operator("compare_flip", "a comparison is negated", False,
             lambda n, p, f: isinstance(n, ast.Compare) and type(n.ops[0]) in _NEGATE, _compare(_NEGATE)),
    Operator("compare_boundary", "a strict comparison becomes non-strict or vice versa", False,
             lambda n, p, f: isinstance(n, ast.Compare) and type(n.ops[0]) in _BOUNDARY, _compare(_BOUNDARY)),
    Operator("boolop_swap", "'and' and 'or' are exchanged", False,
             lambda n, p, f: isinstance(n, ast.BoolOp), _swap_boolop),
    Operator("bool_flip", "a True/False literal is flipped", False,
             lambda n, p, f: isinstance(n, ast.Constant) and type(n.value) is bool, _flip_bool),
    Operator("remove_not", "a 'not' is dropped", False,
             lambda n, p, f: isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not), _drop_not),
    Operator("invert_if", "an if condition is inverted", False,
             lambda n, p, f: isinstance(p, ast.If) and f == "test",
             lambda n: ast.UnaryOp(op=ast.Not(), operand=n)),  # type: ignore[arg-type]
    Operator("remove_loop", "a loop is removed", True,
             lambda n, p, f: isinstance(n, ast.For | ast.AsyncFor | ast.While), _identity),
    Operator("remove_if", "a conditional block is removed", True,
             lambda n, p, f: isinstance(n, ast.If) and not _is_elif(n, p, f), _identity),
    Operator("remove_assign", "an assignment is removed", True,
             lambda n, p, f: isinstance(n, ast.Assign | ast.AugAssign)
             or (isinstance(n, ast.AnnAssign) and n.value is not None), _identity),
)}


class MutationError(ValueError):
    """A bug spec that cannot be applied (one line saying why)."""


def _children(node: ast.AST) -> Iterator[tuple[ast.AST, str, list[ast.AST] | None]]:
    for name, value in ast.iter_fields(node):
        if isinstance(value, list):
            for item in value:
                if isinstance(item, ast.AST):
                    yield item, name, value
        elif isinstance(value, ast.AST):
            yield value, name, None


def _walk(node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST, str, list[ast.AST] | None]]:
    """(node, parent, field, container) in source order, not entering nested defs, classes or f-strings."""
    for child, name, container in _children(node):
        yield child, node, name, container
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda
                          | ast.JoinedStr):
            yield from _walk(child)


def _walk_body(fn: ast.AST) -> Iterator[tuple[ast.AST, ast.AST, str, list[ast.AST] | None]]:
    body: list[ast.AST] = getattr(fn, "body", [])
    for child in body:
        yield child, fn, "body", body
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from _walk(child)


def _is_elif(node: ast.AST, parent: ast.AST | None, field: str) -> bool:
    return isinstance(parent, ast.If) and field == "orelse" and len(parent.orelse) == 1


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Qualified name -> function node (module functions, methods, nested functions)."""
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                out[prefix + child.name] = child
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif not isinstance(child, ast.expr):
                visit(child, prefix)
    visit(tree, "")
    return out


def sites(fn: ast.AST, op: Operator) -> list[tuple[ast.AST, ast.AST, str, list[ast.AST] | None]]:
    """Every place ``op`` matches in ``fn``'s body (the def's own decorators/defaults excluded)."""
    found = []
    for node, parent, field, container in _walk_body(fn):
        if op.statement and not isinstance(node, ast.stmt):
            continue
        if op.matches(node, parent, field):
            found.append((node, parent, field, container))
    return found


def _offsets(source: str) -> tuple[list[str], list[int]]:
    lines = source.splitlines(keepends=True)
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line)
    return lines, starts


def _char(lines: list[str], starts: list[int], lineno: int, col_bytes: int) -> int:
    line = lines[lineno - 1]
    return starts[lineno - 1] + len(line.encode()[:col_bytes].decode(errors="ignore"))


def _dump(tree: ast.AST) -> str:
    return ast.dump(tree, include_attributes=False)


def _expected_tree(source: str, spec: BugSpec, op: Operator) -> ast.Module:
    tree = ast.parse(source)
    node, parent, field, container = sites(functions(tree)[spec.function], op)[spec.site]
    if op.statement:
        assert container is not None
        index = next(i for i, item in enumerate(container) if item is node)
        container[index:index + 1] = [] if len(container) > 1 else [ast.Pass()]
        return tree
    new = op.rewrite(node)
    if container is not None:
        container[next(i for i, item in enumerate(container) if item is node)] = new
    else:
        setattr(parent, field, new)
    return tree


def _remove_statement(source: str, node: ast.AST) -> list[str]:
    """Two renderings: the statement's lines removed, and replaced by ``pass`` (for a lone one)."""
    lines, _ = _offsets(source)
    start, end = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
    first, last = lines[start - 1], lines[end - 1]
    before = first.encode()[: node.col_offset]  # type: ignore[attr-defined]
    after = last.encode()[node.end_col_offset:].strip()  # type: ignore[attr-defined]
    if before.strip() or (after not in (b"", b"\\") and not after.startswith(b"#")):
        raise MutationError("the statement shares its line with other code")
    indent = first[: len(first) - len(first.lstrip())]
    newline = "\n" if last.endswith("\n") else ""
    head, tail = "".join(lines[: start - 1]), "".join(lines[end:])
    return [head + tail, head + f"{indent}pass{newline}" + tail]


def mutate_source(source: str, spec: BugSpec) -> str:
    """``source`` with ``spec`` applied; raises :class:`MutationError` with the reason."""
    op = OPERATORS.get(spec.operator)
    if op is None:
        raise MutationError(f"unknown operator {spec.operator!r}; known: {', '.join(sorted(OPERATORS))}")
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise MutationError(f"{spec.file} does not parse: {err.msg}") from None
    fn = functions(tree).get(spec.function)
    if fn is None:
        raise MutationError(f"no function {spec.function!r} in {spec.file}")
    found = sites(fn, op)
    if not 0 <= spec.site < len(found):
        raise MutationError(f"{spec.function} has {len(found)} {spec.operator} sites; site {spec.site} does not exist")
    node = found[spec.site][0]
    expected = _dump(_expected_tree(source, spec, op))
    if op.statement:
        candidates = _remove_statement(source, node)
    else:
        lines, starts = _offsets(source)
        begin = _char(lines, starts, node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = _char(lines, starts, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        text = ast.unparse(op.rewrite(copy.deepcopy(node)))
        candidates = [source[:begin] + text + source[end:], source[:begin] + f"({text})" + source[end:]]
    for candidate in candidates:
        try:
            if _dump(ast.parse(candidate)) == expected:
                return candidate
        except SyntaxError:
            continue
    raise MutationError("the edit could not be rendered faithfully")


def target_files(root: Path) -> list[str]:
    """Repository-relative ``.py`` files a bug may go into (no tests, setup, docs, examples)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if (is_test_path(rel) or path.name in _SKIP_FILES or any(p in _SKIP_DIRS or p.startswith(".")
                                                                  for p in parts[:-1])
                or any(p.endswith(".egg-info") for p in parts)):
            continue
        out.append(rel)
    return out


def enumerate_specs(root: Path, repo: str, operators: list[str] | None = None) -> list[BugSpec]:
    """Every (file, function, operator, site) the mutator can address in the tree at ``root``."""
    names = operators or sorted(OPERATORS)
    out = []
    for rel in target_files(root):
        try:
            tree = ast.parse((root / rel).read_text())
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for qualname, fn in functions(tree).items():
            for name in names:
                out += [BugSpec(repo, rel, qualname, name, i) for i in range(len(sites(fn, OPERATORS[name])))]
    return out


@dataclass(frozen=True)
class Mutation:
    spec: BugSpec
    patch: str


def mutation_patch(root: Path, spec: BugSpec) -> Mutation:
    """The unified diff that applies ``spec`` to the tree at ``root`` (raises :class:`MutationError`)."""
    path = root / spec.file
    if is_test_path(spec.file):
        raise MutationError(f"{spec.file} is a test file")
    if ".." in Path(spec.file).parts or not path.is_file():
        raise MutationError(f"no file {spec.file} in {spec.repo}")
    source = path.read_text()
    mutated = mutate_source(source, spec)
    if mutated == source:
        raise MutationError("the mutation changes nothing")
    return Mutation(spec, unified_diff(spec.file, source, mutated))
