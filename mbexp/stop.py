"""Stopping a run between steps: SIGINT/SIGTERM (and a job scheduler's preemption signal) become a flag."""

import logging
import signal
import threading

log = logging.getLogger("mbexp")


class StopRequest:
    """Turns SIGINT/SIGTERM into a flag checked between steps, so a stop never tears a step in half.
    A second Ctrl-C interrupts at once. Under submitit, its preemption signal (SIGUSR2) is held the
    same way, and handed on to submitit (which requeues the job) once the checkpoint is written."""

    def __init__(self):
        self.requested = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
            if callable(signal.getsignal(signal.SIGUSR2)):  # a job scheduler's handler is installed
                self._previous[signal.SIGUSR2] = signal.signal(signal.SIGUSR2, self._handle)
        return self

    def hand_on(self) -> None:
        """Call the handler this stop request displaced (submitit's requeue), if it was SIGUSR2."""
        if self.requested == "SIGUSR2":
            self._previous[signal.SIGUSR2](signal.SIGUSR2, None)

    def _handle(self, signum, frame):
        if self.requested is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        log.warning("%s received: stopping after this step (checkpoint kept; rerun the same command to resume)",
                    self.requested)

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
