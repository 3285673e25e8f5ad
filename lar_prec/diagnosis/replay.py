"""A repro folder for one root: the one-operator model, its inputs, both outputs, the commands.

:func:`make_repro` writes, for a var of a :class:`~lar_prec.local.LocalResult`::

    repro-<id>/
      model.mge        the operator alone (built with its inputs cut, like the layerwise model)
      inputs/*.npy     its inputs: the reference run's values
      reference.npy    the reference output;  observed.npy  the output under the test config
      repro.json       the var, the configurations, the commands, the local error seen
      README.md        what it is and how to run it (bundled and a real load_and_run)

:func:`replay` (``python -m lar_prec.diagnosis.replay DIR``) runs it again in fresh processes and says
whether the divergence is reproduced: the output under the test configuration equals the
observed one bit for bit, and its error against the reference is the one recorded.
"""
from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Collection, Dict, List, Optional, Sequence

from lar_prec._lazy import numpy as np
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.relayout import to_plain
from lar_prec.diagnosis.local import (
    DEFAULT_TIMEOUT,
    build_layerwise,
    child_env,
    layout_fmt,
    megengine_rel,
    output_ids,
    run_child,
    write_feeds,
)
from lar_prec.diagnosis.local_records import LocalResult
from lar_prec.diagnosis.repro_check import ALGO_CACHE, SCHEMA, ReproRecord, load_npy, private_copy, read_record
from lar_prec.diagnosis.floors import LocalVerdict, local_roots
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import json_number
from lar_prec.run.config import RunConfig, get_config
from lar_prec.run.config import resolve_load_and_run

@dataclass(frozen=True)
class Repro:
    """A written repro folder."""

    dir: Path
    var_id: int
    name: str
    opr_type: str
    local_err: float


@dataclass(frozen=True)
class ReplayResult:
    """What running a repro folder again gave."""

    dir: Path
    err: float
    recorded_err: float
    observed_bitwise: bool
    reference_bitwise: Optional[bool]

    @property
    def reproduced(self) -> bool:
        """The test output is the observed one, bit for bit (so the error is the same)."""
        return self.observed_bitwise


def _env_prefix(cfg: RunConfig) -> str:
    parts = [f"{k}={shlex.quote(v)}" for k, v in cfg.env if v is not None]
    unset = [k for k, v in cfg.env if v is None]
    return ("env " + " ".join([f"-u {k}" for k in unset] + parts) + " ") if (parts or unset) else ""


def run_commands(inputs: str, cfg: RunConfig, out: str) -> Dict[str, str]:
    """The bundled and the real load_and_run command lines (run inside the repro folder)."""
    flags = " ".join(shlex.quote(f) for f in cfg.flags)
    flags = (" " + flags) if flags else ""
    env = _env_prefix(cfg)
    return {
        "bundled": f"{env}python -m lar_prec.lar model.mge --input {shlex.quote(inputs)} --iter 1 "
                   f"--warmup-iter 0 --bin-io-dump {out}/{flags}",
        "load_and_run": f"mkdir -p {out} && {env}load_and_run model.mge --input {shlex.quote(inputs)} --iter 1 "
                        f"--warmup_iter 0 --bin_io_dump {out}/{flags.replace('--fast-run', '--fast_run')}",
    }


def make_repro(result: LocalResult, var_id: int, out_dir: "str | Path", *,
               reference_config: "str | RunConfig" = "naive", timeout: float = DEFAULT_TIMEOUT,
               test_config: "RunConfig | None" = None) -> Repro:
    """Write the repro folder of var ``var_id`` of ``result`` into ``out_dir``. ``test_config``:
    the configuration the layerwise run had, when ``result.config`` is only its description
    (sweep: default kernels plus an option's flags).

    Raises:
        UsageError: the var was not measured, its observed output is not in the reference's
        shape (an option's layout), or ``out_dir`` exists and is not empty.
    """
    lw = result.layerwise
    m = lw.var(var_id)
    row = result.by_id()[var_id]
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"repro folder {out} exists and is not empty; give a new folder")
    one = build_layerwise(lw.source_model, result.ref_dump, out / "build", only=var_id, timeout=timeout)
    shutil.move(str(one.path), str(out / "model.mge"))
    shutil.move(str(out / "build" / "layerwise.json"), str(out / "layerwise.json"))
    shutil.rmtree(out / "build", ignore_errors=True)
    ref = DumpFolder(result.ref_dump)
    write_feeds(one, ref, out / "inputs")
    inputs = ";".join(f"{f.name}:inputs/{f.name}.npy" for f in one.feeds)
    want = np.asarray(ref[m.ref_id].array())
    local = DumpFolder(result.local_dump)
    seen = np.asarray(local[output_ids(local)[var_id]].array())
    if seen.shape != want.shape:  # replay compares element by element: no relayout there
        shutil.rmtree(out, ignore_errors=True)
        raise UsageError(f"the observed output of var {var_id} has shape {seen.shape}, the reference's "
                         f"{want.shape} (another layout): no repro")
    np.save(out / "reference.npy", want)
    np.save(out / "observed.npy", seen)
    test_cfg, ref_cfg = test_config or get_config(result.config), get_config(reference_config)
    test_cfg = _carry_algo_cache(test_cfg, out)
    record = {
        "schema": SCHEMA, "var": {"id": m.id, "name": m.name, "opr": m.opr, "opr_type": m.opr_type,
                                  "output": m.output, "shape": list(m.shape), "dtype": m.dtype},
        # strict JSON (replay refuses NaN/Infinity): a non-finite error is null, said in words
        "local_err": json_number(row.local_err), "entire_err": json_number(row.entire_err), "inputs": inputs,
        "local_err_text": (None if json_number(row.local_err) is not None or row.local_err is None
                           else str(row.local_err)),
        "source_model": str(lw.source_model), "ref_dump": str(result.ref_dump),
        "observed_with": _observed_with(result),
        "test": {"name": test_cfg.name, "flags": list(test_cfg.flags), "env": [list(e) for e in test_cfg.env],
                 "commands": run_commands(inputs, test_cfg, "dump-test")},
        "reference": {"name": ref_cfg.name, "flags": list(ref_cfg.flags), "env": [list(e) for e in ref_cfg.env],
                      "commands": run_commands(inputs, ref_cfg, "dump-reference")},
    }
    atomic_write_text(out / "repro.json", json_text(record), what="repro record")
    atomic_write_text(out / "README.md", _readme(record), what="repro README")
    return Repro(out, m.id, m.name, m.opr_type, float(row.local_err or 0.0))


def _carry_algo_cache(cfg: RunConfig, out: Path) -> RunConfig:
    """A fast-run test configuration pins its algorithms with a cache file: the repro carries a
    copy under a fixed name and its flags name that (replay accepts no other path)."""
    flags = list(cfg.flags)
    for i, f in enumerate(flags):
        name, eq, value = f.partition("=")
        if name.lstrip("-").replace("-", "_") != "fast_run_algo_policy":
            continue
        src = value if eq else (flags[i + 1] if i + 1 < len(flags) else "")
        if src and Path(src).is_file():
            shutil.copyfile(src, out / ALGO_CACHE)
            if eq:
                flags[i] = f"{name}={ALGO_CACHE}"
            else:
                flags[i + 1] = ALGO_CACHE
    return replace(cfg, flags=tuple(flags))


def _observed_with(result: LocalResult) -> Optional[str]:
    """The load_and_run (and device) that gave ``observed.npy``: the layerwise run's."""
    if not result.runs:
        return None
    run = result.runs[0]
    lar = run.load_and_run.get("path") or "bundled lar_prec.lar"
    return f"{lar} on {run.remote['target']}" if run.remote else str(lar)


def make_repros(result: LocalResult, out_dir: "str | Path", verdict: Optional[LocalVerdict] = None, *,
                limit: int = 10, timeout: float = DEFAULT_TIMEOUT, reference_config: "str | RunConfig" = "naive",
                test_config: "RunConfig | None" = None, errors: Optional[List[str]] = None,
                only: Optional[Collection[int]] = None) -> List[Repro]:
    """A repro folder ``out_dir/repro-<id>`` for each local root (most likely first, at most
    ``limit``: each costs a model load and a one-operator dump). ``<id>`` is the report's id
    (the reference dump's), which a binary numbering vars unlike MegEngine's Python graph does
    not share with the layerwise model. With ``errors`` a repro that cannot be written is a
    line there (the analysis stands without it), not an exception. ``only`` (report ids): the
    roots to write, e.g. a shake's jitter roots among every operator local error sees differ;
    when none of them is a local root, the most likely local root alone."""
    verdict = verdict or local_roots(result)
    written: List[Repro] = []
    ref_ids = [(r, result.layerwise.var(r.id).ref_id) for r in verdict.roots]
    ref_ids = [(r, r.id if rid is None else rid) for r, rid in ref_ids]
    if only is not None:
        ref_ids = [(r, rid) for r, rid in ref_ids if rid in only] or ref_ids[:1]
    for r, rid in ref_ids[:limit]:
        try:
            written.append(make_repro(result, r.id, Path(out_dir) / f"repro-{rid}", timeout=timeout,
                                      reference_config=reference_config, test_config=test_config))
        except LarPrecError as exc:
            if errors is None:
                raise
            errors.append(f"repro of var {rid} ({r.name}) not written: {exc}")
    return written


def _num(x: Optional[float], text: Optional[str] = None) -> str:
    return text or ("not finite or unknown" if x is None else format(x, ".6g"))


def _readme(r: Dict) -> str:
    v = r["var"]
    return f"""# Repro of var {v['id']} `{v['name']}` ({v['opr_type']})

Under `{r['test']['name']}`, this operator alone, fed with the reference run's exact inputs
(`inputs/`), gives `observed.npy`; the reference (`{r['reference']['name']}`) gives
`reference.npy`. Its local error (MegEngine's metric, max |a-b|/max(|a|,|b|,1)) was
{_num(r['local_err'], r.get('local_err_text'))}; the accumulated error of this var in the whole model was
{_num(r['entire_err'])}.

Source model: `{r['source_model']}`; reference dump: `{r['ref_dump']}`.
`observed.npy` came from {r.get('observed_with') or 'the bundled load_and_run'}; `lar-prec replay .`
runs the bundled one, `lar-prec replay . --lar PATH` runs PATH for the test side (a divergence
made by another binary reproduces there, or with its command below).

Run inside this folder:

    # test configuration, bundled load_and_run (lar-prec on PYTHONPATH)
    {r['test']['commands']['bundled']}
    # reference configuration
    {r['reference']['commands']['bundled']}
    # the same with a real MegEngine load_and_run build
    {r['test']['commands']['load_and_run']}
    {r['reference']['commands']['load_and_run']}

The output is the var named `{v['output']}` in the dump. `lar-prec replay .` (or
`python -m lar_prec.diagnosis.replay .`) runs both and says whether the divergence is reproduced: exit
1 when it is, 0 when it is not.
"""


def replay(repro_dir: "str | Path", *, reference: bool = True, timeout: float = DEFAULT_TIMEOUT,
           lar: "str | None" = None) -> ReplayResult:
    """Run a repro folder again (fresh processes) and compare. ``lar``: the load_and_run of
    the test side (the binary whose kernels are in question; default: the bundled one); the
    reference side always runs the bundled one.

    The folder is data (it may come from anyone): ``repro.json`` is checked and each side's
    configuration rebuilt from its name and allowed flags (:mod:`.repro_check`), and the runs
    work on a private copy of the files, so nothing is written into the folder and nothing in
    it runs. The copy is removed afterwards, or kept (and named) when a run failed.

    Raises:
        UsageError: ``repro_dir`` is not a repro folder, or holds a value, link or file that a
        repro lar-prec wrote would not (exit 2, nothing run); RunError: a run failed.
    """
    d = Path(repro_dir)
    if not d.is_dir():
        raise UsageError(f"{d}: expected a repro folder (repro-<id>/ written by lar-prec); nothing was run")
    rec = read_record(d)
    prefix = resolve_load_and_run(lar).argv_prefix if lar is not None else None
    work = Path(tempfile.mkdtemp(prefix="lar-prec-replay-"))
    keep = False
    try:
        private_copy(d, rec, work)
        want = load_npy(work / "reference.npy", d / "reference.npy")
        seen = load_npy(work / "observed.npy", d / "observed.npy")
        try:
            test = _run(work, d, rec, "test", timeout, prefix, want.shape)
            if test.shape != want.shape:  # another model than the one the outputs came from
                raise UsageError(f"{d / 'model.mge'}: its output has shape {test.shape}, reference.npy's is "
                                 f"{want.shape}; expected the model these outputs came from")
            ref_bitwise = None
            if reference:
                got_ref = _run(work, d, rec, "reference", timeout, want_shape=want.shape)
                ref_bitwise = got_ref.shape == want.shape and got_ref.tobytes() == want.tobytes()
        except LarPrecError as exc:
            keep = exc.exit_code != 2  # a failed run: its logs stay in the working copy
            if keep:
                exc.args = (f"{exc} (working copy kept: {work})",) + exc.args[1:]
            raise
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return ReplayResult(d, megengine_rel(test, want), rec.local_err,
                        test.shape == seen.shape and test.tobytes() == seen.tobytes(), ref_bitwise)


def _run(work: Path, d: Path, rec: ReproRecord, side: str, timeout: float,
         prefix: "Optional[Sequence[str]]" = None, want_shape: "Optional[Sequence[int]]" = None) -> "np.ndarray":
    cfg = rec.test if side == "test" else rec.reference
    dump = work / f"dump-{side}"
    items = ";".join(f"{name}:{work / file}" for name, file in rec.inputs)
    flags = [str(work / ALGO_CACHE) if f == ALGO_CACHE else f.replace(f"={ALGO_CACHE}", f"={work / ALGO_CACHE}")
             for f in cfg.flags]
    argv = [*(prefix or (sys.executable, "-m", "lar_prec.lar")), str(work / "model.mge"), "--input", items,
            "--iter", "1", "--warmup-iter", "0", "--bin-io-dump", str(dump), *flags]
    dump.mkdir(exist_ok=True)  # MegEngine's load_and_run writes into it, never makes it
    run_child(argv, child_env(cfg.env_dict()), timeout, f"the repro in {d} under {cfg.name}", work / f"log-{side}")
    folder = DumpFolder(dump)
    vid = output_ids(folder).get(rec.var_id)
    if vid is None:  # a reduced model (lar-prec reduce) keeps its vars' names: the last one so named
        vid = next((x.id for x in reversed(list(folder)) if x.var.name == rec.output), None)
    if vid is None:
        raise UsageError(f"{d}: the run did not dump {rec.output}")
    arr = np.asarray(folder[vid].array())
    if want_shape is not None and tuple(arr.shape) != tuple(want_shape):  # a packed layout (nhwcd4): back to plain
        plain, _how = to_plain(arr, tuple(want_shape), fmt=layout_fmt(cfg.flags))
        arr = arr if plain is None else np.ascontiguousarray(plain)
    return arr


def replay_verdict(r: ReplayResult) -> "tuple[int, str]":
    """(exit code, one line) of a replay: 1 when the divergence is reproduced (the test
    output is the recorded one bit for bit and differs from the reference, or is not bit for
    bit but at least half the recorded error away from it), 0 when not."""
    reproduced = r.reproduced and r.err > 0
    # not bit for bit but the same divergence (a graph-rewriting option sees the one-operator
    # graph, not the layerwise one): reproduced, and said so
    close = not r.reproduced and r.recorded_err > 0 and r.err >= r.recorded_err / 2
    head = ("reproduced" if reproduced else "reproduced, not bit for bit" if close
            else "no divergence to reproduce" if r.reproduced else "NOT reproduced")
    reproduced = reproduced or close
    ref = ("reproduced" if r.reference_bitwise else "differs" if r.reference_bitwise is False else "not run")
    return (1 if reproduced else 0), (
        f"{head}: error {r.err:.6g} (recorded {r.recorded_err:.6g}); test output "
        f"{'reproduced bit for bit' if r.observed_bitwise else 'differs from the recorded one'}; reference {ref}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m lar_prec.diagnosis.replay DIR`` (as ``lar-prec replay DIR``): 1 when the divergence
    is reproduced, 0 when not, 2 for a folder that is not a repro, 3 when a run failed."""
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m lar_prec.diagnosis.replay REPRO_DIR\n")
        return 2
    try:
        r = replay(args[0])
    except LarPrecError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return exc.exit_code
    code, line = replay_verdict(r)
    sys.stdout.write(line + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
