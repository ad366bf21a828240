"""Feature extraction from a tiny frozen Qwen2: padding, batching, trajectories, cache, freezing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probes import (
    ExtractionConfig,
    FeatureCache,
    FeatureExtractor,
    FeatureSpec,
    FrozenReference,
    ReferenceChangedError,
    Trajectory,
    model_fingerprint,
)
from tests.unit.probes.conftest import assert_bit_identical, state_copy

TEXTS = ["12+3=", "7*8-1=55", "9", "100-99=1", "4*4*4=64"]
SPECS = [FeatureSpec(-1, "mean_full"), FeatureSpec(1, "last_token"), FeatureSpec(0, "mean_std_concat")]


def manual_features(reference: FrozenReference, text: str, layer: int) -> torch.Tensor:
    ids = torch.tensor([reference.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        out = reference.model(input_ids=ids, output_hidden_states=True)
    return out.hidden_states[layer][0]


def test_features_match_an_unpadded_forward_under_both_padding_sides(reference: FrozenReference) -> None:
    for side in ("left", "right"):
        extractor = FeatureExtractor(reference, ExtractionConfig(batch_size=4, padding_side=side))
        feats = extractor.extract(TEXTS, SPECS)
        for row, text in enumerate(TEXTS):
            last = manual_features(reference, text, -1)
            np.testing.assert_allclose(feats[SPECS[0]][row], last.mean(0).numpy(), atol=1e-5)
            np.testing.assert_allclose(feats[SPECS[1]][row], manual_features(reference, text, 1)[-1].numpy(), atol=1e-5)
        assert feats[SPECS[2]].shape == (len(TEXTS), 2 * reference.hidden_size)


def test_batch_size_does_not_change_features(reference: FrozenReference) -> None:
    one = FeatureExtractor(reference, ExtractionConfig(batch_size=1)).extract(TEXTS, SPECS)
    many = FeatureExtractor(reference, ExtractionConfig(batch_size=8)).extract(TEXTS, SPECS)
    for spec in SPECS:
        np.testing.assert_allclose(one[spec], many[spec], atol=1e-5)


def test_one_forward_pass_per_batch_whatever_the_number_of_features(reference: FrozenReference) -> None:
    extractor = FeatureExtractor(reference, ExtractionConfig(batch_size=2))
    extractor.extract(TEXTS, SPECS)
    assert extractor.forward_passes == 3  # ceil(5 / 2), for 3 features


def test_truncation_keeps_the_end(reference: FrozenReference) -> None:
    spec = FeatureSpec(-1, "mean_full")
    cut = FeatureExtractor(reference, ExtractionConfig(max_length=4)).extract(["123456789"], [spec])[spec]
    full = FeatureExtractor(reference).extract(["6789"], [spec])[spec]
    np.testing.assert_allclose(cut, full, atol=1e-5)


def test_trajectory_gives_one_vector_per_turn_then_aggregates(reference: FrozenReference) -> None:
    traj = Trajectory.from_messages(
        [
            {"role": "user", "content": "fix"},
            {"role": "assistant", "content": "12+3"},
            {"role": "tool", "content": "ok"},
            {"role": "assistant", "content": "7*8"},
        ]
    )
    assert [traj.text[a:b] for a, b in traj.turns] == ["12+3", "7*8"]
    spec = FeatureSpec(-1, "mean_full", turn_pooling="mean_std_concat")
    got = FeatureExtractor(reference).extract([traj, "plain text"], [spec])[spec]
    hidden = manual_features(reference, traj.text, -1)
    # char tokenizer, no special tokens: token t covers character t
    turn_vectors = torch.stack([hidden[a:b].mean(0) for a, b in traj.turns])
    expected = torch.cat([turn_vectors.mean(0), turn_vectors.std(0, unbiased=False)])
    np.testing.assert_allclose(got[0], expected.numpy(), atol=1e-5)
    plain = manual_features(reference, "plain text", -1).mean(0)
    np.testing.assert_allclose(got[1][: reference.hidden_size], plain.numpy(), atol=1e-5)


def test_trajectory_needs_turn_pooling(reference: FrozenReference) -> None:
    with pytest.raises(ValueError, match="no turn_pooling"):
        FeatureExtractor(reference).extract([Trajectory("abc", ((0, 2),))], [FeatureSpec(-1, "mean_full")])


def test_layer_out_of_range_is_reported(reference: FrozenReference) -> None:
    with pytest.raises(ValueError, match="layer 9 out of range"):
        FeatureExtractor(reference).extract(TEXTS, [FeatureSpec(9, "mean_full")])


def test_cache_hit_avoids_the_forward_pass(reference: FrozenReference, tmp_path) -> None:
    cache = FeatureCache(max_entries=1000, directory=tmp_path / "cache")
    extractor = FeatureExtractor(reference, ExtractionConfig(batch_size=2), cache)
    first = extractor.extract(TEXTS, SPECS)
    calls = extractor.forward_passes
    again = extractor.extract(TEXTS, SPECS)
    assert extractor.forward_passes == calls
    partial = extractor.extract([*TEXTS, "55+5="], SPECS)
    assert extractor.forward_passes == calls + 1  # only the new text is forwarded
    for spec in SPECS:
        np.testing.assert_array_equal(first[spec], again[spec])
        np.testing.assert_array_equal(first[spec], partial[spec][:-1])
    # a fresh process (new memory cache) is served from disk
    cold = FeatureExtractor(reference, ExtractionConfig(batch_size=2), FeatureCache(directory=tmp_path / "cache"))
    np.testing.assert_array_equal(cold.extract(TEXTS, SPECS)[SPECS[0]], first[SPECS[0]])
    assert cold.forward_passes == 0


def test_lru_evicts_oldest() -> None:
    from probes.cache import CacheKey

    cache = FeatureCache(max_entries=2)
    keys = [CacheKey("ref", "s", 0, "max", None, str(i)) for i in range(3)]
    for i, key in enumerate(keys):
        cache.put(key, np.full(2, i, dtype=np.float32))
    assert cache.get(keys[0]) is None and cache.get(keys[2]) is not None and len(cache) == 2


def test_reference_is_frozen_and_unchanged(reference: FrozenReference) -> None:
    before = state_copy(reference.model)
    FeatureExtractor(reference).extract(TEXTS, SPECS)
    assert_bit_identical(before, reference.model)
    assert not reference.model.training
    assert not any(p.requires_grad for p in reference.model.parameters())
    reference.verify_unchanged()


def test_fingerprint_is_stable_and_sensitive(tiny_parts) -> None:
    from curriculum.common.tinymodels import tiny_qwen2

    model, tokenizer = tiny_parts
    twin = tiny_qwen2(tokenizer, hidden_size=64, num_layers=2, seed=0)
    assert model_fingerprint(twin) == model_fingerprint(model)
    other = tiny_qwen2(tokenizer, hidden_size=64, num_layers=2, seed=1)
    assert model_fingerprint(other) != model_fingerprint(model)
    ref = FrozenReference(twin, tokenizer)
    with torch.no_grad():
        next(twin.parameters()).view(-1)[0] += 1.0
    with pytest.raises(ReferenceChangedError, match="changed"):
        ref.verify_unchanged()
