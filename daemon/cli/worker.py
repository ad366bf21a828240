"""``propel worker``: a Celery worker for spot-checks and aux-probe retrains."""

from __future__ import annotations

import click

JOB_KINDS = ("spotcheck", "retrain")


@click.command("worker")
@click.option("--concurrency", "-c", type=click.IntRange(1, 256), default=None,
              help="worker processes (default: broker.worker_concurrency)")
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@click.option("--queues", "-Q", "kinds", default="spotcheck,retrain", show_default=True,
              help="comma-separated job kinds to consume: spotcheck (solver attempts), retrain (aux probes)")
@click.option("--pool", type=click.Choice(["prefork", "threads", "solo"]), default="prefork", show_default=True,
              help="prefork for HTTP solvers; solo/threads for an in-process GPU solver")
@click.pass_context
def worker(ctx: click.Context, concurrency: int | None, loglevel: str, kinds: str, pool: str) -> None:
    """Run a Celery worker for the run's spot-checks and aux-probe retrains.

    It consumes ``propel.<run_name>.spotcheck`` (solver attempts with the configured solver) and
    ``propel.<run_name>.retrain`` (aux-probe training on the frozen reference) on broker.url; use
    --queues to split them, e.g. retrain workers on a GPU host and spot-check workers elsewhere.
    Needs broker.url and the shared store (PostgreSQL) — no shared filesystem: the reference model and
    the trained probes travel through the artifact store (artifacts.url, the database by default).
    A worker killed mid-task leaves its message to be redelivered; the re-run only writes what is missing.
    """
    from daemon.cli.common import get_config
    from daemon.service.settings import check_endpoints, worker_settings
    from workers import runtime
    from workers.app import configure_app, queue_name

    wanted = [k.strip() for k in kinds.split(",") if k.strip()]
    if not wanted or set(wanted) - set(JOB_KINDS):
        raise click.BadParameter(f"{kinds!r}: choose from {', '.join(JOB_KINDS)}", param_hint="--queues")
    from kombu import Connection

    cfg = get_config(ctx)
    settings = worker_settings(cfg)
    if "spotcheck" in wanted:
        check_endpoints(cfg, generator=False)  # a swe-agent solver's endpoint: one line now, not null trials later
    with Connection(settings.broker_url, connect_timeout=5) as conn:  # unreachable: one line, not a retry loop
        conn.ensure_connection(max_retries=1, timeout=5)
    runtime.configure(settings)
    app = configure_app(settings)
    if "retrain" in wanted:
        runtime.preload_model_libraries()  # once, before the pool forks: not inside the first job's time limit
    queues = ",".join(queue_name(cfg.run_name, k) for k in wanted)
    n = concurrency or cfg.broker.worker_concurrency
    app.worker_main(argv=["worker", f"--loglevel={loglevel}", f"--concurrency={n}", f"--queues={queues}",
                          f"--pool={pool}", "--prefetch-multiplier=1", "--without-gossip", "--without-mingle",
                          f"--hostname=propel-{cfg.run_name}-%h-{__import__('os').getpid()}"])
