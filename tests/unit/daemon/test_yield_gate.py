"""``api.yield_to_api``: the gate holds training work while the queue API is busy, never longer than
``yield_max_s`` in a row, then lets the work run its floor share; off, it is a no-op.

The gate logic runs on an injected clock whose ``sleep`` advances it (no real waiting, no timing
assertions); the model hook is checked on a real tiny ``transformers`` model (and its PEFT wrapper).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest
import torch

from daemon.http.pressure import ApiPressure
from daemon.service import yielding
from daemon.service.yielding import NoGate, YieldGate, gate_models


class FakeClock:
    """A clock that only moves when the gate sleeps; ``during`` runs an action after every sleep until a time
    (e.g. a trainer's requests answered back to back)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.actions: list[tuple[float, Callable[[], None]]] = []

    def __call__(self) -> float:
        return self.now

    def during(self, until: float, action: Callable[[], None]) -> None:
        self.actions.append((until, action))

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds
        for until, action in self.actions:
            if self.now <= until + 1e-9:
                action()


def _gate(clock: FakeClock, held: list[float] | None = None) -> tuple[YieldGate, ApiPressure]:
    pressure = ApiPressure(clock=clock)
    sink = held if held is not None else []
    return YieldGate(pressure, idle_s=0.1, max_hold_s=2.0, floor=0.2, sleep=clock.sleep, on_held=sink.append), pressure


def test_idle_api_never_holds() -> None:
    clock = FakeClock()
    gate, pressure = _gate(clock)
    assert gate.wait() == 0.0  # no request yet
    pressure.mark()
    clock.now += 0.1
    assert gate.wait() == 0.0 and clock.sleeps == []


def test_busy_api_holds_until_it_has_been_idle_for_idle_ms() -> None:
    clock = FakeClock()
    held: list[float] = []
    gate, pressure = _gate(clock, held)
    pressure.mark()
    clock.during(clock.now + 0.3, pressure.mark)  # requests answered back to back for 0.3 s
    assert gate.wait() == pytest.approx(0.4)  # 0.3 s of requests + 0.1 s idle
    assert held == [pytest.approx(0.4)] and max(clock.sleeps) <= yielding.SLICE_S
    assert gate.wait() == 0.0  # idle now


def test_a_request_that_just_ended_holds_for_the_rest_of_idle_ms() -> None:
    clock = FakeClock()
    gate, pressure = _gate(clock)
    pressure.mark()
    clock.now += 0.04
    assert gate.wait() == pytest.approx(0.06)


def test_busy_forever_releases_after_max_hold_then_runs_its_floor_share() -> None:
    clock = FakeClock()
    gate, pressure = _gate(clock)
    pressure.mark()
    clock.during(float("inf"), pressure.mark)  # a trainer that never pauses
    assert gate.wait() == pytest.approx(2.0)
    run_s = 2.0 * 0.2 / 0.8
    assert gate.run_s == pytest.approx(run_s)
    clock.now += run_s / 2
    pressure.mark()
    assert gate.wait() == 0.0  # within the free-running period: no hold
    clock.now += run_s / 2
    pressure.mark()
    assert gate.wait() == pytest.approx(2.0)  # held again
    assert gate.holds == 2 and gate.held_s == pytest.approx(4.0)


def test_close_releases_and_disables_the_gate() -> None:
    pressure = ApiPressure()
    gate = YieldGate(pressure, idle_s=3600, max_hold_s=3600, floor=0.5)
    pressure.mark()  # busy for an hour: only close() can release the worker
    result: list[float] = []
    worker = threading.Thread(target=lambda: result.append(gate.wait()))
    worker.start()
    gate.close()
    worker.join(timeout=30)
    assert not worker.is_alive() and len(result) == 1
    assert gate.wait() == 0.0


def test_holds_are_logged_at_most_every_log_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    gate, pressure = _gate(clock)
    pressure.mark()
    clock.during(float("inf"), pressure.mark)
    with caplog.at_level(logging.INFO, logger="propel.service"):
        gate.wait()  # 2 s after start: too early to log
        assert not caplog.records
        clock.now += yielding.LOG_EVERY_S
        pressure.mark()
        gate.wait()
    [record] = caplog.records
    assert "training yielded 4.0 s to the API in 2 holds over the last 34 s" in record.getMessage()


@pytest.mark.parametrize("kwargs", [{"idle_s": 0}, {"max_hold_s": 0}, {"floor": 0}, {"floor": 1}])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    settings = {"idle_s": 0.1, "max_hold_s": 2.0, "floor": 0.2, **kwargs}
    with pytest.raises(ValueError, match="0 < floor < 1"):
        YieldGate(ApiPressure(), settings["idle_s"], settings["max_hold_s"], settings["floor"])


class CountingGate:
    def __init__(self) -> None:
        self.calls = 0

    def wait(self) -> float:
        self.calls += 1
        return 0.0

    def close(self) -> None:
        pass


def _tiny_model() -> torch.nn.Module:
    from curriculum.common.tinymodels import build_char_tokenizer, tiny_qwen2

    return tiny_qwen2(build_char_tokenizer(), hidden_size=16, num_layers=1, num_heads=2)


def test_no_gate_installs_no_hook() -> None:
    model = _tiny_model()
    assert gate_models(NoGate(), model) == []
    assert not any(m._forward_pre_hooks for m in model.modules())


def test_every_forward_pass_meets_the_gate_plain_and_under_peft() -> None:
    from curriculum.rl.config import LoraSettings
    from curriculum.rl.model import attach_lora

    gate = CountingGate()
    ids = torch.tensor([[5, 6, 7]])
    plain = _tiny_model()
    handles = gate_models(gate, plain)
    plain(input_ids=ids)
    assert len(handles) == 2 and gate.calls >= 1  # the causal-LM model and its backbone
    peft = attach_lora(_tiny_model(), LoraSettings(rank=2, alpha=4, dropout=0.0))
    gate_models(gate, peft)
    before = gate.calls
    peft(input_ids=ids)  # PEFT calls the outer forward directly: the backbone's hook fires
    assert gate.calls > before
    for handle in handles:
        handle.remove()
    before = gate.calls
    plain(input_ids=ids)
    assert gate.calls == before


class RecordingGate(CountingGate):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_run_loop_meets_the_gate_before_each_phase_and_closes_it_at_the_end() -> None:
    from daemon.config import PropelConfig
    from daemon.loop.driver import CycleReport
    from daemon.service.lifecycle import RunOptions, run_loop

    gate = RecordingGate()
    seen: list[int] = []

    class Driver:
        cycle = 0

        def state(self) -> tuple[str, int, None]:
            return "rl", self.cycle, None

        def tick(self) -> CycleReport:
            seen.append(gate.calls)  # the gate was met before the phase ran
            self.cycle += 1
            return CycleReport("rl", self.cycle - 1, 0.0, {})

    cfg = PropelConfig.model_validate({"daemon": {"tick_interval_s": 0.05}})
    assert run_loop(Driver(), cfg, RunOptions(cycles=2, gate=gate), threading.Event()) == 0  # type: ignore[arg-type]
    assert seen == [1, 2] and gate.closed
