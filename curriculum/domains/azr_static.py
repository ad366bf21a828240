"""Static (AST) checks and topic features for AZR code-induction programs.

The static check is a policy filter in front of the sandbox, not the security boundary: dynamic
tricks it cannot see (``getattr(m, "__" + "import__")``) are contained by the sandbox anyway. It
rejects imports of modules that reach files, processes, the network, clocks or the interpreter's
internals (including every private ``_module``), so a valid task is a pure computation; state kept
in allowed modules is contained by the sandbox (a fresh process per program, opposite-order runs).
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass

#: Modules whose import is rejected (the paper/AZR list plus anything reaching the OS or the
#: interpreter's internals). Matching is on the top-level package and on the full dotted name.
DEFAULT_BANNED_MODULES: tuple[str, ...] = (
    "logging", "random", "multiprocessing", "pebble", "subprocess", "threading", "datetime", "time",
    "hashlib", "hmac", "bcrypt", "calendar", "os", "sys", "socket", "shutil", "ctypes", "builtins",
    "importlib", "signal", "pickle", "marshal", "io", "pathlib", "tempfile", "gc", "inspect",
    "asyncio", "concurrent", "urllib", "http", "resource", "platform", "uuid", "secrets", "glob",
    "fcntl", "mmap", "code", "codeop", "types", "weakref", "site", "sysconfig", "select", "pty",
    # file, terminal, network and process access reachable without ``open``/``os``
    "codecs", "shelve", "dbm", "sqlite3", "zipfile", "tarfile", "gzip", "bz2", "lzma", "fileinput",
    "linecache", "tokenize", "runpy", "pkgutil", "zipimport", "faulthandler", "tracemalloc", "atexit",
    "posix", "pwd", "grp", "termios", "tty", "readline", "ssl", "ftplib", "smtplib", "poplib", "imaplib",
    "telnetlib", "xmlrpc", "webbrowser", "mailbox", "netrc", "filecmp", "zipapp", "venv", "ensurepip",
    "trace", "pdb", "bdb", "cProfile", "profile", "timeit", "sched", "queue", "selectors",
    "socketserver", "locale", "gettext", "getpass", "configparser", "plistlib", "email", "xml", "wave",
    "sndhdr", "imghdr", "mimetypes", "uu", "nntplib", "cgi", "cgitb", "wsgiref", "distutils", "unittest",
)
#: Dotted names rejected wherever they appear as attribute chains.
DEFAULT_BANNED_ATTRIBUTES: tuple[str, ...] = ("os.sys", "os.path", "sys.exit", "os.environ")
#: Builtins that may not be called or even referenced.
DEFAULT_BANNED_CALLS: tuple[str, ...] = (
    "__import__", "eval", "exec", "open", "compile", "globals", "locals", "vars", "breakpoint",
    "setattr", "delattr", "memoryview",
)

MAX_CODE_CHARS = 4000


@dataclass(frozen=True)
class StaticPolicy:
    """What the static check rejects (configurable per domain instance)."""

    banned_modules: tuple[str, ...] = DEFAULT_BANNED_MODULES
    banned_attributes: tuple[str, ...] = DEFAULT_BANNED_ATTRIBUTES
    banned_calls: tuple[str, ...] = DEFAULT_BANNED_CALLS
    max_code_chars: int = MAX_CODE_CHARS


class StaticError(ValueError):
    """The program violates the static policy (message = reason)."""


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _check_import(node: ast.Import | ast.ImportFrom, policy: StaticPolicy) -> None:
    names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    if isinstance(node, ast.ImportFrom) and node.level:
        raise StaticError("relative imports are not allowed")
    for name in names:
        if name.split(".")[0] in policy.banned_modules or name in policy.banned_modules:
            raise StaticError(f"banned import: {name}")
        if any(part.startswith("_") for part in name.split(".")):
            raise StaticError(f"banned import: {name} (private modules reach the interpreter's internals)")


def _check_node(node: ast.AST, policy: StaticPolicy) -> None:
    if isinstance(node, ast.Import | ast.ImportFrom):
        _check_import(node, policy)
    elif isinstance(node, ast.Name):
        if node.id in policy.banned_calls or _is_dunder(node.id):
            raise StaticError(f"banned name: {node.id}")
    elif isinstance(node, ast.Attribute):
        if _is_dunder(node.attr):
            raise StaticError(f"banned dunder attribute: .{node.attr}")
        dotted = _dotted(node)
        if dotted is not None and dotted in policy.banned_attributes:
            raise StaticError(f"banned attribute: {dotted}")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
            "getattr", "hasattr") and len(node.args) >= 2:
        attr = node.args[1]
        if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
            raise StaticError(f"{node.func.id} with a computed attribute name")
        if attr.value.startswith("_"):
            raise StaticError(f"{node.func.id} on private/dunder name {attr.value!r}")
    elif isinstance(node, ast.Global | ast.Nonlocal | ast.AsyncFunctionDef | ast.Await):
        raise StaticError(f"{type(node).__name__} statements are not allowed")


def normalise_program(code: str, policy: StaticPolicy | None = None) -> str:
    """Check ``code`` and return it with its single top-level function renamed to ``f``.

    Raises :class:`StaticError` with the reason when the program is rejected.
    """
    policy = policy or StaticPolicy()
    if len(code) > policy.max_code_chars:
        raise StaticError(f"code longer than {policy.max_code_chars} characters")
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise StaticError(f"code does not parse: {type(err).__name__}: {err}") from err
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(defs) != 1:
        raise StaticError(f"expected exactly one top-level def, found {len(defs)}")
    for stmt in tree.body:
        is_doc = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        if not (isinstance(stmt, ast.FunctionDef | ast.Import | ast.ImportFrom) or is_doc):
            raise StaticError(f"only imports and one function are allowed at top level, found "
                              f"{type(stmt).__name__} on line {stmt.lineno}")
    for node in ast.walk(tree):
        _check_node(node, policy)
    old = defs[0].name
    if old != "f":
        defs[0].name = "f"
        for node in ast.walk(defs[0]):
            if isinstance(node, ast.Name) and node.id == old:
                node.id = "f"
    try:
        return ast.unparse(tree)
    except RecursionError as err:
        raise StaticError("code nested too deeply") from err


_STRING_METHODS = {"join", "split", "upper", "lower", "replace", "strip", "find", "startswith",
                   "endswith", "isdigit", "isalpha", "count", "format", "lstrip", "rstrip", "title"}
_DICT_METHODS = {"items", "keys", "values", "get", "setdefault", "update"}
_LIST_METHODS = {"append", "extend", "pop", "insert", "index", "remove"}
_BIT_OPS = (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift, ast.Invert)
_ARITH_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_TOPIC_ORDER = ("dict", "string", "list", "set", "bitwise", "arithmetic")


def _feature_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Dict | ast.DictComp):
        return "dict"
    if isinstance(node, ast.Set | ast.SetComp):
        return "set"
    if isinstance(node, ast.List | ast.ListComp | ast.Subscript):
        return "list"
    if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return "string"
    if isinstance(node, ast.BinOp | ast.UnaryOp | ast.AugAssign):
        op = node.op
        return "bitwise" if isinstance(op, _BIT_OPS) else ("arithmetic" if isinstance(op, _ARITH_OPS) else None)
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for topic, names in (("string", _STRING_METHODS | {"ord", "chr", "str"}),
                             ("dict", _DICT_METHODS | {"dict"}), ("list", _LIST_METHODS | {"list", "range"}),
                             ("set", {"set", "frozenset"})):
            if name in names:
                return topic
    return None


def program_features(code: str) -> Counter[str]:
    """Counts of cheap AST features; ``recursion`` and ``sorting`` are flags (count 1)."""
    counts: Counter[str] = Counter()
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return counts
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("sorted", "sort", "reversed", "heappush", "heapify"):
                counts["sorting"] = 1
            if isinstance(node.func, ast.Name) and node.func.id == "f":
                counts["recursion"] = 1
        feature = _feature_of(node)
        if feature:
            counts[feature] += 1
    return counts


def program_topic(code: str) -> str:
    """One label: recursion, sorting, else the most frequent of dict/string/list/set/bitwise/arithmetic."""
    counts = program_features(code)
    for flag in ("recursion", "sorting"):
        if counts.get(flag):
            return flag
    scored = [(counts.get(t, 0), -i, t) for i, t in enumerate(_TOPIC_ORDER)]
    best = max(scored)
    return best[2] if best[0] > 0 else "other"
