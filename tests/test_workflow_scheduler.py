"""fedbayes.workflow.scheduler: Snakemake's scheduler keeps one pending wake-up, not one per pass."""

import threading
import time

from snakemake.scheduling.job_scheduler import JobScheduler

from fedbayes.workflow.scheduler import one_pending_reevaluation


class Passes:
    """What the replaced method touches of a JobScheduler: its semaphore of wake-ups."""

    def __init__(self):
        self._open_jobs = threading.Semaphore(0)

    def woken(self, expected: int) -> int:
        """The wake-ups: ``expected`` of them, each waited for as long as a busy machine needs, then any more
        that come within 0.3 s (a late extra one makes the count low, never a test fail on a slow machine)."""
        n = sum(self._open_jobs.acquire(timeout=30) for _ in range(expected))
        while self._open_jobs.acquire(timeout=0.3):
            n += 1
        return n


def test_many_passes_asking_for_a_wake_up_get_one_and_the_next_after_it(monkeypatch):
    monkeypatch.setattr(JobScheduler, "_schedule_reevalutation", JobScheduler._schedule_reevalutation)
    s = Passes()
    for _ in range(50):   # upstream: a timer a pass, so 50 wake-ups a window later (each pass then starts its own)
        JobScheduler._schedule_reevalutation(s, 0.05)
    assert s.woken(50) == 50
    assert one_pending_reevaluation() is True and one_pending_reevaluation() is False
    for _ in range(50):
        JobScheduler._schedule_reevalutation(s, 0.05)
    t0 = time.monotonic()
    assert s.woken(1) == 1 and time.monotonic() - t0 >= 0.04
    JobScheduler._schedule_reevalutation(s, 0.05)   # after it fired, a pass asks for the next one
    assert s.woken(1) == 1


def test_a_pending_wake_up_does_not_keep_the_process_alive(monkeypatch):
    monkeypatch.setattr(JobScheduler, "_schedule_reevalutation", JobScheduler._schedule_reevalutation)
    one_pending_reevaluation()
    s = Passes()
    JobScheduler._schedule_reevalutation(s, 60)
    assert s._pending_wakeup.daemon
    s._pending_wakeup.cancel()
