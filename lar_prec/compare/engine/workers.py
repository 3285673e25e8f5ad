"""How the engine's tasks run: the settings record, the execution strategy and the executors.

:class:`EngineSettings` holds every tuning knob of the streaming engine (chunk and piece
sizes, when to go parallel, the mapping window, the strategy, whether to use the C kernel);
pass one to :func:`lar_prec.compare.compare_folders` instead of changing module constants.

The strategy is an explicit choice (:class:`Strategy`) resolved by :func:`resolve_strategy`
from the settings, ``jobs`` and the data size only: a terminal (progress bar, its refresh
thread) and a pipe get the same one. ``fork`` runs tasks on forked workers and this process
(:func:`run_shared`); progress is reported from this process's main thread as results
arrive, so a progress bar never changes how the work runs. ``thread`` uses a thread pool
(:class:`ThreadWorkers`), ``serial`` this process alone.
"""
from __future__ import annotations

import contextlib
import os
import queue as _queue
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Callable, ContextManager, Iterator, List, Optional, Sequence, Tuple

from lar_prec import errors
from lar_prec.errors import DumpFormatError, UsageError

#: values per chunk: 32 Ki float32 values keep one worker's buffers (~1 MB) in its L2 cache,
#: which measured faster than bigger chunks despite more Python calls per byte
DEFAULT_CHUNK = 1 << 15

#: with several workers, pieces of fewer values than this are compared in the main process
SMALL_TASK_ELEMENTS = 1 << 16

#: with several workers, vars are split into ranges of this many values (8 MB of float32)
PIECE_ELEMENTS = 1 << 21

#: below this many bytes (both folders) a comparison runs in one process: starting workers
#: would cost more than it saves
PARALLEL_MIN_BYTES = 48 << 20

#: bytes of one file mapped at a time: a window is unmapped before the next is mapped, so the
#: resident pages (RSS) stay bounded whatever the size of the var
WINDOW_BYTES = 8 << 20


class Strategy(str, Enum):
    """How the engine runs its tasks when it has more than one worker."""

    #: ``fork`` where the platform can fork, else ``thread``
    AUTO = "auto"
    #: everything in this process
    SERIAL = "serial"
    #: forked worker processes plus this process, taking tasks from one shared list
    FORK = "fork"
    #: a thread pool (numpy and the C kernel release the GIL for part of the work)
    THREAD = "thread"


@dataclass(frozen=True)
class EngineSettings:
    """Every knob of the streaming engine; results never depend on them (only speed and
    memory do). Defaults are the measured best on the benchmark machine."""

    #: values read per chunk; memory per worker is about 30 bytes times this
    chunk_elements: int = DEFAULT_CHUNK
    #: with several workers, vars are split into ranges of this many values
    piece_elements: int = PIECE_ELEMENTS
    #: with several workers, pieces smaller than this stay in the main process
    small_task_elements: int = SMALL_TASK_ELEMENTS
    #: comparisons of fewer bytes (both folders) run serially whatever ``jobs`` says
    parallel_min_bytes: int = PARALLEL_MIN_BYTES
    #: bytes of a file mapped at a time
    window_bytes: int = WINDOW_BYTES
    strategy: Strategy = Strategy.AUTO
    #: use the one-pass C kernel for float32 when it is built (False: the numpy path)
    kernel: bool = True
    #: with the kernel, read each pair of small files once and measure it in C, on threads
    #: (engine/batch.py; False: the Python reader and engine for every var)
    batch: bool = True

    def __post_init__(self) -> None:
        for name in ("chunk_elements", "piece_elements", "window_bytes"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("small_task_elements", "parallel_min_bytes"):
            if getattr(self, name) < 0:
                raise UsageError(f"{name} must be >= 0, got {getattr(self, name)}")
        try:
            object.__setattr__(self, "strategy", Strategy(self.strategy))
        except ValueError:
            raise UsageError(f"strategy must be one of {', '.join(s.value for s in Strategy)}, got {self.strategy!r}") from None


def can_fork() -> bool:
    """True where worker processes can be forked (not spawned: spawn would re-import the
    caller's __main__)."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def default_jobs(jobs: Optional[int]) -> int:
    """``jobs`` as given, or for None one worker per CPU, at most 8."""
    return jobs if jobs is not None else min(8, os.cpu_count() or 1)


def resolve_strategy(settings: EngineSettings, jobs: Optional[int], total_bytes: int) -> Tuple[int, Strategy]:
    """(workers, strategy) for ``jobs`` (None: one per CPU, at most 8) and this much data.

    Depends on nothing else: not on a terminal, a progress bar or other threads.

    Raises:
        UsageError: ``jobs`` < 1, or ``fork`` asked for where the platform cannot fork.
    """
    jobs = default_jobs(jobs)
    if jobs < 1:
        raise UsageError(f"jobs must be >= 1, got {jobs}")
    st = settings.strategy
    if jobs == 1 or total_bytes < settings.parallel_min_bytes or st == Strategy.SERIAL:
        return 1, Strategy.SERIAL
    if st == Strategy.FORK and not can_fork():
        raise UsageError("strategy 'fork' is not available on this platform: use 'thread'")
    if st == Strategy.AUTO:
        st = Strategy.FORK if can_fork() else Strategy.THREAD
    return jobs, st


class Failure:
    """An exception raised in a worker, carried back by value: lar-prec's errors have
    keyword constructors that pickle cannot rebuild."""

    def __init__(self, exc: BaseException) -> None:
        self.cls = type(exc).__name__
        self.message = str(exc)
        self.fields = {k: getattr(exc, k) for k in ("path", "offset", "expected", "found") if hasattr(exc, k)}
        self.trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def reraise(self) -> None:
        """Raise the worker's error here (a RuntimeError with its traceback if it was not
        a lar-prec error)."""
        if self.cls == "DumpFormatError" and {"path", "expected"} <= set(self.fields):
            f = self.fields
            raise DumpFormatError(f["path"], f.get("offset"), f["expected"], f.get("found", ""))
        cls = getattr(errors, self.cls, None)
        if isinstance(cls, type) and issubclass(cls, errors.LarPrecError):
            try:
                raise cls(self.message)
            except TypeError:
                raise errors.LarPrecError(self.message) from None
        raise RuntimeError(f"lar-prec worker failed:\n{self.trace}")


def guarded(call: Tuple[Callable[..., object], tuple]) -> object:
    """``fn(*args)``, or a :class:`Failure` carrying what it raised."""
    fn, args = call
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - carried back to the parent and re-raised there
        return Failure(exc)


class ThreadWorkers:
    """Runs functions over argument tuples on a thread pool (or here with ``n == 1``),
    results in order. Tasks of fewer than ``small`` values run in the calling thread."""

    def __init__(self, n: int, small: int = SMALL_TASK_ELEMENTS) -> None:
        self.n = n
        self.small = small
        self.pool: Optional[ThreadPoolExecutor] = None

    def __enter__(self) -> "ThreadWorkers":
        if self.n > 1:
            self.pool = ThreadPoolExecutor(max_workers=self.n, thread_name_prefix="lar-prec")
        return self

    def map(self, fn: Callable[..., object], args: Sequence[tuple], sizes: Optional[Sequence[int]] = None) -> Iterator[object]:
        """``fn(*a)`` for every ``a``, results in order (``sizes``: values per task)."""
        if self.pool is None:
            return (fn(*a) for a in args)
        futures = {}
        for i, a in enumerate(args):
            if sizes is None or sizes[i] >= self.small:
                futures[i] = self.pool.submit(guarded, (fn, a))

        def results() -> Iterator[object]:
            for i, a in enumerate(args):
                f = futures.pop(i, None)
                r = f.result() if f is not None else fn(*a)
                if isinstance(r, Failure):
                    r.reraise()
                yield r

        return results()

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def run_shared(
    fn: Callable[..., object], args: Sequence[tuple], n_forked: int, on_result: Optional[Callable[[int], None]] = None,
    sink: Optional[Callable[[int, object], None]] = None, forked_limit: Optional[int] = None,
    local: Optional[ContextManager[object]] = None,
) -> List[object]:
    """``[fn(*a) for a in args]`` on this process and ``n_forked`` forked ones.

    The tasks form one list that forked workers take from the front and this process from
    the back, one at a time under a shared lock, until they meet: every CPU stays busy, the
    load balances itself whatever the task sizes, and only indices and small results cross
    processes (a worker has the task list from the fork). ``on_result(i)`` is called here,
    on the calling thread, as results arrive; with ``sink``, each result is handed to
    ``sink(i, result)`` instead of being kept (the list returned is then all None). Forked
    workers take only tasks before ``forked_limit``. Errors in a worker are re-raised here.
    ``local`` is entered around this process's share of the work, once the workers run
    (the engine's numpy error state: numpy need not be imported before the fork).

    Safe to call while other threads run (a progress bar's refresh thread): a worker only
    computes and puts results on its queue, and leaves with ``os._exit`` without flushing
    stdio, so no lock another thread held at the fork is ever taken in it.

    Longer than 80 lines on purpose: the workers' loop, the parent's loop and the result
    handling share the lock, the bounds and the queue through closures (a fork copies
    them), and split into functions they would need the same state passed around.
    """
    n = len(args)
    out: List[object] = [None] * n
    keep: Callable[[int, object], None] = sink if sink is not None else out.__setitem__
    local = local if local is not None else contextlib.nullcontext()
    if n_forked == 0:
        with local:
            for i, a in enumerate(args):
                keep(i, fn(*a))
                if on_result is not None:
                    on_result(i)
        return out

    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    lock = ctx.Lock()
    bounds = ctx.RawArray("q", [0, n])  # [next task from the front, end of the untaken tasks]
    results = ctx.Queue()
    limit = n if forked_limit is None else forked_limit

    def take(front: bool) -> int:
        with lock:
            lo, hi = bounds[0], bounds[1]
            if lo >= hi or (front and lo >= limit):
                return -1
            if front:
                bounds[0] = lo + 1
                return lo
            bounds[1] = hi - 1
            return hi - 1

    def work() -> None:
        code = 1
        try:
            while True:
                i = take(True)
                if i < 0:
                    break
                results.put((i, guarded((fn, args[i]))))
            code = 0
        finally:
            results.put(None)
            results.close()
            results.join_thread()
            os._exit(code)  # no atexit, no stdio flush: see the docstring

    procs = [ctx.Process(target=work, daemon=True) for _ in range(n_forked)]
    finished = 0

    def store(item: object) -> None:
        nonlocal finished
        if item is None:
            finished += 1
            return
        i, r = item  # type: ignore[misc]
        if isinstance(r, Failure):
            r.reraise()
        keep(i, r)
        if on_result is not None:
            on_result(i)

    try:
        for p in procs:
            p.start()
        with local:
            while True:
                i = take(False)
                if i < 0:
                    break
                keep(i, fn(*args[i]))
                if on_result is not None:
                    on_result(i)
                while True:  # what the workers finished meanwhile (keeps the pipe from filling)
                    try:
                        store(results.get_nowait())
                    except _queue.Empty:
                        break
        while finished < len(procs):
            store(results.get())
    finally:
        for p in procs:
            if p.is_alive() and finished < len(procs):
                p.terminate()
            p.join()
    return out
