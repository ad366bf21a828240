"""Labelled probe data: the solve-count band, JSONL loading, and splits.

Label rule: :class:`probes.band.Band` (a row with ``solves`` successes out of ``k`` valid attempts
is positive iff its solve rate lies in the band's rate range).

JSONL rows: ``{"text": str, "solves": int, "k": int, "group": str (optional),
"turns": [[start, end], ...] (optional: assistant-turn character spans → a Trajectory)}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from probes.band import Band
from probes.inputs import TextInput, Trajectory


class DatasetError(ValueError):
    """A labelled data file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class LabelledText:
    item: TextInput
    solves: int
    k: int
    group: str | None = None

    @property
    def solve_rate(self) -> float:
        return self.solves / self.k


def _parse_row(raw: object, where: str) -> LabelledText:
    if not isinstance(raw, dict):
        raise DatasetError(f"{where}: expected a JSON object")
    missing = [f for f in ("text", "solves", "k") if f not in raw]
    if missing:
        raise DatasetError(f"{where}: missing field(s) {', '.join(missing)} (need text, solves, k)")
    text, solves, k = raw["text"], raw["solves"], raw["k"]
    if not isinstance(text, str) or not text:
        raise DatasetError(f"{where}: 'text' must be a non-empty string")
    if (
        not isinstance(solves, int)
        or not isinstance(k, int)
        or isinstance(solves, bool)
        or k < 1
        or not 0 <= solves <= k
    ):
        raise DatasetError(f"{where}: need integers 0 ≤ solves ≤ k, k ≥ 1 (got solves={solves!r}, k={k!r})")
    group = raw.get("group")
    item: TextInput = text
    if raw.get("turns") is not None:
        try:
            item = Trajectory(text, tuple((int(a), int(b)) for a, b in raw["turns"]))
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"{where}: bad 'turns' ({exc})") from exc
    return LabelledText(item, solves, k, None if group is None else str(group))


def load_jsonl(path: str | Path) -> list[LabelledText]:
    """Read labelled rows; :class:`DatasetError` names the line of the first bad row."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    rows: list[LabelledText] = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
            rows.append(_parse_row(raw, f"{path}:{lineno}"))
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return rows


def labels_for(rows: Sequence[LabelledText], band: Band) -> np.ndarray:
    return np.array([band.label(r.solves, r.k) for r in rows], dtype=int)


def random_split(n: int, seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> list[np.ndarray]:
    """Shuffled train/val/test index arrays in the given fractions (each non-empty when n ≥ 3)."""
    if n < 3:
        raise ValueError(f"need at least 3 rows for a train/val/test split, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    n_val = max(1, round(fractions[1] * n))
    n_test = max(1, round(fractions[2] * n))
    n_train = n - n_val - n_test
    return [np.sort(order[:n_train]), np.sort(order[n_train : n_train + n_val]), np.sort(order[n_train + n_val :])]


def random_kfold(n: int, n_folds: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_folds`` (train, held-out) pairs over a seeded shuffle of the rows, ignoring any group: the
    split that lets one repository sit on both sides (what grouped K-fold is compared against)."""
    if n_folds < 2 or n < n_folds:
        raise ValueError(f"k-fold needs ≥ 2 folds and ≥ n_folds rows (got {n} rows, {n_folds} folds)")
    fold_idx = np.empty(n, dtype=int)
    fold_idx[np.random.default_rng(seed).permutation(n)] = np.arange(n) % n_folds
    return [(np.flatnonzero(fold_idx != f), np.flatnonzero(fold_idx == f)) for f in range(n_folds)]


def grouped_kfold(groups: Sequence[str | None], n_folds: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_folds`` (train, held-out) pairs; every group sits in exactly one held-out fold.

    Groups are shuffled (seeded) and assigned greedily to the currently smallest fold, so folds
    are balanced by row count. Rows with no group are an error: silently pooling them would let
    one repository leak across folds.
    """
    if any(g is None for g in groups):
        raise ValueError("grouped k-fold needs a group on every row (e.g. repository or topic)")
    names = sorted({str(g) for g in groups})
    if len(names) < n_folds or n_folds < 2:
        raise ValueError(
            f"grouped k-fold needs ≥ 2 folds and ≥ n_folds groups (got {len(names)} groups, {n_folds} folds)"
        )
    rng = np.random.default_rng(seed)
    shuffled = [names[i] for i in rng.permutation(len(names))]
    arr = np.array([str(g) for g in groups])
    sizes = {name: int((arr == name).sum()) for name in names}
    shuffled.sort(key=lambda name: -sizes[name])
    fold_of: dict[str, int] = {}
    load = [0] * n_folds
    for name in shuffled:
        fold = int(np.argmin(load))
        fold_of[name] = fold
        load[fold] += sizes[name]
    fold_idx = np.array([fold_of[g] for g in arr])
    return [(np.flatnonzero(fold_idx != f), np.flatnonzero(fold_idx == f)) for f in range(n_folds)]


def group_split(
    groups: Sequence[str | None], seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
) -> list[np.ndarray]:
    """Train/val/test index arrays with whole groups in one part (≈ ``fractions`` of the rows)."""
    if any(g is None for g in groups):
        raise ValueError("a grouped split needs a group on every row (e.g. repository or topic)")
    arr = np.array([str(g) for g in groups])
    names = sorted(set(arr.tolist()))
    if len(names) < 3:
        raise ValueError(f"a grouped train/val/test split needs ≥ 3 groups, got {len(names)}")
    order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    part_of: dict[str, int] = {order[0]: 1, order[1]: 2}
    rows_in = [0, int((arr == order[0]).sum()), int((arr == order[1]).sum())]
    for name in order[2:]:
        deficit = [fractions[p] * arr.size - rows_in[p] for p in range(3)]
        part = int(np.argmax(deficit))
        part_of[name] = part
        rows_in[part] += int((arr == name).sum())
    part_idx = np.array([part_of[g] for g in arr])
    return [np.flatnonzero(part_idx == p) for p in range(3)]
