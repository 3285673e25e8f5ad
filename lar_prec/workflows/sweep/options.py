"""The options a sweep tries (:class:`SweepOption`, :func:`parse_options`) and the records of
what each did (:class:`OptionResult`) and of the whole sweep (:class:`SweepResult`)."""
from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.compare.tolerance import OutputTolerance, arithmetic_dtype
from lar_prec.diagnosis.local_bounds import compute_dtype
from lar_prec.errors import UsageError
from lar_prec.run.record import RunResult
from lar_prec.workflows.common.nondeterminism import Nondeterminism
from lar_prec.workflows.sweep.local import OptionLocal
from lar_prec.workflows.sweep.speed import OptionSpeed, SweepSpeed

#: seconds a run may take in a sweep unless told otherwise (some options hang at load)
DEFAULT_TIMEOUT = 120.0
#: the name of the plain default run's record (no option: what a user deploys today)
DEFAULT_NAME = "default"


@dataclass(frozen=True)
class SweepOption:
    """One load_and_run option a sweep can try.

    ``group``: layout, fp16, fusion or runtime. ``needs``: what the model must have for the
    option to do anything (``conv``: it only rewrites convolutions), "" when always applies.
    ``fmt``: the operator format the option lays tensors out in (settles ambiguous shapes).
    """

    name: str
    flags: Tuple[str, ...]
    group: str
    needs: str = ""
    fmt: Optional[str] = None

    @property
    def fp16(self) -> bool:
        return self.group == "fp16"

    @property
    def compute_dtype(self) -> Optional[str]:
        """The dtype float operators compute in under this option (None: the model's own)."""
        return compute_dtype(self.flags)

    def arithmetic(self, output_dtypes: Sequence[str]) -> str:
        """The dtype this option's outputs are computed in (its tolerance's band)."""
        return arithmetic_dtype(output_dtypes, self.compute_dtype)


#: the plain default run as a sweep runs it: no option (its tolerance is float32's band, level 0)
PLAIN_DEFAULT = SweepOption(DEFAULT_NAME, (), "default")


def _layout(name: str, fmt: Optional[str]) -> SweepOption:
    return SweepOption(name, (f"--enable-{name}",), "layout", "conv", fmt)


#: every option a sweep knows, by the name ``--options`` takes
OPTIONS: Dict[str, SweepOption] = {o.name: o for o in (
    _layout("nchw88", "NCHW88"),
    _layout("nchw44", "NCHW44"),
    _layout("nchw44-dot", "NCHW44_DOT"),
    _layout("nhwcd4", "NHWCD4"),
    _layout("nchw4", "NCHW4"),
    _layout("nchw32", "NCHW32"),
    _layout("nchw64", "NCHW64"),
    _layout("chwn4", "CHWN4"),
    SweepOption("layout-transform", ("--layout-transform", "cpu"), "layout", "conv"),
    SweepOption("ioc16", ("--enable-ioc16",), "fp16"),
    SweepOption("io16xc32", ("--enable-io16xc32",), "fp16"),
    SweepOption("fuse-conv-bias-nonlinearity", ("--enable-fuse-conv-bias-nonlinearity",), "fusion", "conv"),
    SweepOption("fuse-conv-bias-with-z", ("--enable-fuse-conv-bias-with-z",), "fusion", "conv"),
    SweepOption("optimize-for-inference", ("--optimize-for-inference",), "fusion"),
    SweepOption("fuse-grain", ("--fuse-grain",), "fusion"),
    SweepOption("weight-preprocess", ("--weight-preprocess",), "runtime"),
    SweepOption("fuse-preprocess", ("--enable-fuse-preprocess",), "runtime"),
    SweepOption("const-shape", ("--const-shape",), "runtime"),
    SweepOption("record-comp-seq", ("--record-comp-seq",), "runtime"),
    SweepOption("record-comp-seq2", ("--record-comp-seq2", "--no-sanity-check"), "runtime"),
)}

_COMMON = ("ioc16", "io16xc32", "fuse-conv-bias-nonlinearity", "fuse-conv-bias-with-z", "weight-preprocess",
           "fuse-preprocess", "const-shape", "record-comp-seq")
#: the default set per CPU family: its layouts, then fp16, fusion and runtime options
DEFAULT_OPTIONS: Dict[str, Tuple[str, ...]] = {
    "x86": ("nchw88", "nchw44", "nchw44-dot", "nhwcd4", "layout-transform") + _COMMON,
    "arm": ("nchw44", "nchw44-dot", "nhwcd4", "layout-transform") + _COMMON,
}

#: operator types that make ``needs="conv"`` options apply
CONV_OPRS = frozenset({"ConvolutionForward", "ConvBiasForward", "ConvBias", "Convolution"})


def cpu_family() -> str:
    """``x86`` or ``arm``, for the default option set."""
    m = platform.machine().lower()
    return "arm" if m.startswith(("arm", "aarch")) else "x86"


def parse_options(spec: Union[str, Sequence[str], None]) -> Tuple[SweepOption, ...]:
    """``--options`` (comma-separated names, or a list; None: the default set of this CPU).

    Raises UsageError naming the unknown option and listing the known ones.
    """
    if spec is None:
        names: List[str] = list(DEFAULT_OPTIONS[cpu_family()])
    else:
        items = [spec] if isinstance(spec, str) else list(spec)
        # every spelling of load_and_run's flag names one option: ioc16, --enable-ioc16, enable_ioc16
        names = [n.strip().lstrip("-").replace("_", "-") for item in items for n in str(item).split(",") if n.strip()]
        names = [n[len("enable-"):] if n.startswith("enable-") and n not in OPTIONS else n for n in names]
    if not names:
        raise UsageError("--options is empty; expected names such as nhwcd4,ioc16 (see lar-prec sweep --help)")
    out: List[SweepOption] = []
    for n in names:
        if n not in OPTIONS:
            raise UsageError(f"unknown sweep option {n!r}; expected one of {', '.join(OPTIONS)}")
        if OPTIONS[n] not in out:
            out.append(OPTIONS[n])
    return tuple(out)


def _nonfinite(x: Optional[float]) -> bool:
    return x is not None and not (x == x and abs(x) != float("inf"))


@dataclass(frozen=True)
class OptionResult:
    """What one option did (or the plain default run did: ``option`` ``default``, no flags).

    ``status``: ``runs``, ``load_failed``, ``crashed`` (a signal), ``hung`` (killed at the
    timeout), ``stalled`` (alive but using no CPU: ended after a grace period) or ``skipped``
    (does not apply: ``reason``). ``verdict``: ``ok``, ``as_default`` (what it shows is what
    the plain default run shows: the same local roots, its output within the tolerance of the
    default run's), ``diverges`` (it adds something) or None (did not run). ``cause``: for a
    divergent option, ``kernel wrong under this option``, ``option changes the math``, both
    joined by ``and``, or why it could not be told.
    ``tolerance``: the outputs' tolerance (``output_tolerance``: the one rule of
    :mod:`lar_prec.compare.tolerance`; every paired var is held to it by the dumps).
    ``errors``: reference var name -> max_err (the option-by-variable view).
    ``default_err``: the outputs' error against the plain default run's; ``default_diverges``:
    some var of the option's run differs from the default run's past the tolerance, from
    ``default_root`` on. ``added_roots``/``shared_roots``: its local roots the default run
    does not have / has.
    ``local``: local error under the option (:class:`lar_prec.workflows.sweep.local.OptionLocal`; None
    when the option did not run). ``root_rule``: ``local`` when the root and verdict come from
    local error, ``output`` when from the output's tolerance (no local root), ``dump`` when
    from the dumps alone; ``dump_root`` keeps the dump-only root (id in the rewritten graph,
    reference id, name, operator type, max_err).
    """

    option: str
    flags: Tuple[str, ...]
    status: str
    tolerance: float
    verdict: Optional[str] = None
    reason: str = ""
    vars_paired: int = 0
    vars_total: int = 0
    output_err: Optional[float] = None
    worst_err: Optional[float] = None
    root_id: Optional[int] = None  # var id in the option's (rewritten) graph
    root_ref_id: Optional[int] = None  # the same var's id in the reference graph
    root_name: Optional[str] = None
    root_opr_type: Optional[str] = None
    root_err: Optional[float] = None
    cause: Optional[str] = None
    naive_vs_default_err: Optional[float] = None
    naive_vs_reference_err: Optional[float] = None
    kernel_root_name: Optional[str] = None
    unpaired_a: Tuple[Tuple[int, str, str], ...] = ()
    unpaired_b: Tuple[Tuple[int, str, str], ...] = ()
    errors: Tuple[Tuple[str, Optional[float]], ...] = ()
    #: reference var names over their tolerance (decided once, by the comparison)
    over: Tuple[str, ...] = ()
    run_dir: Optional[str] = None
    naive_run_dir: Optional[str] = None
    seconds: float = 0.0
    local: Optional[OptionLocal] = None
    root_rule: str = "dump"
    dump_root: Optional[Tuple[Optional[int], Optional[int], str, str, Optional[float]]] = None
    #: the run dumped none of the model's outputs: nothing was compared there, never an all-clear
    output_unseen: bool = False
    output_tolerance: Optional[OutputTolerance] = None
    default_err: Optional[float] = None
    default_diverges: bool = False
    default_root: Optional[Tuple[Optional[int], Optional[int], str, str, Optional[float]]] = None
    added_roots: Tuple[str, ...] = ()
    shared_roots: Tuple[str, ...] = ()
    #: its outputs' line in words that follow its verdict against the reference (run_verdict)
    output_verdict: str = ""
    #: the run made once more where it diverges: the same bits or not (workflows.common.nondeterminism)
    nondeterminism: Optional[Nondeterminism] = None
    #: var name -> the algorithm its operator ran, from the run's --verbose log (MegEngine's
    #: algorithm chooser, heuristic choices included; shake.algos.verbose_algorithms)
    algorithms: Tuple[Tuple[str, str], ...] = ()
    #: its timed runs (workflows.sweep.speed): time per iteration, speed-up against the default run
    speed: Optional[OptionSpeed] = None

    @property
    def finding(self) -> bool:
        """True when this option is something to act on: diverges, crashed, hung, stalled, did
        not load or left an unreadable dump, or loaded but crashed, hung or stalled in a timed
        run (a skipped option, which does not apply, is not)."""
        return self.verdict == "diverges" or self.status in ("crashed", "hung", "stalled", "load_failed", "bad_dump") \
            or (self.speed is not None and self.speed.status in ("crashed", "hung", "stalled"))

    def precision_words(self) -> str:
        """Its precision verdict in a few words, for beside its speed."""
        if self.status != "runs":  # e.g. record mode under MegEngine's load_and_run: loads, cannot dump
            return f"precision not judged ({self.status.replace('_', ' ')})"
        if self.verdict == "diverges":
            return f"breaks {self.root_name}" if self.root_name else "diverges"
        return {"ok": "within tolerance", "as_default": "as the default run"}.get(self.verdict or "", "not judged")

    def trade_words(self) -> str:
        """``nchw44: 1.8x faster (1.6x to 2.0x), within tolerance``: its speed beside its precision
        ("" when it was not timed)."""
        s = self.speed
        if s is None:
            return ""
        speed = s.words()
        if s.measurable and s.low is not None:
            speed += f" ({s.low:.2f}x to {s.high:.2f}x)"
        return f"{self.option}: {speed}, {self.precision_words()}"

    def severity(self) -> Tuple[int, float]:
        """Sort key, worst first: diverges, crashed, stalled, hung, load failed, as default, ok, skipped."""
        rank = {"crashed": 1, "stalled": 2, "hung": 2, "bad_dump": 3, "load_failed": 3, "skipped": 6}.get(self.status, 5)
        if self.verdict == "diverges":
            rank = 0
        elif self.verdict == "as_default":
            rank = 4
        err = self.output_err if self.output_err is not None else (self.worst_err or 0.0)
        return rank, -float(err)

    def to_json(self) -> Dict[str, Any]:
        dr, df, tol = self.dump_root, self.default_root, self.output_tolerance
        return {
            "option": self.option, "flags": list(self.flags), "status": self.status, "verdict": self.verdict,
            "reason": self.reason, "tolerance": self.tolerance, "vars_paired": self.vars_paired,
            "vars_total": self.vars_total, "output_err": self.output_err, "worst_err": self.worst_err,
            # JSON has no Inf (null instead): these say "NaN/Inf where the reference is finite"
            "output_nonfinite": _nonfinite(self.output_err), "worst_nonfinite": _nonfinite(self.worst_err),
            "root": None if self.root_name is None else {"id": self.root_id, "reference_id": self.root_ref_id,
                                                          "nonfinite": _nonfinite(self.root_err),
                                                          "name": self.root_name,
                                                          "opr_type": self.root_opr_type, "max_err": self.root_err},
            "cause": self.cause, "naive_vs_default_err": self.naive_vs_default_err,
            "naive_vs_reference_err": self.naive_vs_reference_err, "kernel_root": self.kernel_root_name,
            "unpaired_reference": [{"id": i, "name": n, "reason": r} for i, n, r in self.unpaired_a],
            "unpaired_option": [{"id": i, "name": n, "reason": r} for i, n, r in self.unpaired_b],
            "errors": {n: e for n, e in self.errors}, "run_dir": self.run_dir,
            "naive_run_dir": self.naive_run_dir, "seconds": self.seconds, "root_rule": self.root_rule,
            "dump_root": None if dr is None else {"id": dr[0], "reference_id": dr[1], "name": dr[2],
                                                  "opr_type": dr[3], "max_err": dr[4], "nonfinite": _nonfinite(dr[4])},
            "local": None if self.local is None else self.local.to_json(),
            "output_unseen": self.output_unseen,
            "output_tolerance": None if tol is None else tol.to_json(),
            "output_words": None if tol is None or self.status != "runs" else tol.words(self.output_err),
            "default_err": self.default_err, "default_nonfinite": _nonfinite(self.default_err),
            "default_diverges": self.default_diverges,
            "default_root": None if df is None else {"id": df[0], "reference_id": df[1], "name": df[2],
                                                     "opr_type": df[3], "max_err": df[4], "nonfinite": _nonfinite(df[4])},
            "added_roots": list(self.added_roots), "shared_roots": list(self.shared_roots),
            "output_verdict": self.output_verdict or None,
            "algorithms": dict(self.algorithms),
            "speed": None if self.speed is None else self.speed.to_json(),
            "speed_words": self.trade_words() or None,
            "root_algorithm": dict(self.algorithms).get(self.root_name) if self.root_name else None,
            "nondeterminism": None if self.nondeterminism is None else {
                **self.nondeterminism.to_json(), "words": self.nondeterminism.words(
                    "the default run (no option)" if self.option == DEFAULT_NAME else self.option)},
        }


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: options sorted worst first, every run, the reference's var names in
    execution order (rows of the option-by-variable view), and time spent."""

    reference: RunResult
    options: Tuple[OptionResult, ...]
    runs: Tuple[RunResult, ...]
    var_names: Tuple[str, ...]
    run_seconds: float
    analysis_seconds: float
    wall_seconds: float
    #: seconds in building and running the layerwise model (0 when local error is off)
    local_seconds: float = 0.0
    #: why local error was not measured in this sweep (None: it was, per option)
    local_off: Optional[str] = None
    #: the plain default run (no option), judged against the reference by the same rule
    default: Optional[OptionResult] = None
    #: the timed runs of the default run and each option that loaded (None: not timed)
    speed: Optional[SweepSpeed] = None

    @property
    def exit_code(self) -> int:
        """1 when an option diverges beyond the default run, crashes or hangs, or when the plain
        default run's own verdict is a divergence (or it failed); else 0. An option ``as_default``
        exits as the default run does."""
        rows = self.options + ((self.default,) if self.default is not None else ())
        return 1 if any(o.finding for o in rows) else 0
