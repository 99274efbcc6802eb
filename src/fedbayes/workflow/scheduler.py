"""Snakemake's scheduler woken by one timer at a time.

With its job-rate limit (on by default: 100 jobs in a 1 s window) Snakemake's scheduler ends every pass
in which jobs wait for a core by starting a timer that wakes it again a window later
(``JobScheduler._schedule_reevalutation``). Every pass does so, including those the timers start, so the
timers multiply with each finished job, and each pass stats the inputs of every waiting job. On the smoke
DAG (231 jobs, 2 cores) that was 13,401 passes and 142 s of the scheduler's own CPU in a 321 s build
(the upstream report: snakemake/snakemake pull request 3744). Here a pass starts a timer only when none is
pending, so the rate limit is still looked at again a window later, and the timer is a daemon thread, so
the process does not wait for it at its end. The Snakefile installs this before any scheduler exists."""

from __future__ import annotations

import threading


def one_pending_reevaluation() -> bool:
    """Replace ``JobScheduler._schedule_reevalutation`` (Snakemake 9) by a version that keeps at most one
    pending wake-up; False (nothing changed) where that method is not there or was replaced already."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return False
    current = getattr(JobScheduler, "_schedule_reevalutation", None)
    if current is None or getattr(current, "one_pending", False):
        return False

    def _schedule_reevalutation(self, delay) -> None:
        if getattr(self, "_pending_wakeup", None) is not None:
            return   # a wake-up is due already: it looks at the rate limit again

        def wake() -> None:
            self._pending_wakeup = None   # before the release: a pass it starts may schedule the next one
            self._open_jobs.release()

        timer = threading.Timer(delay, wake)
        timer.daemon = True
        self._pending_wakeup = timer
        timer.start()

    _schedule_reevalutation.one_pending = True
    JobScheduler._schedule_reevalutation = _schedule_reevalutation
    return True
