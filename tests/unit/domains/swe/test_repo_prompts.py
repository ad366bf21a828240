"""The repository-conditioned tiny prompt (``prompt_style = "tiny-repo"``): prompts name only repositories
of the domain's split, the prompt's repository is joined back in front of the completion before parsing
(by the domain, the reward and the trainer's sampling), and the other styles are unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from curriculum.domains.arith import ArithDomain
from curriculum.domains.base import generation_text
from curriculum.domains.swe.cli import fetch_and_preflight
from curriculum.domains.swe.domain import TINY_PROMPT, SweDomain
from curriculum.reward.rewards import HardGateReward

from .conftest import FIXTURE, POLICY

#: drops ``acc += v`` in minicalc/core.py (a valid bug: see test_domain.py)
REST = "minicalc/core.py::running_total remove_assign 2"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A registry with the fixture repository twice: ``minicalc`` in rl-train, ``minicalc2`` held out."""
    tmp = tmp_path_factory.mktemp("swe-repo-prompts")
    path = tmp / "lab.toml"
    path.write_text("".join(f'[[repo]]\nname = "{name}"\nsource = "path"\npath = "{FIXTURE}"\ntests = ["tests"]\n'
                            f'split = "{split}"\n\n' for name, split in (("minicalc", "rl-train"),
                                                                         ("minicalc2", "held-out"))))
    results = fetch_and_preflight(tmp / "cache", [path], runner="rlimit", bundled_registry=False, policy=POLICY)
    assert [r.status for r in results] == ["ok", "ok"]
    return tmp / "cache", path


def swe(lab: tuple[Path, Path], split: str | None, style: str = "tiny-repo") -> SweDomain:
    return SweDomain(lab[0], [lab[1]], split=split, bundled_registry=False, runner="rlimit", policy=POLICY,
                     prompt_style=style)


def named(prompts: list[str]) -> set[str]:
    assert all(p.startswith(TINY_PROMPT) and p.endswith(" ") and p.count(" ") == 2 for p in prompts), prompts
    return {p[len(TINY_PROMPT):-1] for p in prompts}


def test_prompts_name_only_repositories_of_the_split(lab: tuple[Path, Path]) -> None:
    rl, held, every = swe(lab, "rl-train"), swe(lab, "held-out"), swe(lab, None)
    assert named(rl.generator_prompts(16, seed=0)) == {"minicalc"}
    assert named(held.generator_prompts(16, seed=0)) == {"minicalc2"}
    assert named(every.generator_prompts(32, seed=0)) == {"minicalc", "minicalc2"}
    assert every.generator_prompts(8, seed=3) == every.generator_prompts(8, seed=3)
    with pytest.raises(ValueError, match="no fetched, preflighted SWE repository in split 'probe-train'"):
        swe(lab, "probe-train").generator_prompts(1, seed=0)


def test_prompt_completion_round_trip(lab: tuple[Path, Path]) -> None:
    held, rl = swe(lab, "held-out"), swe(lab, "rl-train")
    space = held.spec_space("minicalc2")
    assert space
    for spec in space:
        line = spec.render()
        completion = line[len("minicalc2 "):]  # what the generator writes after "BUG: minicalc2 "
        text = generation_text(held, f"{TINY_PROMPT}minicalc2 ", completion)
        assert text == line
        parsed = held.parse(text)
        assert parsed.task is not None and parsed.task.payload["spec"] == line
    refused = rl.parse(generation_text(rl, f"{TINY_PROMPT}minicalc2 ", REST))
    assert refused.task is None and "not in this domain's split (rl-train)" in str(refused.reason)
    # without a repository in the prompt nothing is joined: the other styles read the completion alone
    assert held.parse(generation_text(held, TINY_PROMPT, REST)).task is None
    for style in ("tiny", "instruct"):
        assert generation_text(swe(lab, "held-out", style), f"{TINY_PROMPT}minicalc2 ", REST) == REST
    assert generation_text(ArithDomain(), "Q:", "1+2") == "1+2"


class FixedScorer:
    """Hand-written fake probe scorer: every text scores logit -3."""

    def score(self, texts: Sequence[str]) -> SimpleNamespace:
        z = np.full(len(texts), -3.0)
        return SimpleNamespace(logits=z, probabilities=1 / (1 + np.exp(-z)))


def test_reward_reads_the_repository_from_the_prompt(lab: tuple[Path, Path]) -> None:
    held = swe(lab, "held-out")
    reward = HardGateReward(held, FixedScorer(), floor=-10.0, group_size=2)
    out = reward([f"{TINY_PROMPT}minicalc2 ", TINY_PROMPT], [REST, REST])
    assert out == [-3.0, -10.0]  # the same completion: a verified bug under its repository's prompt only
    assert reward.logs[-1].validity_rate == 0.5


def test_function_prompts_name_a_mutable_function_of_the_split(lab: tuple[Path, Path]) -> None:
    """``tiny-func``: the prompt carries ``REPO FILE::FUNCTION `` (a function the mutator can change, of the
    split's repositories only); the generator writes ``OPERATOR SITE`` and the line is joined back."""
    held, rl = swe(lab, "held-out", "tiny-func"), swe(lab, "rl-train", "tiny-func")
    prompts = held.generator_prompts(32, seed=0)
    assert prompts == held.generator_prompts(32, seed=0)
    targets = {f"{s.file}::{s.function}" for s in held.spec_space("minicalc2")}
    assert all(p.startswith(f"{TINY_PROMPT}minicalc2 ") and p.endswith(" ") for p in prompts), prompts
    shown = {p[len(f"{TINY_PROMPT}minicalc2 "):-1] for p in prompts}
    assert shown <= targets and len(shown) > 1, (shown, targets)
    assert all(p.startswith(f"{TINY_PROMPT}minicalc ") for p in rl.generator_prompts(8, seed=1))
    prompt = f"{TINY_PROMPT}minicalc2 minicalc/core.py::running_total "
    text = generation_text(held, prompt, "remove_assign 2")
    assert text == "minicalc2 " + REST
    parsed = held.parse(text)
    assert parsed.task is not None and parsed.task.payload["spec"] == text
