"""The OpenAI-compatible solver client against real servers: `transformers serve` running a tiny
local model on CPU, and a scripted local HTTP server for error paths."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from curriculum.common.solver_api import Sampling
from curriculum.solvers.openai_backend import OpenAICompatibleSolver, RetryPolicy
from testkit.servers import free_port, scripted_server, transformers_serve

pytestmark = pytest.mark.integration
FAST_RETRY = RetryPolicy(max_retries=2, backoff_s=0.01, max_backoff_s=0.02)


@pytest.fixture(scope="module")
def served_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    from curriculum.common.tinymodels import build_char_tokenizer, save_tiny, tiny_qwen2

    root = tmp_path_factory.mktemp("served")
    tok = build_char_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    model_dir = save_tiny(tiny_qwen2(tok, hidden_size=64, num_layers=1), tok, root / "tiny")
    with transformers_serve(model_dir, root / "serve.log") as url:
        yield url, str(model_dir)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_transformers_serve_n_samples(served_model: tuple[str, str], endpoint: str) -> None:
    url, model = served_model
    solver = OpenAICompatibleSolver(url, model, endpoint=endpoint, max_concurrency=2, retry=FAST_RETRY)  # type: ignore[arg-type]
    out = solver.generate(["1+2=", "3*4="], n=3, sampling=Sampling(max_tokens=4, temperature=1.0))
    assert [len(row) for row in out] == [3, 3]
    for row in out:
        for comp in row:
            assert comp.error is None and isinstance(comp.text, str) and comp.text
            assert comp.latency_s > 0
    assert solver.solver_id == f"openai:{model}"


def test_unknown_model_is_not_retried(served_model: tuple[str, str]) -> None:
    url, _ = served_model
    solver = OpenAICompatibleSolver(url, "/no/such/model", endpoint="completions", retry=FAST_RETRY)
    (row,) = solver.generate(["1+1="], n=2, sampling=Sampling(max_tokens=2))
    assert all(c.text is None and c.error for c in row)


def test_server_down_gives_null_completions_after_bounded_retries() -> None:
    solver = OpenAICompatibleSolver(f"http://127.0.0.1:{free_port()}/v1", "m", retry=FAST_RETRY, timeout_s=2)
    start = time.monotonic()
    out = solver.generate(["a", "b"], n=2, sampling=Sampling())
    assert time.monotonic() - start < 10
    assert [len(r) for r in out] == [2, 2]
    assert all(c.text is None and "gave up after 3 attempts" in (c.error or "") for r in out for c in r)
    assert "ConnectError" in (out[0][0].error or "")


def _choice(text: str) -> dict[str, object]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}


def test_transient_errors_are_retried_then_succeed() -> None:
    def respond(body: dict[str, object], i: int) -> tuple[int, dict[str, object]]:
        return (503, {"error": "busy"}) if i < 2 else (200, _choice("42"))

    with scripted_server(respond) as (url, seen):
        solver = OpenAICompatibleSolver(url, "m", retry=FAST_RETRY)
        (row,) = solver.generate(["q"], n=1, sampling=Sampling(seed=7, stop=("\n",)))
    assert [c.text for c in row] == ["42"]
    assert len(seen) == 3
    assert seen[0]["seed"] == 7 and seen[0]["stop"] == ["\n"] and seen[0]["n"] == 1


def test_client_errors_are_not_retried_and_malformed_is_null() -> None:
    with scripted_server(lambda body, i: (400, {"error": "bad"})) as (url, seen):
        (row,) = OpenAICompatibleSolver(url, "m", retry=FAST_RETRY).generate(["q"], 2, Sampling())
    assert len(seen) == 1 and all("HTTP 400" in (c.error or "") for c in row)
    with scripted_server(lambda body, i: (200, {"nothing": 1})) as (url, _):
        (row,) = OpenAICompatibleSolver(url, "m", retry=FAST_RETRY).generate(["q"], 1, Sampling())
    assert row[0].text is None and "malformed" in (row[0].error or "")


def test_concurrency_is_bounded() -> None:
    import threading

    active, peak = [0], [0]
    lock = threading.Lock()

    def respond(body: dict[str, object], i: int) -> tuple[int, dict[str, object]]:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return 200, _choice("x")

    with scripted_server(respond) as (url, seen):
        out = OpenAICompatibleSolver(url, "m", max_concurrency=3).generate([str(i) for i in range(12)], 1, Sampling())
    assert len(seen) == 12 and all(r[0].text == "x" for r in out)
    assert 1 <= peak[0] <= 3
