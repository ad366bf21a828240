"""AZR validity rate and the reasons for rejection, on generator completions.

``--completions FILE`` takes real base-generator samples (JSONL, one ``{"completion": ...}`` per
line, e.g. Qwen2.5-3B-Instruct answering :meth:`AzrDomain.generator_prompts`). No AZR-capable
generator exists on this machine (no weights can be downloaded; the only local model is the 1M-
parameter character-level arithmetic bootstrap), so without that option the script builds a
seeded STAND-IN corpus: plain functions of the kinds the generator prompt asks for, a share of
them carrying one defect each that language-model generators are known to produce (too few
inputs, non-literal inputs, helper functions, banned imports, inputs that raise, loops that do not
end, hidden state, unserialisable outputs, ...). Its validity rate measures the corpus recipe,
not a generator; what it does measure is whether every defect class is rejected, and with which
reason.

Usage: ``.venv/bin/python -m benchmarks.azr_validity [--n 200] [--completions FILE]``
Writes ``benchmarks/results/azr_validity.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections import Counter
from pathlib import Path

from benchmarks._common import COMMIT_AT_START, write_result
from curriculum.domains.azr import AzrDomain
from curriculum.sandbox import Limits

PURE = (
    ("def f(nums, k):\n    return sorted(nums)[-k:]", "[{a}, {b}, {c}], {k}"),
    ("def f(s):\n    return ''.join(ch.upper() if ch in 'aeiou' else ch for ch in s)", "'{w}'"),
    ("def f(d, key):\n    return {k: v * 2 for k, v in d.items() if k != key}", "{{'a': {a}, 'b': {b}}}, 'a'"),
    ("def f(n):\n    total = 0\n    while n:\n        total += n % 10\n        n //= 10\n    return total",
     "{b}{a}"),
    ("from collections import Counter\ndef f(words):\n    return sorted(Counter(words).items())",
     "['{w}', '{w}x']"),
    ("def f(a, b):\n    return [x for x in a if x not in b]", "[{a}, {b}, {c}], [{b}]"),
    ("import math\ndef f(n):\n    return [math.comb(n, i) for i in range(n + 1)]", "{b}"),
    ("def f(s, n):\n    return s[n:] + s[:n]", "'{w}', {k}"),
)
#: (name, share of the corpus, how the completion is broken)
DEFECTS = (
    ("too_few_inputs", 0.08), ("non_literal_input", 0.04), ("helper_function", 0.05),
    ("banned_import", 0.05), ("input_raises", 0.06), ("endless_loop", 0.02), ("hidden_state", 0.03),
    ("unserialisable", 0.02), ("no_message", 0.02), ("syntax_error", 0.02), ("module_state", 0.03),
    ("hash_order", 0.02),
)


def _inputs(rng: random.Random, pattern: str, n: int) -> list[str]:
    out: list[str] = []
    for _ in range(1000 * n):  # patterns have far more than n distinct values
        if len(out) == n:
            break
        words = "".join(rng.choice("abcdeiou") for _ in range(rng.randint(1, 6)))
        src = pattern.format(a=rng.randint(0, 9), b=rng.randint(10, 99), c=rng.randint(-9, 9), k=rng.randint(1, 3),
                             w=words)
        if src not in out:
            out.append(src)
    return out


def _break(defect: str, code: str, inputs: list[str]) -> tuple[str, list[str], bool]:
    """The defective code and inputs, and whether the message block is kept."""
    if defect == "too_few_inputs":
        return code, inputs[:6], True
    if defect == "non_literal_input":
        return code, [*inputs[:9], "list(range(3)), 1"], True
    if defect == "helper_function":
        return "def helper(x):\n    return x\n" + code, inputs, True
    if defect == "banned_import":
        return "import random\n" + code.replace("return ", "return random.random() and ", 1), inputs, True
    if defect == "input_raises":
        return code.replace("return ", "if len(repr(dir())) > 0:\n        raise ValueError('bug')\n    return ", 1), \
            inputs, True
    if defect == "endless_loop":
        return code.replace("return ", "while True:\n        pass\n    return ", 1), inputs, True
    if defect == "hidden_state":
        head, body = code.split("):\n", 1)
        return f"{head}, _calls=[]):\n    _calls.append(1)\n{body}".replace("return ", "return len(_calls), ", 1), \
            inputs, True
    if defect == "module_state":  # a call counter kept on a module: output depends on history
        return "import string\n" + code.replace("return ", "string.n = getattr(string, 'n', 0) + 1\n    "
                                                 "return string.n, ", 1), inputs, True
    if defect == "hash_order":  # set iteration order of strings changes with the hash seed
        return code.replace("return ", "return list({'alpha', 'beta', 'gamma', 'delta'}), ", 1), inputs, True
    if defect == "unserialisable":
        return code.replace("return ", "return lambda: ", 1), inputs, True
    if defect == "syntax_error":
        return code.replace("):\n", ")\n", 1), inputs, True
    return code, inputs, defect != "no_message"


def stand_in_corpus(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (defect or 'none', completion) pairs, deterministic in ``seed``."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(n):
        code, pattern = rng.choice(PURE)
        roll, defect = rng.random(), "none"
        for name, share in DEFECTS:
            if roll < share:
                defect = name
                break
            roll -= share
        code, inputs, message = _break(defect, code, _inputs(rng, pattern, 10))
        text = "Here is my puzzle.\n```python\n" + code + "\n```\n" + "".join(f"```input\n{s}\n```\n" for s in inputs)
        corpus.append((defect, text + ("```message\nWork out what f does.\n```\n" if message else "")))
    return corpus


def reason_class(reason: str | None) -> str:
    """A short class for a rejection reason (numbers, quotes and details dropped)."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "#", reason or "valid")
    for sep in (": ", " ("):
        if sep in text and not text.startswith(("input #", "execution")):
            text = text.split(sep, 1)[0] if not text.startswith("static check") else ": ".join(text.split(": ")[:2])
    return text[:80]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--completions", type=Path, default=None, help="JSONL of real generator completions")
    args = parser.parse_args()
    if args.completions:
        lines = args.completions.read_text().splitlines()
        corpus = [("unknown", json.loads(line)["completion"]) for line in lines if line.strip()]
        source = f"generator completions from {args.completions}"
    else:
        corpus = stand_in_corpus(args.n, args.seed)
        source = "STAND-IN corpus (no AZR base generator on this machine); see the module docstring"
    domain = AzrDomain(limits=Limits(cpu_s=20, wall_s=60.0), call_timeout_s=1.0)
    started = time.perf_counter()
    results = domain.validate_batch([text for _, text in corpus])
    seconds = time.perf_counter() - started
    reasons = Counter(reason_class(r.reason) for r in results if not r.valid)
    by_defect: dict[str, Counter[str]] = {}
    for (defect, _), result in zip(corpus, results, strict=True):
        by_defect.setdefault(defect, Counter())[reason_class(None if result.valid else result.reason)] += 1
    report = {
        "commit": COMMIT_AT_START, "source": source, "n": len(corpus), "backend": domain.sandbox.name,
        "validity_rate": sum(r.valid for r in results) / max(1, len(results)),
        "rejection_reasons": dict(reasons.most_common()),
        "outcome_by_injected_defect": {k: dict(v.most_common()) for k, v in sorted(by_defect.items())},
        "seconds": seconds,
    }
    path = write_result("azr_validity", report)
    print(path.read_text())


if __name__ == "__main__":
    main()
