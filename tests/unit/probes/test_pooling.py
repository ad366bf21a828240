"""Every pooling against hand-computed values, under left and right padding."""

from __future__ import annotations

import pytest
import torch

from probes.pooling import POOLINGS, pool, pool_sequence, pooled_dim

# Row 0 has 3 valid tokens with values (per feature dim) a, b, c; row 1 has 1 valid token d.
A, B, C, D = [1.0, -2.0], [3.0, 0.0], [5.0, 4.0], [7.0, 1.0]
PAD = [99.0, 99.0]


def batch(side: str) -> tuple[torch.Tensor, torch.Tensor]:
    if side == "right":
        hidden = torch.tensor([[A, B, C], [D, PAD, PAD]])
        mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    else:
        hidden = torch.tensor([[A, B, C], [PAD, PAD, D]])
        mask = torch.tensor([[1, 1, 1], [0, 0, 1]])
    return hidden, mask


EXPECTED = {
    "last_token": [C, D],
    "mean_full": [[3.0, 2 / 3], D],
    "mean_last_50": [[3.0, 2 / 3], D],
    "mean_last_5": [[3.0, 2 / 3], D],
    "mean_last_3": [[3.0, 2 / 3], D],
    "mean_last_2": [[4.0, 2.0], D],
    "mean_last_half": [[4.0, 2.0], D],  # ceil(3/2) = 2 last tokens
    "max": [[5.0, 4.0], D],
    "first_last_concat": [A + C, D + D],
    # population std of (1,3,5) = sqrt(8/3); of (-2,0,4) = sqrt(56/9)
    "mean_std_concat": [[3.0, 2 / 3, (8 / 3) ** 0.5, (56 / 9) ** 0.5], [*D, 0.0, 0.0]],
}


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pooling_matches_hand_values(name: str, side: str) -> None:
    hidden, mask = batch(side)
    got = pool(hidden, mask, name)
    assert got.shape == (2, pooled_dim(2, name))
    torch.testing.assert_close(got, torch.tensor(EXPECTED[name]), rtol=1e-6, atol=1e-6)


def test_all_named_poolings_are_covered() -> None:
    assert set(POOLINGS) <= set(EXPECTED)


def test_mean_last_half_odd_and_even_lengths() -> None:
    hidden = torch.arange(8.0).reshape(1, 8, 1).repeat(2, 1, 1)
    mask = torch.tensor([[1] * 8, [0, 0, 0, 1, 1, 1, 1, 1]])  # 8 valid → last 4; 5 valid → last 3
    got = pool(hidden, mask, "mean_last_half")
    torch.testing.assert_close(got, torch.tensor([[5.5], [6.0]]))


def test_mask_with_hole_selects_only_valid_positions() -> None:
    hidden = torch.tensor([[[1.0], [100.0], [3.0], [5.0]]])
    mask = torch.tensor([[1, 0, 1, 1]])
    assert pool(hidden, mask, "last_token").item() == 5.0
    assert pool(hidden, mask, "first_last_concat").tolist() == [[1.0, 5.0]]
    assert pool(hidden, mask, "max").item() == 5.0
    assert pool(hidden, mask, "mean_last_2").item() == 4.0


def test_empty_row_is_an_error() -> None:
    with pytest.raises(ValueError, match="no valid token"):
        pool(torch.ones(2, 3, 4), torch.tensor([[1, 1, 1], [0, 0, 0]]), "mean_full")


def test_unknown_pooling_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown pooling 'median'.*last_token"):
        pool(torch.ones(1, 2, 2), torch.ones(1, 2), "median")


def test_pool_sequence_aggregates_turn_vectors() -> None:
    turns = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    assert pool_sequence(turns, "mean_full").tolist() == [2.0, 4.0]
    assert pool_sequence(turns, "last_token").tolist() == [3.0, 6.0]
    assert pool_sequence(turns, "first_last_concat").tolist() == [1.0, 2.0, 3.0, 6.0]
