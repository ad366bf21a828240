"""``propel probes``: sweep, train, show and score activation probes from a labelled JSONL file.

Input rows: ``{"text": ..., "solves": int, "k": int, "group": "repo-or-topic" (optional),
"turns": [[start, end], ...] (optional assistant-turn character spans)}``. A row is positive when
its solve rate lies in the band ``--band LO-HI`` of ``--k`` attempts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console

from probes import (
    ARCHITECTURES,
    BALANCES,
    TURN_POOLINGS,
    Band,
    DatasetError,
    ExtractionConfig,
    FeatureCache,
    FeatureExtractor,
    FeatureSpec,
    FrozenReference,
    LabelledText,
    Probe,
    ProbeArtifactError,
    ProbeScorer,
    SweepConfig,
    TrainConfig,
    evaluate,
    group_split,
    load_jsonl,
    random_split,
    read_metadata,
    run_sweep,
    save_probe,
    save_sweep,
    train_probe,
)
from probes.data import labels_for
from probes.inputs import TextInput
from probes.progress import ProgressReporter
from probes.sweep import Split

console = Console(stderr=True)
#: ``--split`` choices → :class:`SweepConfig` splits (``grouped`` is ``probes.validation = "grouped"``).
SWEEP_SPLITS: dict[str, Split] = {"random": "random", "kfold": "kfold", "grouped": "group_kfold",
                                "group-kfold": "group_kfold"}


@contextmanager
def _progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """The shared reporter: a bar on a terminal, a line every ≤ 30 s in a log (see probes.progress)."""
    with ProgressReporter(description, total) as bar:
        yield bar.advance


def _csv(kind: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, str], list[Any]]:
    def parse(_ctx: click.Context, param: click.Parameter, value: str) -> list[Any]:
        try:
            return [kind(part.strip()) for part in value.split(",") if part.strip()]
        except ValueError as exc:
            raise click.BadParameter(f"{value!r}: {exc}", param=param) from exc

    return parse


def _band(band: str, k: int) -> Band:
    try:
        return Band.parse(band, k)
    except ValueError as exc:
        raise click.UsageError(f"--band/--k: {exc}") from exc


def _rows(path: Path) -> list[LabelledText]:
    try:
        return load_jsonl(path)
    except DatasetError as exc:
        raise click.UsageError(f"bad data file: {exc}") from exc


def _reference(source: str, device: str) -> FrozenReference:
    try:
        return FrozenReference.load(source, device=device)
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot load reference model {source!r}: {exc}") from exc


def _extract(
    reference: FrozenReference, items: Sequence[TextInput], specs: list[FeatureSpec], opts: dict[str, Any]
) -> dict[FeatureSpec, np.ndarray]:
    config = ExtractionConfig(batch_size=opts["batch_size"], max_length=opts["max_length"])
    cache = FeatureCache(directory=opts["cache_dir"]) if opts["cache_dir"] else None
    extractor = FeatureExtractor(reference, config, cache)
    try:
        with _progress(f"extracting {len(specs)} feature(s)", len(items)) as advance:
            return extractor.extract(items, specs, advance)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--data", "data", required=True, type=click.Path(path_type=Path), help="Labelled JSONL file."),
        click.option("--reference", required=True, help="Reference model: local directory or hub id (frozen)."),
        click.option("--band", default="1-3", show_default=True, help="Target solve-count band LO-HI."),
        click.option("--k", "k", default=8, show_default=True, type=int, help="Attempts the band refers to."),
        click.option("--batch-size", default=16, show_default=True, type=int, help="Extraction batch size."),
        click.option("--max-length", default=2048, show_default=True, type=int, help="Token limit (keeps the end)."),
        click.option("--cache-dir", type=click.Path(path_type=Path), help="On-disk feature cache directory."),
        click.option("--device", default="cpu", show_default=True, help="Torch device for the reference."),
        click.option("--seed", default=0, show_default=True, type=int, help="Seed for splits and training."),
        click.option("--max-epochs", default=100, show_default=True, type=int),
        click.option("--patience", default=10, show_default=True, type=int),
        click.option("--lr", default=1e-3, show_default=True, type=float),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.group()
def probes() -> None:
    """Train, select, inspect and apply activation probes on a frozen reference model.

    Data is a JSONL file of {"text", "solves", "k", optional "group", optional "turns"} rows;
    --band LO-HI --k K marks a row positive when its solve rate lies in [LO/K, HI/K].
    """


@probes.command()
@_common
@click.option("--layers", default="-1", show_default=True, callback=_csv(int), help="Comma-separated layers.")
@click.option("--poolings", default="last_token,mean_full", show_default=True, callback=_csv(str))
@click.option("--archs", default="linear,mlp", show_default=True, callback=_csv(str), help=", ".join(ARCHITECTURES))
@click.option("--balances", default="downsample", show_default=True, callback=_csv(str), help=", ".join(BALANCES))
@click.option("--turn-poolings", "--turn-pooling", "turn_poolings", default="", callback=_csv(str),
              help=f"Comma-separated turn poolings ({', '.join(TURN_POOLINGS)}) aggregating per-turn vectors "
              "(multi-turn data; a plain text is one turn); none = plain texts.")
@click.option("--split", type=click.Choice(list(SWEEP_SPLITS)), default="random", show_default=True,
              help="random 80/10/10; kfold over rows; grouped (= group-kfold): K-fold by group, no group "
              "(repository) in both train and validation.")
@click.option("--folds", default=5, show_default=True, type=int, help="Folds for --split kfold / grouped.")
@click.option("--ece-ceiling", default=0.2, show_default=True, type=float, help="Selection calibration ceiling.")
@click.option("--rvp-sample", type=click.Path(path_type=Path), help="JSONL of policy samples {text, valid?}.")
@click.option("--invalid-reward", default=-20.0, show_default=True, type=float, help="RVP floor for valid=false.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Output directory.")
def sweep(**opts: Any) -> None:
    """Sweep layer × pooling × architecture × balance; save table, heatmap and the best probe."""
    band = _band(opts["band"], opts["k"])
    rows = _rows(opts["data"])
    try:
        train = TrainConfig(lr=opts["lr"], max_epochs=opts["max_epochs"], patience=opts["patience"], seed=opts["seed"])
        config = SweepConfig(
            layers=tuple(opts["layers"]), poolings=tuple(opts["poolings"]), architectures=tuple(opts["archs"]),
            balances=tuple(opts["balances"]), turn_poolings=tuple(opts["turn_poolings"]) or (None,),
            split=SWEEP_SPLITS[opts["split"]], n_folds=opts["folds"],
            seeds=(opts["seed"],), ece_ceiling=opts["ece_ceiling"], train=train,
        )  # fmt: skip
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    reference = _reference(opts["reference"], opts["device"])
    rvp_items, rvp_valid = _rvp_sample(opts["rvp_sample"])
    features = _extract(reference, [r.item for r in rows], config.specs, opts)
    rvp_features = _extract(reference, rvp_items, config.specs, opts) if rvp_items else None
    floor = opts["invalid_reward"]
    gate = None if rvp_valid is None else (lambda logits: np.where(rvp_valid, logits, floor))
    total = len(config.specs) * len(config.architectures) * len(config.balances)
    try:
        with _progress("training sweep cells", total) as advance:
            result = run_sweep(
                features, labels_for(rows, band), np.array([r.solve_rate for r in rows]), config,
                groups=[r.group for r in rows], rvp_features=rvp_features, rvp_reward=gate, progress=advance,
            )  # fmt: skip
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    paths = save_sweep(result, opts["out"])
    best = result.best
    probe = _probe(reference, best.spec, result.best_head, band, rows, result.best_metrics, "sweep-best")
    probe.training |= {"split": opts["split"], "balance": best.balance, "sweep": str(paths["json"])}
    save_probe(probe, Path(opts["out"]) / "best_probe")
    if not result.ece_constraint_met:
        console.print(f"[yellow]no cell met the ECE ceiling {opts['ece_ceiling']}; selected on balanced accuracy")
    click.echo(f"selected {best.spec.name} {best.arch}/{best.balance}: val balanced accuracy "
               f"{best.val_balanced_accuracy:.3f}, ECE {best.val_ece:.3f}; wrote {opts['out']}")  # fmt: skip


def _rvp_sample(path: Path | None) -> tuple[list[TextInput], np.ndarray | None]:
    if path is None:
        return [], None
    items: list[TextInput] = []
    valid: list[bool] = []
    if not path.is_file():
        raise click.UsageError(f"--rvp-sample {path}: no such file")
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            items.append(str(raw["text"]))
            valid.append(bool(raw.get("valid", True)))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise click.UsageError(f"--rvp-sample {path}:{lineno}: need a JSON object with 'text' ({exc})") from exc
    if not items:
        raise click.UsageError(f"--rvp-sample {path}: no rows")
    return items, np.array(valid)


def _probe(
    reference: FrozenReference,
    spec: FeatureSpec,
    head: Any,
    band: Band,
    rows: Sequence[LabelledText],
    metrics: dict[str, Any],
    name: str,
) -> Probe:
    labels = labels_for(rows, band)
    summary = {"rows": len(rows), "positives": int(labels.sum()), "negatives": int((1 - labels).sum())}
    summary["groups"] = len({r.group for r in rows if r.group is not None})
    return Probe(
        head=head, spec=spec, reference_id=reference.model_id, reference_fingerprint=reference.fingerprint,
        hidden_size=reference.hidden_size, band=(band.lo, band.hi), k=band.k, name=name,
        training=summary, metrics=metrics,
    )  # fmt: skip


@probes.command()
@_common
@click.option("--layer", default=-1, show_default=True, type=int, help="Hidden-state layer (negative = from end).")
@click.option("--pooling", default="mean_full", show_default=True)
@click.option("--turn-pooling", help="Aggregate per-turn vectors with this pooling (multi-turn data).")
@click.option("--arch", type=click.Choice(list(ARCHITECTURES)), default="mlp", show_default=True)
@click.option("--balance", type=click.Choice(list(BALANCES)), default="downsample", show_default=True)
@click.option("--split", type=click.Choice(["random", "group"]), default="random", show_default=True,
              help="80/10/10 by row, or by whole groups.")  # fmt: skip
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Artifact directory to write.")
def train(**opts: Any) -> None:
    """Train one probe (80/10/10 split, early stopping on val) and save its artifact."""
    band = _band(opts["band"], opts["k"])
    rows = _rows(opts["data"])
    try:
        spec = FeatureSpec(opts["layer"], opts["pooling"], opts["turn_pooling"])
        config = TrainConfig(lr=opts["lr"], max_epochs=opts["max_epochs"], patience=opts["patience"], seed=opts["seed"])
        if opts["split"] == "group":
            parts = group_split([r.group for r in rows], seed=opts["seed"])
        else:
            parts = random_split(len(rows), seed=opts["seed"])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    reference = _reference(opts["reference"], opts["device"])
    x = _extract(reference, [r.item for r in rows], [spec], opts)[spec]
    y, rates = labels_for(rows, band), np.array([r.solve_rate for r in rows])
    tr, va, te = parts
    try:
        with _progress("training", 1) as advance:
            result = train_probe(x[tr], y[tr], opts["arch"], opts["balance"], config, x[va], y[va])
            advance(1)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    metrics = {
        "val": evaluate(y[va], result.head.probabilities(x[va]), rates[va]).to_dict(),
        "test": evaluate(y[te], result.head.probabilities(x[te]), rates[te]).to_dict(),
    }
    probe = _probe(reference, spec, result.head, band, [rows[i] for i in tr], metrics, Path(opts["out"]).name)
    probe.training |= {"split": opts["split"], "balance": opts["balance"], "best_epoch": result.best_epoch,
                       "train_rows_after_balance": result.train_rows, "lr": config.lr, "seed": config.seed}  # fmt: skip
    save_probe(probe, opts["out"])
    test = metrics["test"]
    click.echo(f"wrote {opts['out']}: test balanced accuracy {test['balanced_accuracy']:.3f}, ECE {test['ece']:.3f}")


@probes.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the raw metadata JSON.")
def show(artifact: Path, as_json: bool) -> None:
    """Print a probe artifact's metadata (reference, feature, architecture, label, metrics)."""
    try:
        meta = read_metadata(artifact)
    except ProbeArtifactError as exc:
        raise click.UsageError(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(meta, indent=2))
        return
    click.echo(f"probe {meta.get('name', artifact.name)} ({artifact})")
    for key, value in _flatten(meta):
        click.echo(f"  {key:<34} {value}")


def _flatten(meta: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in meta.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, name + ".")
        else:
            out.append((name, json.dumps(value) if not isinstance(value, str) else value))
    return out


@probes.command()
@click.option("--data", "data", required=True, type=click.Path(path_type=Path), help="JSONL with a 'text' field.")
@click.option("--reference", required=True, help="Reference model the probes were trained on.")
@click.option("--probe", "members", multiple=True, required=True, type=click.Path(path_type=Path),
              help="Probe artifact directory; repeat for an ensemble.")  # fmt: skip
@click.option("--aux", multiple=True, type=click.Path(path_type=Path), help="Constraint probe(s): min(primary, aux).")
@click.option("--combine", type=click.Choice(["min", "mean"]), default="min", show_default=True, help="min = WCO.")
@click.option("--out", "out", type=click.Path(path_type=Path), help="Write one JSON line of scores per input row.")
@click.option("--batch-size", default=16, show_default=True, type=int)
@click.option("--max-length", default=2048, show_default=True, type=int)
@click.option("--device", default="cpu", show_default=True)
def score(**opts: Any) -> None:
    """Score texts with a probe, a WCO/mean ensemble and optional aux constraints (one forward pass)."""
    rows = _score_rows(opts["data"])
    reference = _reference(opts["reference"], opts["device"])
    extraction = ExtractionConfig(batch_size=opts["batch_size"], max_length=opts["max_length"])
    try:
        scorer = ProbeScorer.from_artifacts(reference, opts["members"], opts["combine"], opts["aux"], extraction)
        with _progress("scoring", len(rows)) as advance:
            scores = scorer.score([item for item, _ in rows], advance)
    except (ProbeArtifactError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    lines = [json.dumps({"row": i, "logit": float(lg), "probability": float(p)})
             for i, (lg, p) in enumerate(zip(scores.logits, scores.probabilities, strict=True))]  # fmt: skip
    if opts["out"]:
        Path(opts["out"]).write_text("\n".join(lines) + "\n")
    else:
        click.echo("\n".join(lines))
    _report_if_labelled(rows, scores.probabilities, scorer)


def _score_rows(path: Path) -> list[tuple[TextInput, dict[str, Any]]]:
    if not path.is_file():
        raise click.UsageError(f"bad data file: {path}: no such file")
    out: list[tuple[TextInput, dict[str, Any]]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise click.UsageError(f"bad data file: {path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("text"), str) or not raw["text"]:
            raise click.UsageError(f"bad data file: {path}:{lineno}: need an object with a non-empty 'text'")
        out.append((raw["text"], raw))
    if not out:
        raise click.UsageError(f"bad data file: {path}: no rows")
    return out


def _report_if_labelled(rows: list[tuple[TextInput, dict[str, Any]]], prob: np.ndarray, scorer: ProbeScorer) -> None:
    if not all(isinstance(raw.get("solves"), int) and isinstance(raw.get("k"), int) for _, raw in rows):
        return
    first = scorer.ensemble.members[0]
    band = Band(first.k, first.band[0], first.band[1])
    try:
        labels = np.array([band.label(raw["solves"], raw["k"]) for _, raw in rows])
    except ValueError as exc:
        raise click.UsageError(f"bad data file: labelled rows need 0 ≤ solves ≤ k ({exc})") from exc
    rates = np.array([raw["solves"] / raw["k"] for _, raw in rows])
    metrics = evaluate(labels, prob, rates)
    console.print(f"labelled rows: balanced accuracy {metrics.balanced_accuracy:.3f}, F1 {metrics.f1:.3f}, "
                  f"ECE {metrics.ece:.3f}, AUC {metrics.roc_auc:.3f}")  # fmt: skip
