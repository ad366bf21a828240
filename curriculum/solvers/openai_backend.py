"""Solver backend for any OpenAI-compatible server: vLLM (`vllm serve`), SGLang, `transformers serve`.

This is how labs serve solvers. For each prompt we ask for ``n`` samples in one request; servers
that return fewer choices (``transformers serve`` ignores ``n``) are topped up with further
requests. Requests run concurrently up to ``max_concurrency``. Only named transient failures are
retried, with exponential backoff: connection refused/reset, timeouts, HTTP 429 and 5xx. Any other
HTTP error (400, 401, 404, 422 …) is a configuration problem and is not retried. When the last
retry fails, the missing samples come back as ``Completion(text=None, error=…)`` — the spot-check
pipeline records them as ``null`` trials with that reason instead of crashing.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from curriculum.common.solver_api import Completion, Sampling

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class SolverRequestError(Exception):
    """A request that failed for good (non-transient status, or retries exhausted)."""


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay_s(self, attempt: int) -> float:
        """Exponential backoff with ±25 % jitter for retry number ``attempt`` (0-based)."""
        base = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        return float(base * random.uniform(0.75, 1.25))


class OpenAICompatibleSolver:
    """A solver behind ``/v1/completions`` or ``/v1/chat/completions``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        endpoint: Literal["completions", "chat"] = "chat",
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_concurrency: int = 8,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.endpoint = endpoint
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.retry = retry or RetryPolicy()
        self.solver_id = f"openai:{model}"

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        """``n`` completions per prompt; failed samples are ``Completion(None, error=…)``."""
        return asyncio.run(self._generate(prompts, n, sampling))

    async def _generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=self.max_concurrency)
        sem = asyncio.Semaphore(self.max_concurrency)
        async with httpx.AsyncClient(base_url=self.base_url, headers=headers, limits=limits,
                                     timeout=self.timeout_s) as client:
            jobs = [self._samples(client, sem, p, n, sampling) for p in prompts]
            return list(await asyncio.gather(*jobs))

    async def _samples(self, client: httpx.AsyncClient, sem: asyncio.Semaphore, prompt: str, n: int,
                       sampling: Sampling) -> list[Completion]:
        out: list[Completion] = []
        while len(out) < n:
            async with sem:
                start = time.perf_counter()
                try:
                    texts = await self._request(client, prompt, n - len(out), sampling)
                except SolverRequestError as err:
                    latency = time.perf_counter() - start
                    out += [Completion(None, error=str(err), latency_s=latency)] * (n - len(out))
                    break
                latency = time.perf_counter() - start
            if not texts:
                out += [Completion(None, error="server returned no choices", latency_s=latency)] * (n - len(out))
                break
            out += [Completion(t, latency_s=latency / len(texts)) for t in texts[: n - len(out)]]
        return out

    def _body(self, prompt: str, n: int, sampling: Sampling) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "n": n, "temperature": sampling.temperature,
                                "top_p": sampling.top_p, "max_tokens": sampling.max_tokens}
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    async def _request(self, client: httpx.AsyncClient, prompt: str, n: int, sampling: Sampling) -> list[str]:
        path = "/chat/completions" if self.endpoint == "chat" else "/completions"
        body = self._body(prompt, n, sampling)
        last = "no attempt made"
        for attempt in range(self.retry.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.retry.delay_s(attempt - 1))
            try:
                resp = await client.post(path, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout, httpx.WriteTimeout,
                    httpx.PoolTimeout, httpx.RemoteProtocolError, httpx.ReadError) as err:
                last = f"{type(err).__name__}: {err or 'no detail'}"
                continue
            if resp.status_code in TRANSIENT_STATUS:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code >= 400:
                raise SolverRequestError(f"HTTP {resp.status_code} from {self.base_url}{path} "
                                         f"(not retried): {resp.text[:300]}")
            return self._texts(resp)
        raise SolverRequestError(f"gave up after {self.retry.max_retries + 1} attempts: {last}")

    def _texts(self, resp: httpx.Response) -> list[str]:
        try:
            choices = resp.json()["choices"]
            if self.endpoint == "chat":
                return [str(c["message"]["content"] or "") for c in choices]
            return [str(c["text"]) for c in choices]
        except (ValueError, KeyError, TypeError) as err:
            raise SolverRequestError(f"malformed response from {self.base_url}: {err!r}") from None
