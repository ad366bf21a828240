"""Small AZR-style programs and inputs for the sandbox benchmarks and their tests (shared by both)."""

from __future__ import annotations

BODIES = (
    "def f(nums, k):\n    return sorted(nums)[-k:]",
    "def f(nums, k):\n    return [x * k for x in nums if x % 2 == 0]",
    "def f(nums, k):\n    s = 0\n    for i, x in enumerate(nums):\n        s += (x ^ i) * k\n    return s",
    "def f(nums, k):\n    return {str(x): x % (k + 1) for x in nums}",
    "def f(nums, k):\n    out = ''\n    for x in nums:\n        out += chr(97 + (x + k) % 26)\n    return out",
)


def task_source(t: int) -> tuple[str, list[str]]:
    """Task ``t``'s code (one of :data:`BODIES`, varied) and its 10 inputs."""
    code = BODIES[t % len(BODIES)].replace("):\n", f"):\n    k = k + {t % 3}\n", 1)
    return code, [f"[{t + i}, {i * 3 + 1}, {2 * i + t % 7}, {i * i}], {1 + (i + t) % 4}" for i in range(10)]
