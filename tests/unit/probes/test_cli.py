"""``probes`` click group: sweep / train / show / score on a small generated JSONL, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from probes.cli import probes
from tests.unit.probes.conftest import synthetic_texts

REPO = Path(__file__).resolve().parents[3]
FAST = ["--max-epochs", "15", "--patience", "3", "--lr", "3e-3"]


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts, labels = synthetic_texts(120, seed=1)
    path = tmp_path_factory.mktemp("cli") / "tasks.jsonl"
    rows = [{"text": t, "solves": 2 if y else (8 if i % 4 else 0), "k": 8, "group": f"topic{i % 5}"}
            for i, (t, y) in enumerate(zip(texts, labels, strict=True))]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def invoke(args: list[str]) -> object:
    return CliRunner().invoke(probes, args, catch_exceptions=False)


def test_train_show_score(data_file: Path, tiny_dir: Path, tmp_path: Path) -> None:
    art = tmp_path / "probe"
    common = ["--data", str(data_file), "--reference", str(tiny_dir), "--band", "1-3", "--k", "8"]
    result = invoke(["train", *common, "--pooling", "mean_full", "--arch", "linear", "--out", str(art), *FAST])
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    meta = json.loads((art / "probe.json").read_text())
    assert meta["training"]["rows"] > 0 and "test" in meta["metrics"]
    assert 0.0 <= meta["metrics"]["test"]["balanced_accuracy"] <= 1.0  # quality is tested in test_training

    shown = invoke(["show", str(art)])
    assert shown.exit_code == 0 and meta["reference"]["fingerprint"] in shown.output  # type: ignore[attr-defined]

    out = tmp_path / "scores.jsonl"
    args = ["score", "--data", str(data_file), "--reference", str(tiny_dir), "--probe", str(art), "--probe", str(art)]
    scored = invoke([*args, "--aux", str(art), "--out", str(out)])
    assert scored.exit_code == 0, scored.output  # type: ignore[attr-defined]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 120 and {"logit", "probability"} <= lines[0].keys()


def test_sweep_writes_table_heatmap_and_best_probe(data_file: Path, tiny_dir: Path, tmp_path: Path) -> None:
    result = invoke(["sweep", "--data", str(data_file), "--reference", str(tiny_dir), "--layers", "1,-1",
                     "--poolings", "mean_full,max", "--archs", "linear", "--split", "group-kfold", "--folds", "3",
                     "--out", str(tmp_path), *FAST])  # fmt: skip
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    for name in (
        "sweep.json",
        "sweep.csv",
        "sweep_heatmap.png",
        "best_probe/probe.json",
        "best_probe/probe.safetensors",
    ):
        assert (tmp_path / name).is_file(), name
    assert len(json.loads((tmp_path / "sweep.json").read_text())["rows"]) == 4


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json\n", "not valid JSON"),
        ('{"text": "1+1", "k": 8}\n', "missing field"),
        ("", "no rows"),
        ('{"text": "1", "solves": 9, "k": 8}\n', "0 ≤ solves ≤ k"),
    ],
)
def test_bad_data_file_exits_2_with_message(tmp_path: Path, tiny_dir: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    result = CliRunner().invoke(
        probes, ["train", "--data", str(bad), "--reference", str(tiny_dir), "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_missing_file_and_bad_artifact_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(probes, ["show", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "missing directory" in result.output


def test_subprocess_entry_point(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "from probes.cli import probes; probes()"]
    ok = subprocess.run([*cmd, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "sweep" in ok.stdout and "score" in ok.stdout
    bad = subprocess.run([*cmd, "show", str(tmp_path / "nope")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "missing directory" in bad.stderr and "Traceback" not in bad.stderr
