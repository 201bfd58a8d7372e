"""Runs shared by workers over PostgreSQL: ``planexec submit`` (or :func:`planexec.runs.submit`)
queues a goal with its agent's spec; any number of :class:`Worker` processes, on any machines that
reach the same database, claim queued runs under leases they renew, run them, and take over the
runs of a worker that died once its leases expire — resuming them from the log, so finished steps
never run again and each effect happens once.

    from planexec.workers import Worker, WorkerSettings
    worker = Worker(PostgresStore(url), WorkerSettings(concurrency=8, lease_seconds=15))
    await worker.run()          # until worker.drain() (``planexec worker``: on SIGTERM)
"""

from planexec.workers._worker import Worker, WorkerFailed, WorkerSettings, WorkerStats

__all__ = ["Worker", "WorkerFailed", "WorkerSettings", "WorkerStats"]
