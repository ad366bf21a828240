"""WCO / mean ensembles, aux constraints, ProbeScorer, and artifact round-trip and refusal cases."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from probes import (
    FeatureExtractor,
    FeatureSpec,
    FrozenReference,
    Probe,
    ProbeArtifactError,
    ProbeEnsemble,
    ProbeHead,
    ProbeScorer,
    load_probe,
    save_probe,
    sigmoid,
)
from probes.artifacts import METADATA_FILE, WEIGHTS_FILE

TEXTS = ["1+1=", "22*3=66", "9-9=0", "123+4=127", "5*5="]


def make_probe(reference: FrozenReference, spec: FeatureSpec, seed: int, arch: str = "linear") -> Probe:
    torch.manual_seed(seed)
    head = ProbeHead(arch, spec.output_dim(reference.hidden_size), hidden_dim=16)
    head.eval()
    return Probe(head, spec, reference.model_id, reference.fingerprint, reference.hidden_size, (1, 3), 8, f"p{seed}")


@pytest.fixture(scope="module")
def probes3(reference: FrozenReference) -> list[Probe]:
    specs = [FeatureSpec(-1, "mean_full"), FeatureSpec(1, "last_token"), FeatureSpec(-1, "mean_full")]
    return [
        make_probe(reference, spec, seed, arch)
        for seed, (spec, arch) in enumerate(zip(specs, ["linear", "mlp", "deep_mlp"], strict=True))
    ]


def test_wco_is_member_minimum_and_mean_is_mean(reference: FrozenReference, probes3: list[Probe]) -> None:
    wco = ProbeEnsemble(probes3, "min")
    feats = FeatureExtractor(reference).extract(TEXTS, wco.specs)
    members = np.stack([p.logits(feats) for p in probes3])
    np.testing.assert_allclose(wco.logits(feats), members.min(axis=0))
    np.testing.assert_allclose(wco.probabilities(feats), sigmoid(members).min(axis=0))
    np.testing.assert_allclose(ProbeEnsemble(probes3, "mean").logits(feats), members.mean(axis=0))
    assert len(wco.specs) == 2  # shared feature extracted once


def test_aux_constraint_is_min_of_primary_and_aux(reference: FrozenReference, probes3: list[Probe]) -> None:
    primary, aux = probes3[0], probes3[1]
    constrained = ProbeEnsemble([primary], constraints=[aux])
    feats = FeatureExtractor(reference).extract(TEXTS, constrained.specs)
    np.testing.assert_allclose(constrained.logits(feats), np.minimum(primary.logits(feats), aux.logits(feats)))


def test_scorer_uses_one_forward_pass_for_the_whole_ensemble(reference: FrozenReference, probes3: list[Probe]) -> None:
    scorer = ProbeScorer(reference, ProbeEnsemble(probes3[:2], "min", constraints=probes3[2:]))
    scores = scorer.score(TEXTS)
    assert scorer.forward_passes == 1
    assert scores.member_logits.shape == (3, len(TEXTS))
    np.testing.assert_allclose(scores.logits, scores.member_logits.min(axis=0))
    assert scorer(TEXTS) == pytest.approx(list(scores.logits))
    clone = pickle.loads(pickle.dumps(scorer))
    np.testing.assert_allclose(clone.score(TEXTS).logits, scores.logits, atol=1e-6)


def test_scorer_refuses_probe_of_another_reference(reference: FrozenReference, probes3: list[Probe]) -> None:
    foreign = make_probe(reference, FeatureSpec(-1, "mean_full"), 7)
    foreign.reference_fingerprint = "sha256:other"
    with pytest.raises(ProbeArtifactError, match="reference model mismatch"):
        ProbeScorer(reference, foreign)


def test_artifact_round_trip(reference: FrozenReference, probes3: list[Probe], tmp_path: Path) -> None:
    probe = probes3[1]
    probe.metrics = {"balanced_accuracy": np.float64(0.8)}
    save_probe(probe, tmp_path / "p")
    meta = json.loads((tmp_path / "p" / METADATA_FILE).read_text())
    assert meta["reference"]["fingerprint"] == reference.fingerprint
    assert meta["input_dim"] == reference.hidden_size and meta["label"] == {"band": [1, 3], "k": 8}
    assert {"created_at", "training", "metrics", "architecture", "feature"} <= meta.keys()
    loaded = load_probe(
        tmp_path / "p", expected_fingerprint=reference.fingerprint, expected_input_dim=reference.hidden_size
    )
    feats = FeatureExtractor(reference).extract(TEXTS, [probe.spec])
    np.testing.assert_array_equal(loaded.logits(feats), probe.logits(feats))
    assert (loaded.spec, loaded.band, loaded.k, loaded.head.arch) == (probe.spec, (1, 3), 8, "mlp")
    scorer = ProbeScorer.from_artifacts(reference, [tmp_path / "p"])
    np.testing.assert_allclose(scorer.score(TEXTS).logits, probe.logits(feats))


@pytest.fixture()
def saved(reference: FrozenReference, probes3: list[Probe], tmp_path: Path) -> Path:
    return save_probe(probes3[0], tmp_path / "saved")


def test_load_refuses_wrong_fingerprint(saved: Path) -> None:
    with pytest.raises(ProbeArtifactError, match="reference model mismatch"):
        load_probe(saved, expected_fingerprint="sha256:deadbeef")


def test_load_refuses_wrong_input_dim(saved: Path, reference: FrozenReference) -> None:
    with pytest.raises(ProbeArtifactError, match="wrong input size"):
        load_probe(saved, expected_input_dim=reference.hidden_size * 2)
    meta = json.loads((saved / METADATA_FILE).read_text())
    meta["input_dim"] = 10  # metadata lies about the size: weights do not fit
    (saved / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ProbeArtifactError, match="do not match input size 10"):
        load_probe(saved)


def test_load_refuses_truncated_weights(saved: Path) -> None:
    weights = saved / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:-40])
    with pytest.raises(ProbeArtifactError, match="truncated or corrupt"):
        load_probe(saved)


def test_load_refuses_flipped_weight_bytes(saved: Path) -> None:
    weights = saved / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ProbeArtifactError, match="corrupt"):
        load_probe(saved)


def test_load_refuses_bad_json(saved: Path) -> None:
    (saved / METADATA_FILE).write_text("{not json")
    with pytest.raises(ProbeArtifactError, match="not valid JSON"):
        load_probe(saved)


def test_load_refuses_missing_fields(saved: Path) -> None:
    (saved / METADATA_FILE).write_text(json.dumps({"format": "propel-probe"}))
    with pytest.raises(ProbeArtifactError, match="lacks fields"):
        load_probe(saved)


@pytest.mark.parametrize("victim", [WEIGHTS_FILE, METADATA_FILE, None])
def test_load_refuses_missing_file(saved: Path, victim: str | None, tmp_path: Path) -> None:
    target = tmp_path / "nowhere" if victim is None else saved
    if victim is not None:
        (saved / victim).unlink()
    with pytest.raises(ProbeArtifactError, match="missing"):
        load_probe(target)
