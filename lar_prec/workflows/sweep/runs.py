"""The runs of a sweep: a thread pool, each run a fresh process (:class:`Runner`); a run that
fails is a finding, in words a user acts on (:func:`run_status`, :func:`plain_load_failure`)."""
from __future__ import annotations

import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from lar_prec.errors import LarPrecError, RunError, UsageError
from lar_prec.run.config import LoadAndRun
from lar_prec.run.inputs import PreparedInputs
from lar_prec.run.once import run_once
from lar_prec.run.record import RunResult
from lar_prec.run.steps import RECORD_DUMP_WORDS
from lar_prec.workflows.shake.algos import verbose_flags


def run_status(exc: BaseException) -> Tuple[str, str, Optional[RunResult]]:
    """(status, one short reason, record) of a run that failed; the run's folder is in the
    option's record and the whole message in its run.json."""
    rec: Optional[RunResult] = exc.result if isinstance(exc, LarPrecError) else None
    status = rec.status if rec is not None else "failed"
    kind = {"timeout": "hung", "stalled": "stalled", "crashed": "crashed"}.get(status, "load_failed")
    msg = str(exc).split(" -- hint:")[0]
    if kind == "hung" and rec is not None and rec.timeout:
        msg = f"did not finish within {rec.timeout:g} s (killed with its process group)"
    else:  # the run's folder is reported next to the reason: drop it from the message
        msg = re.sub(r" in run '[^']*' \([^)]*\)", "", msg)
    if kind == "load_failed":
        msg = plain_load_failure(msg)
    if rec is not None and (rec.error or "").startswith(RECORD_DUMP_WORDS):
        # not the option's precision: the dump of record mode itself (MegEngine's load_and_run)
        return "skipped", f"{RECORD_DUMP_WORDS}: its precision is not judged by dumps here (see {rec.dir})", rec
    return kind, msg, rec


#: MegEngine's load failures a user can act on, in words: (pattern of its message, what it means)
_LOAD_FAILURES = (
    (re.compile(r"ConvertF32ToF16Pass|dtype\(\) == dtype::Float16\(\)"),
     "the float16 rewrite cannot convert this model's tensors (quantized or integer operators)"),
    (re.compile(r"(?i)nhwcd4.*group|group.*nhwcd4"), "nhwcd4 does not support this grouped convolution here"),
    (re.compile(r"(?i)nchw44.*group|group.*nchw44"), "nchw44 does not support this grouped convolution here"),
    (re.compile(r"(?i)unsupported|not support"), "MegEngine does not support this option for this model here"),
)


def plain_load_failure(msg: str) -> str:
    """A load failure in words a user acts on, with MegEngine's own line shortened after it
    (the whole message stays in the run's run.json)."""
    raw = msg.split(": ", 1)[-1] if msg.startswith("load_and_run failed") else msg
    short = raw if len(raw) <= 160 else raw[:157] + "..."
    for pattern, words in _LOAD_FAILURES:
        if pattern.search(msg):
            return f"{words} (MegEngine: {short}; all of it in run.json)"
    return f"the model did not load under this option (MegEngine: {short}; all of it in run.json)"


class Runner:
    """Runs of one sweep: a thread pool, each run a fresh process; failures become results."""

    def __init__(self, model: Path, prepared: PreparedInputs, adir: Path, lar: LoadAndRun,
                 timeout: float, extra_flags: Sequence[str], jobs: int, remote: Any = None) -> None:
        self.model, self.prepared, self.adir, self.lar, self.remote = model, prepared, adir, lar, remote
        self.timeout, self.extra_flags = timeout, tuple(extra_flags)
        self.pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="lar-prec-sweep")
        self.runs: List[RunResult] = []
        self.lock = threading.Lock()

    def submit(self, config: str, label: str, flags: Sequence[str]) -> Future:
        # default kernels choose by heuristic: --verbose logs each choice (analysis.run_algorithms)
        more = verbose_flags(self.extra_flags + tuple(flags)) if config == "default" else ()
        return self.pool.submit(self._one, config, label, tuple(flags) + more)

    def _one(self, config: str, label: str, flags: Tuple[str, ...]) -> Tuple[RunResult, str, str, Optional[LarPrecError]]:
        """(record, status, message, the run's error); an error without a record (the
        folder could not be made) is raised."""
        error: Optional[LarPrecError] = None
        try:
            rec = run_once(self.model, self.prepared, config, self.adir, lar=self.lar, timeout=self.timeout,
                           extra_flags=self.extra_flags + flags, label=label, remote=self.remote)
            status, msg = "runs", ""
        except (RunError, UsageError) as exc:
            status, msg, found = run_status(exc)
            if found is None:
                raise
            rec, error = found, exc
        with self.lock:
            self.runs.append(rec)
        return rec, status, msg, error
