"""``python -m curriculum.domains.swe fetch|repos|grade`` and the plain functions behind them.

``fetch`` downloads every registry repository into the cache and preflights it (idempotent: a
cached tree and a stored preflight are reused unless ``--force``); ``repos`` prints the recorded
status, reason and split of each; ``grade`` grades a candidate fix for a verified task.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from curriculum.domains.swe.cache import RepoCache
from curriculum.domains.swe.preflight import PreflightPolicy, PreflightResult, preflight_repo, write_summary
from curriculum.domains.swe.registry import RegistryError, assign_splits, load_registry
from curriculum.domains.swe.runners import get_suite_runner
from curriculum.domains.swe.sandbox import SUITE_RUNNERS


def fetch_and_preflight(cache_dir: str | Path | None = None, registry: list[str | Path] | None = None,
                        only: list[str] | None = None, runner: str = "auto", force: bool = False,
                        bundled_registry: bool = True, policy: PreflightPolicy | None = None,
                        ) -> list[PreflightResult]:
    """Fetch and preflight the registry (or the ``only`` names); writes ``<cache>/preflight.json``."""
    specs = load_registry(*(registry or []), bundled=bundled_registry)
    unknown = sorted(set(only or []) - {s.name for s in specs})
    if unknown:
        raise RegistryError(f"not in the registry: {', '.join(unknown)}")
    cache = RepoCache(cache_dir)
    suite_runner = get_suite_runner(runner)
    chosen = [s for s in specs if not only or s.name in only]
    results = [preflight_repo(cache, spec, suite_runner, policy, force) for spec in chosen]
    if not only:
        write_summary(cache, specs, results)
    return results


def format_table(results: list[PreflightResult], splits: dict[str, str]) -> str:
    rows = [f"{'repository':<26} {'split':<12} {'status':<9} {'tests':>6} {'suite_s':>8}  reason"]
    for r in results:
        rows.append(f"{r.label:<26} {splits.get(r.name, ''):<12} {r.status:<9} {r.test_count:>6} "
                    f"{r.suite_s:>8.2f}  {r.reason or ''}")
    return "\n".join(rows)


def _grade_message(args: argparse.Namespace) -> int:
    from curriculum.domains.swe.grading import grade_message

    try:
        message = json.loads(Path(args.message).read_text())
    except (OSError, json.JSONDecodeError) as err:
        print(f"error: cannot read the task message {args.message}: {err}", file=sys.stderr)
        return 2
    verdict = grade_message(message, Path(args.fix).read_text(), args.cache, args.registry or None, args.runner)
    if isinstance(verdict, str):
        print(f"error: cannot grade here: {verdict}", file=sys.stderr)
        return 2
    print({True: "solved", False: "not solved", None: "could not grade (sandbox failure)"}[verdict])
    return 0 if verdict else 1


def _grade(args: argparse.Namespace) -> int:
    from curriculum.domains.base import Task
    from curriculum.domains.swe.domain import SweDomain

    if args.message:
        return _grade_message(args)
    if not args.repo or not args.task:
        print("error: grade needs --message FILE, or --repo and --task", file=sys.stderr)
        return 2
    memo = RepoCache(args.cache).root / "tasks" / f"{args.task}.json"
    if not memo.is_file():
        print(f"error: no verified task {args.task} under {memo.parent}", file=sys.stderr)
        return 2
    record = json.loads(memo.read_text())
    payload = {**record["payload"], **{k: record["verdict"][k] for k in ("fail_to_pass", "pass_to_pass")}}
    domain = SweDomain(args.cache, args.registry, split=None, runner=args.runner)
    verdict = domain.grade(Task("swe", "", payload), Path(args.fix).read_text())
    print({True: "solved", False: "not solved", None: "could not grade (sandbox failure)"}[verdict])
    return 0 if verdict else 1


def main(argv: list[str] | None = None, prog: str = "python -m curriculum.domains.swe") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--cache", default=None,
                        help="cache directory (default: $PROPEL_SWE_CACHE, .propel/swe-cache)")
    parser.add_argument("--registry", action="append", default=[], help="extra registry TOML (repeatable)")
    parser.add_argument("--runner", default="auto", choices=SUITE_RUNNERS)
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch and preflight the registry")
    fetch.add_argument("--only", action="append", default=[], help="only this repository (repeatable)")
    fetch.add_argument("--force", action="store_true", help="re-run preflight even if stored")
    sub.add_parser("repos", help="show each repository's preflight status and split")
    grade = sub.add_parser("grade", help="grade a candidate fix for a verified task")
    grade.add_argument("--message", help="an emitted task message (JSON; or its 'grading' object)")
    grade.add_argument("--repo", help="with --task: a task verified in this cache")
    grade.add_argument("--task", help="the task's content hash")
    grade.add_argument("--fix", required=True, help="file holding the candidate diff")
    args = parser.parse_args(argv)
    try:
        specs = load_registry(*args.registry)
        if args.command == "grade":
            return _grade(args)
        if args.command == "fetch":
            results = fetch_and_preflight(args.cache, args.registry, args.only, args.runner, args.force)
        else:
            summary = RepoCache(args.cache).root / "preflight.json"
            if not summary.is_file():
                print(f"no preflight recorded at {summary}; run: python -m curriculum.domains.swe fetch")
                return 1
            rows = json.loads(summary.read_text())["repos"]
            results = [PreflightResult(r["name"], r["label"], r["hash"], r["status"], r["reason"], r["tests"],
                                       suite_s=r["suite_s"]) for r in rows]
    except (RegistryError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(results, assign_splits(specs)))
    return 0
