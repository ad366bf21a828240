"""False-positive co-evolution (PROPEL §6, Appendix 12): mine the probe's mistakes, train an aux probe.

The daemon's retrain phase calls :func:`train_aux_probe` with labelled samples of the *current*
policy (spot-checked by the real solver). The recipe:

* **false positives** — valid, probe probability ≥ ``threshold``, solve count outside the band —
  are found with :func:`curriculum.labelling.spotcheck.false_positives` (the daemon records them in its
  ``false_positives`` table when it labels spot-checks and passes them in as ``false_positive_ids``);
* **positives** — in-band labelled tasks (the current samples' plus, typically, the original
  probe-training corpus' positives passed as ``extra_positives``);
* **negatives** — the false positives, plus (``collapse_topic``) the valid tasks of the dominant
  collapsed topic family that are not labelled in band, plus any ``extra_negatives``;
* an aux head is trained with :func:`probes.train_probe` on frozen-reference features and returned
  as a :class:`probes.Probe`, to be used as a **constraint** ``min(primary, aux)`` — never alone
  (the paper's standalone aux probe drove the generator to trivially easy tasks).

Plain functions: no store, no Celery. The daemon does the I/O and registers the artifact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from curriculum.labelling.spotcheck import LabelValue, false_positives
from probes import FeatureExtractor, FeatureSpec, Probe, TrainConfig
from probes.band import Band
from probes.fit import fit_probe


class InsufficientAuxData(ValueError):
    """Nothing to learn from: the mined set lacks positives or negatives (e.g. no false positives).

    The daemon treats this as "no retrain this cycle" and keeps the current reward.
    """


@dataclass(frozen=True)
class LabelledSample:
    """One current-policy task: its reference text, validity, probe probability and solver label."""

    task_id: int
    text: str
    valid: bool
    probability: float
    label: LabelValue | None
    topic: str | None = None


@dataclass(frozen=True)
class AuxDataset:
    texts: list[str]
    labels: np.ndarray
    false_positive_ids: list[int]
    collapse_negative_ids: list[int]
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuxProbeResult:
    probe: Probe
    dataset: AuxDataset
    metrics: dict[str, Any]


def dominant_topic(samples: Sequence[LabelledSample]) -> tuple[str | None, float]:
    """The most common topic among valid samples and its share (``(None, 0.0)`` when none)."""
    topics = Counter(s.topic for s in samples if s.valid and s.topic is not None)
    if not topics:
        return None, 0.0
    topic, count = topics.most_common(1)[0]
    return topic, count / sum(topics.values())


def build_aux_dataset(samples: Sequence[LabelledSample], band: Band, threshold: float,
                      collapse_topic: str | None = None, extra_positives: Sequence[str] = (),
                      extra_negatives: Sequence[str] = (),
                      false_positive_ids: Collection[int] | None = None) -> AuxDataset:
    """Positives and negatives for the aux probe (see the module docstring). Duplicates are dropped.

    ``false_positive_ids``: false positives already recorded (the daemon's ``false_positives``
    table) — used as they are instead of being mined again from ``samples``' labels.
    """
    by_id = {s.task_id: s for s in samples}
    if false_positive_ids is None:
        labelled = [(s.task_id, s.valid, s.probability, s.label) for s in samples if s.label is not None]
        fps = {fp[0] for fp in false_positives(labelled, threshold, band)}
    else:
        fps = {t for t in false_positive_ids if t in by_id}
    positives = [s.text for s in samples if s.valid and s.label is not None and s.label.in_band]
    collapse_ids = [s.task_id for s in samples if collapse_topic is not None and s.valid and s.topic == collapse_topic
                    and not (s.label is not None and s.label.in_band) and s.task_id not in fps]
    negatives = [by_id[i].text for i in sorted(fps)] + [by_id[i].text for i in collapse_ids]
    pos = list(dict.fromkeys([*positives, *extra_positives]))
    neg_set = set(pos)
    neg = [t for t in dict.fromkeys([*negatives, *extra_negatives]) if t not in neg_set]
    if not pos or not neg:
        raise InsufficientAuxData(f"aux probe needs both classes: {len(pos)} positives, {len(neg)} negatives "
                         f"({len(fps)} false positives mined at threshold {threshold})")
    summary = {"positives": len(pos), "negatives": len(neg), "false_positives": len(fps),
               "collapse_negatives": len(collapse_ids), "collapse_topic": collapse_topic,
               "extra_positives": len(extra_positives), "extra_negatives": len(extra_negatives),
               "threshold": threshold}
    return AuxDataset(pos + neg, np.array([1] * len(pos) + [0] * len(neg)), sorted(fps), collapse_ids, summary)


def train_aux_probe(samples: Sequence[LabelledSample], extractor: FeatureExtractor, spec: FeatureSpec, band: Band,
                    threshold: float = 0.5, collapse_topic: str | None = None, extra_positives: Sequence[str] = (),
                    extra_negatives: Sequence[str] = (), arch: str = "mlp", config: TrainConfig | None = None,
                    name: str = "aux-fp", val_share: float = 0.2,
                    false_positive_ids: Collection[int] | None = None) -> AuxProbeResult:
    """Mine false positives, build the aux set, train an aux head on frozen-reference features.

    ``samples[*].text`` must be the text the reference reads (``domain.reference_text(task)``).
    Returns the probe (same reference fingerprint as ``extractor``) with validation metrics.
    """
    data = build_aux_dataset(samples, band, threshold, collapse_topic, extra_positives, extra_negatives,
                             false_positive_ids)
    config = config or TrainConfig(seed=0)
    x = extractor.extract(data.texts, [spec])[spec]
    probe = fit_probe(x, data.labels, reference=extractor.reference, spec=spec, band=band, arch=arch,
                      balance="weighted", config=config, name=name, val_share=val_share,
                      training={"rows": len(data.texts), **data.summary})
    metrics = probe.metrics
    return AuxProbeResult(probe, data, metrics)

