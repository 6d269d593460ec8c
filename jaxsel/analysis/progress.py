"""A long job's progress: which cell runs, how many are done, and about how long is left.

One line per cell, printed as it starts (or as it is loaded from an earlier, stopped run
of the job), e.g.

    [cell 5 of 12 · 4 done · 0:41 elapsed · about 1:32 left] selsync:delta=0.05, seed 1

"Left" is the mean time of the cells trained so far in this process times the cells left
(the current one included), shared among the batches a job trains at once
(analysis/batch_queue.py: their cells are numbered in the order they start, and the
counts are kept under a lock); before the first cell has finished there is nothing to go
by and the line says so. Cells loaded from their records take no time and are not counted in
the mean. A job whose cell count changes as it goes (a budget-matched row that reuses an
already trained one) lowers `total` with `skip`. A shard of the job's cells (shard.py)
counts its own share of them.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


def clock(seconds: float) -> str:
    """"1:02:03" or "2:03"."""
    s = int(round(seconds))
    h, m = divmod(s, 3600)
    m, s = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Counts a job's cells and prints a line per cell through `say`."""

    def __init__(self, total: int, say: Callable[[str], None] | None = None):
        self.planned, self._say = total, say or (lambda text: None)
        self.shard = None   # a shard (shard.py) counts its own cells of the planned ones
        self.done = 0                 # cells finished or loaded
        self.running = 0              # cells started and not finished (several batches at once)
        self.at_once = 1              # batches trained at once: the time left is shared among them
        self.trained: list[float] = []   # seconds of each cell trained in this process
        self.began = time.perf_counter()
        self._lock = threading.RLock()   # the queue's threads start and finish cells too

    def say(self, text: str) -> None:
        """Print a line (one at a time: two threads writing one stream at once can lose text)."""
        with self._lock:
            self._say(text)

    @property
    def total(self) -> int:
        """The cells this process runs or loads: all planned, or a shard's share of them."""
        if self.shard is None:
            return self.planned
        return len(range(self.shard.index, self.planned, self.shard.count))

    def head(self, count: int = 1) -> str:
        """The line's head for `count` cells starting now."""
        elapsed = time.perf_counter() - self.began
        left = self.total - self.done
        if self.trained:
            eta = f"about {clock(left * sum(self.trained) / len(self.trained) / self.at_once)} left"
        else:
            eta = "time left: known after the first cell"
        first = self.done + self.running + 1
        cells = f"cell {first}" if count == 1 else f"cells {first}-{first + count - 1}"
        return f"[{cells} of {self.total} · {self.done} done · {clock(elapsed)} elapsed · {eta}]"

    def started(self, what: str) -> int:
        """Cell `what` starts; its number."""
        with self._lock:
            self.say(f"{self.head()} {what}")
            self.running += 1
            return self.done + self.running

    def started_together(self, whats: list[str], rows: list[str] | None = None, seeds: list[int] = ()) -> int:
        """Cells `whats` start as one batch (training/cell_batch.py): one line names them all,
        as the seeds of the `rows` they belong to where the job names them ("ROW, seeds 0,
        1, 2"; two rows: "ROW; ROW, seeds 0, 1, 2"), else each. The first one's number."""
        if len(whats) == 1:
            return self.started(whats[0])
        shown = ", ".join(map(str, dict.fromkeys(seeds)))
        named = (f"{'; '.join(rows)}, seeds {shown}: {len(whats)} cells as one batch" if rows
                 else f"{len(whats)} cells as one batch: {'; '.join(whats)}")
        with self._lock:
            self.say(f"{self.head(len(whats))} {named}")
            self.running += len(whats)
            return self.done + self.running - len(whats) + 1

    def finished(self, seconds: float) -> None:
        with self._lock:
            self.done += 1
            self.running = max(0, self.running - 1)
            self.trained.append(seconds)

    def loaded(self, what: str, where: str) -> None:
        with self._lock:
            self.say(f"[cell {self.done + self.running + 1} of {self.total}] {what}: finished earlier, "
                     f"loaded from {where}/")
            self.done += 1

    def skip(self, cells: int) -> None:
        """`cells` planned cells will not run (their runs are shared with others)."""
        with self._lock:
            self.planned -= cells

    def summary(self) -> str:
        trained = len(self.trained)
        mean = f", {sum(self.trained) / trained:.1f} s per trained cell" if trained else ""
        return (f"{self.done} cells ({trained} trained now, {self.done - trained} loaded from earlier runs) in "
                f"{clock(time.perf_counter() - self.began)}{mean}")

