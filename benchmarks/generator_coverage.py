"""What the untrained generator offers a solver of each skill (issue #36): can a gate find its frontier there?

Samples the bootstrapped tiny arith generator (the one ``follow_trainer`` and ``closed_loop`` run on) before any
RL, and scores each valid task by its exact probability of landing in band (1-3 of 8) for the synthetic
learner at skills 2 … 8. Per skill: the mean over all valid tasks (what an unfiltered draw serves), the best
quarter (what a perfect gate emitting a quarter would serve) and the share of tasks above 0.5. A served
in-band share below the mean says the gate picks worse than no gate; one far below the best quarter says
the gate, not the generator, is the bound.

    python -m benchmarks.generator_coverage [--samples 1024] [--generator-steps 300]
"""

from __future__ import annotations

import statistics
from pathlib import Path

import click

from benchmarks._common import RESULTS, write_result

SKILLS = (2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)


def coverage(valid: list[str], skill: float) -> dict[str, float]:
    """Mean, best-quarter and above-0.5 share of the tasks' exact in-band probability at ``skill``."""
    from curriculum.solvers.synthetic import SyntheticArithSolver
    from testkit.follow_trainer import in_band_probability

    judge = SyntheticArithSolver(offset=skill, seed=0)
    ps = sorted((in_band_probability(judge, t) for t in valid), reverse=True)
    quarter = ps[:max(1, len(ps) // 4)]
    return {"skill": skill, "mean": round(statistics.mean(ps), 4), "best_quarter": round(statistics.mean(quarter), 4),
            "share_above_half": round(sum(p > 0.5 for p in ps) / len(ps), 4)}


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    x = [r["skill"] for r in rows]
    ax.plot(x, [r["mean"] for r in rows], marker="o", label="all valid (no gate)")
    ax.plot(x, [r["best_quarter"] for r in rows], marker="o", label="best quarter (a perfect gate)")
    ax.axhline(0.25, ls="--", color="tab:red", label="#36 goal 0.25")
    ax.set(xlabel="solver skill (synthetic learner)", ylabel="exact P(1-3 of 8)",
           title="the untrained generator's tasks, in band by skill")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@click.command()
@click.option("--samples", type=click.IntRange(64), default=1024, show_default=True, help="generator samples")
@click.option("--generator-steps", type=int, default=300, show_default=True,
              help="bootstrap steps of the generator (300: the one follow_trainer and closed_loop run on)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel/bench-follow"), show_default=True,
              help="where the tiny generator is cached (follow_trainer's cache)")
@click.option("--seed", type=int, default=7, show_default=True)
def main(samples: int, generator_steps: int, data_dir: Path, seed: int) -> None:
    """Exact in-band of the untrained generator's valid tasks for a solver of each skill."""
    import torch

    from curriculum.domains.base import get_domain
    from curriculum.rl.bootstrap import bootstrap, load_bootstrapped, sample_completions

    torch.set_num_threads(1)
    path = bootstrap("arith", data_dir=data_dir.absolute() / "models", steps=generator_steps,
                     show_progress=False).path
    model, tok = load_bootstrapped(path)
    checks = get_domain("arith").validate_batch(sample_completions(model, tok, samples, seed=seed))
    valid = [v.task.text for v in checks if v.valid]
    rows = [coverage(valid, s) for s in SKILLS]
    for r in rows:
        click.echo(f"skill {r['skill']:.0f}: in band, all valid {r['mean']:.3f}, best quarter {r['best_quarter']:.3f}, "
                   f"share above 0.5 {r['share_above_half']:.3f}")
    write_result("generator_coverage", {"generator_steps": generator_steps, "samples": samples,
                                        "valid": len(valid), "seed": seed, "band": "1-3 of 8", "skills": rows,
                                        "synthetic": "SYNTHETIC learner: exact probabilities, a sanity instrument"})
    plot(rows, RESULTS / "generator_coverage.png")


if __name__ == "__main__":
    main()
