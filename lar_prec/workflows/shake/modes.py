"""What a shake runs, per mode, and what the modes need besides the runs.

- repeat (``--repeat N``): the same setting N times;
- threads (``--threads 1,2,4``): the same input under each ``--multithread`` count, against 1
  thread (repeated once, so run-to-run jitter is told from the thread count's);
- batch positions (``--batch-positions N``): the sample alone (repeated once), then placed at
  each position of a batch of N, the other positions filled with other data, as MegDNN's
  AccuracyShakeChecker does; each batch run's vars are cut back to the sample's slice
  (:func:`slice_dump`) before they are compared with the sample's run;
- the observer check (``--observer``): one more run that dumps the network outputs only
  (``--bin-out-dump``), compared bitwise with the dumped runs' outputs (:func:`observer_check`).
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.dumps.binary import read_binary_dump, write_binary_dump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.run.config import get_config
from lar_prec.run.inputs import PlannedInput, PreparedInputs, write_inputs
from lar_prec.run.instruments import VarValueCheck, check_var_values
from lar_prec.run.record import RunResult
from lar_prec.workflows.shake.causes import BASE, BATCH_RUN, REPEAT, THREAD_RUN

REPEAT_MODE, THREADS_MODE, BATCH_MODE = "repeat", "threads", "batch"


@dataclass(frozen=True)
class ShakeRun:
    """One planned run of a shake: its label, its role against run 1 (the roles of :mod:`.causes`),
    its own flags, the setting it changes (for people) and, for batch runs, its inputs."""

    label: str
    role: str
    flags: Tuple[str, ...] = ()
    setting: str = ""
    inputs: Optional[PreparedInputs] = None
    position: Optional[int] = None
    batch: Optional[int] = None


def plan_repeat(config: str, repeat: int) -> List[ShakeRun]:
    return [ShakeRun(f"{config}-{k}", BASE if k == 1 else REPEAT, setting=config) for k in range(1, repeat + 1)]


def parse_threads(text: str) -> Tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4): positive thread counts, 1 first (added when missing).

    Raises:
        UsageError: not a comma-separated list of positive integers.
    """
    try:
        counts = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--threads {text!r}: expected thread counts like 1,2,4") from None
    if not counts or any(c < 1 or c > 256 for c in counts):
        raise UsageError(f"--threads {text!r}: expected thread counts from 1 to 256, like 1,2,4")
    out = [1] + [c for c in dict.fromkeys(counts) if c != 1]
    if len(out) < 2:
        raise UsageError(f"--threads {text!r}: give at least one count besides 1 (e.g. 1,2,4)")
    return tuple(out)


def plan_threads(config: str, counts: Sequence[int]) -> List[ShakeRun]:
    runs = [ShakeRun("threads-1", BASE, ("--multithread", "1"), "1 thread"),
            ShakeRun("threads-1-again", REPEAT, ("--multithread", "1"), "1 thread, again")]
    runs += [ShakeRun(f"threads-{n}", THREAD_RUN, ("--multithread", str(n)), f"{n} threads") for n in counts if n != 1]
    return runs


def _filler(sample: "np.ndarray", rows: "np.ndarray", k: int, rng: "np.random.Generator") -> "np.ndarray":
    """Other data for one batch position: another row of the user's input when it has more,
    else random data of the sample's scale (integers: a permutation of the sample's values)."""
    if len(rows) > 1:
        return rows[1 + (k % (len(rows) - 1))][None]
    if np.issubdtype(sample.dtype, np.floating):
        spread = float(np.std(sample)) or 1.0
        return rng.normal(float(np.mean(sample)), spread, sample.shape).astype(sample.dtype)
    return rng.permutation(sample.reshape(-1)).reshape(sample.shape).astype(sample.dtype)


def plan_batch(config: str, n: int, prepared: PreparedInputs, adir: Path, seed: int) -> Tuple[List[ShakeRun], List[str]]:
    """The batch-position runs: the sample alone twice, then at each position of a batch of
    ``n``. The sample is each input's first row (the whole input when its batch is 1).

    Raises:
        UsageError: ``n`` below 2, or an input without a batch dimension.
    """
    if n < 2 or n > 64:
        raise UsageError(f"--batch-positions {n}: expected a batch of 2 to 64")
    notes: List[str] = []
    rng = np.random.default_rng(seed + 1)
    samples: Dict[str, Tuple["np.ndarray", "np.ndarray"]] = {}
    for item in prepared.items:
        arr = np.load(item.path, allow_pickle=False)
        if arr.ndim < 1 or arr.shape[0] < 1:
            raise UsageError(f"--batch-positions: input {item.name} ({item.path}) has no batch dimension "
                             f"(shape {arr.shape})")
        if arr.shape[0] > 1:
            notes.append(f"input {item.name} has a batch of {arr.shape[0]}: its first row is the sample, the other "
                         "rows fill the other positions")
        samples[item.name] = (arr[:1], arr)

    def inputs(folder: str, position: Optional[int]) -> PreparedInputs:
        planned = []
        for name, (sample, rows) in samples.items():
            if position is None:
                batch = sample
            else:
                parts = [sample if k == position else _filler(sample, rows, k, rng) for k in range(n)]
                batch = np.concatenate(parts, axis=0)
            planned.append(PlannedInput(name, f"{name}: batch-position shake", array=np.ascontiguousarray(batch),
                                        dtype=str(batch.dtype), shape=tuple(batch.shape)))
        return write_inputs(planned, adir / "inputs-batch" / folder)

    alone = inputs("alone", None)
    runs = [ShakeRun("batch-1", BASE, setting="the sample alone (batch 1)", inputs=alone, batch=1),
            ShakeRun("batch-1-again", REPEAT, setting="the sample alone, again", inputs=alone, batch=1)]
    runs += [ShakeRun(f"batch-{n}-at-{k}", BATCH_RUN, setting=f"position {k} of a batch of {n}",
                      inputs=inputs(f"at-{k}", k), position=k, batch=n) for k in range(n)]
    return runs, notes


def slice_dump(src: Path, dest: Path, base: DumpFolder, position: int, n: int) -> Tuple[int, List[int]]:
    """Write into ``dest`` each var of the batch run ``src`` cut back to the sample's slice
    (``position`` of a batch of ``n``), titled as in the sample's run ``base``; a var whose
    shape is the same as in ``base`` (a constant) is taken whole. Returns (vars written, ids
    left out: not in ``base``, another name, or no batch dimension to cut)."""
    dest.mkdir(parents=True, exist_ok=True)
    folder = DumpFolder(src)
    written, skipped = 0, []
    for vid, path in folder.files().items():
        if vid not in base:
            skipped.append(vid)
            continue
        d, b = folder[vid], base[vid]
        if d.var.name != b.var.name:
            skipped.append(vid)
            continue
        shape, want = tuple(d.shape), tuple(b.shape)
        if shape == want:
            shutil.copyfile(path, dest / Path(path).name)
        elif len(shape) == len(want) and shape[0] == n and want[0] == 1 and shape[1:] == want[1:]:
            arr = np.asarray(d.array())[position:position + 1]
            write_binary_dump(dest / Path(path).name, np.ascontiguousarray(arr), b.title, dtype=d.dtype.code)
        else:
            skipped.append(vid)
            continue
        written += 1
    return written, skipped


# ---------------------------------------------------------------------------- observer

_OUT_NAME = re.compile(r"^run(\d+)-(?:var|out)(-?\d+)$")
_TITLE_NAME = re.compile(r"name:([^,}]*)")


def read_outputs(out_dir: Path) -> Dict[str, Path]:
    """Output name -> file of the last execution in a ``--bin-out-dump`` folder
    (``run<k>-var<id>`` as load_and_run writes it; the bundled runner writes
    ``run<k>-out<index>``: it does not know var ids); the name is read from the title."""
    last: Dict[str, Tuple[int, Path]] = {}
    for p in sorted(out_dir.iterdir()):
        m = _OUT_NAME.match(p.name)
        if not m or not p.is_file():
            continue
        title = read_binary_dump(p).title
        nm = _TITLE_NAME.search(title)
        name = nm.group(1).strip() if nm else p.name
        k = int(m.group(1))
        if name not in last or last[name][0] <= k:
            last[name] = (k, p)
    return {name: p for name, (_, p) in last.items()}


def observer_check(out_dir: Path, base: DumpFolder, digests: Mapping[str, Mapping[int, str]],
                   digest: "callable") -> Dict[str, object]:
    """The observer check: each output of the run without ``--bin-io-dump`` against the same
    var in the dumped runs (``digests``: label -> var id -> digest). An output equal to any
    dumped run's is unperturbed (the dumped runs may jitter among themselves)."""
    outs = read_outputs(out_dir)
    by_name = {base.var_info(v).name: v for v in base.files()}
    rows = []
    for name, p in sorted(outs.items()):
        vid = by_name.get(name)
        if vid is None:
            rows.append({"name": name, "id": None, "equal": None, "why": "no var of that name in run 1's dump"})
            continue
        got = digest(p)
        same = sorted(lbl for lbl, ds in digests.items() if ds.get(vid) == got)
        row: Dict[str, object] = {"name": name, "id": vid, "equal": bool(same), "same_as": same}
        if not same:
            a = np.asarray(read_binary_dump(p).array()).astype(np.float64)
            b = np.asarray(base[vid].array()).astype(np.float64)
            if a.shape == b.shape:
                row["max_abs_err"] = float(np.max(np.abs(a - b))) if a.size else 0.0
        rows.append(row)
    compared = [r for r in rows if r["equal"] is not None]
    differs = [r for r in compared if not r["equal"]]
    return {"checked": bool(compared), "outputs": rows, "differs": bool(differs),
            "summary": (f"the dump perturbs the run: {len(differs)} of {len(compared)} outputs without --bin-io-dump "
                        f"differ from every run with it ({', '.join(str(r['name']) for r in differs[:3])})"
                        if differs else
                        f"the dump does not perturb the run: {len(compared)} outputs without --bin-io-dump are "
                        "bitwise equal to a run with it" if compared else
                        "observer check inconclusive: no output of the run without --bin-io-dump matched a dumped var")}


def remove_tree(path: Path) -> int:
    """Remove a folder; returns the bytes freed."""
    freed = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                freed += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)
    return freed


# ---------------------------------------------------------------------------- in-process check

#: a shake of this many runs or more gets MegEngine's in-process check after its first run
LONG_SHAKE = 10


def in_process_check(shk: Any, first: RunResult) -> Optional[VarValueCheck]:
    """MegEngine's VarValueChecker (``--check-var-value``) in one process of the user's binary,
    every variable compared between executions, before the rest of a long shake: a race or a
    read of unwritten memory inside one process, told apart from what differs between
    processes. None for the bundled runner (megenginelite has no such plugin), a device, a
    short shake, or a check that could not run (its folder says why)."""
    lar = shk.prep.lar
    if lar is None or lar.is_bundled or shk.remote or shk.mode != REPEAT_MODE or len(shk.plan) < LONG_SHAKE:
        return None
    cfg = get_config(shk.config)
    try:
        n = len(DumpFolder(first.dump_dir))
        return check_var_values(lar, shk.prep.model, shk.prep.inputs.input_arg, n, shk.prep.dir / "in-process-check",
                                flags=shk.flags, env=cfg.env_dict(), timeout=float(shk.prep.settings.timeout or 600))
    except (LarPrecError, OSError):
        return None
