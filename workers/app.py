"""The Celery app: configured for long, idempotent tasks that write their results to the store.

* ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is acknowledged only after the task
  finished, so a worker killed mid-task (even ``kill -9``) leaves it to be redelivered.
* prefetch 1: a worker holds at most one unstarted message per process.
* the hard time limit is below the broker's visibility timeout (checked by the config), so a slow
  task is killed before Redis would hand its message to a second worker.
* results go to the store (idempotent trial rows), not to a result backend.
* Redis: every key of a run starts with :func:`key_prefix` (:func:`transport_options` says why).
* Redis only: a message a worker has popped but not yet recorded as unacked (a window of a
  round trip, in kombu's transport) is lost if that worker is killed right then. The leader
  covers it: a spot-check with no label after ``spotcheck.deadline_s`` is sent again, and the
  trial rows are idempotent. RabbitMQ has no such window.
"""

from __future__ import annotations

from celery import Celery

from workers.runtime import WorkerSettings


def queue_name(run_name: str, kind: str = "spotcheck") -> str:
    """Queues are namespaced by run so several runs can share one broker without crossing."""
    return f"propel.{run_name}.{kind}"


app = Celery("propel", include=["workers.tasks"])


def restore_interval_s(visibility_timeout_s: int) -> int:
    """Seconds between a Redis worker's sweeps for messages of dead workers (a quarter of the timeout)."""
    return max(1, visibility_timeout_s // 4)


def key_prefix(run_name: str) -> str:
    """Every Redis key of a run's messages starts with this (queues, the unacked hash and index, the sweep lock)."""
    return f"propel.{run_name}:"


def transport_options(s: WorkerSettings) -> dict[str, object]:
    """The broker transport's options.

    Redis: a killed worker's unacked message comes back once it is older than the visibility timeout, but
    kombu only sweeps every interval × throttle (10 × 10 s by default), so a short timeout alone still meant
    ~100 s of delay (measured): sweep at a quarter of it. The sweep holds a lock, and kombu keeps a dead
    holder's lock for 300 s, so a worker killed mid-sweep stopped the restores for 5 minutes: a sweep takes
    milliseconds, so a dead holder's lock lapses by the next sweep. Kombu keeps its unacked bookkeeping and
    that lock in keys of the whole database, so without a prefix a run's worker swept every run's messages
    with its own visibility timeout (a run at 8 s redelivered another's hour-long tasks after 8 s) and a
    dead sweeper of one run held up every run's restores: the keys of each run start with :func:`key_prefix`.
    """
    options: dict[str, object] = {"visibility_timeout": s.visibility_timeout_s}
    if s.broker_url.startswith(("redis://", "rediss://", "redis+socket://")):
        interval = restore_interval_s(s.visibility_timeout_s)
        options |= {"unacked_restore_interval": interval, "unacked_restore_throttle": 1,
                    "unacked_mutex_expire": interval, "global_keyprefix": key_prefix(s.run_name)}
    return options


def configure_app(s: WorkerSettings) -> Celery:
    """Point the app at the broker and set the reliability options; returns the app."""
    options = transport_options(s)
    if app.conf.broker_url and (app.conf.broker_url, app.conf.broker_transport_options) != (s.broker_url, options):
        app.close()  # drop pooled connections and producers bound to the previous broker or run (its key prefix)
        app._pool = None
        app.amqp._producer_pool = None
    app.conf.update(
        broker_url=s.broker_url,
        broker_connection_retry_on_startup=True,
        broker_transport_options=options,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=s.task_time_limit_s,
        task_soft_time_limit=max(1, int(s.task_time_limit_s * 0.9)),
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=queue_name(s.run_name),
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app
