"""The records of local error: the layerwise model (:class:`LayerwiseModel`, its
:class:`Feed` s and :class:`MeasuredVar` s) and what measuring it found (:class:`LocalVar`,
:class:`CheckResult`, :class:`LocalResult`). :mod:`.local` measures, :mod:`.floors` judges."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from lar_prec.compare.bounds import Bound
from lar_prec.compare.elemwise import Step
from lar_prec.errors import UsageError
from lar_prec.run.record import RunResult


@dataclass(frozen=True)
class Feed:
    """One input of a layerwise model: the original var it stands for and how it is fed."""

    name: str
    id: int
    var_name: str
    ref_id: Optional[int]
    shape: Tuple[int, ...]
    dtype: str
    feed_dtype: str
    scale: Optional[float]
    model_input: bool


#: what a feed may be called (a file name and a load_and_run input name)
_FEED_NAME = re.compile(r"(?![.-])[^/\\:;=\x00-\x1f\x7f]{1,200}\Z")
#: the dtypes a feed is written in (numpy names)
_FEED_DTYPES = frozenset({"float32", "float16", "int32", "int16", "int8", "uint8", "uint16"})


def feeds_from_json(where: Path, items: Any) -> Tuple[Feed, ...]:
    """The ``feeds`` of a record a build child wrote (layerwise.json, a reduced model's), checked
    (UsageError): a feed's name becomes a file name and an input name on load_and_run's command
    line. A feed without its keys raises KeyError or TypeError (the caller names the record)."""
    feeds = tuple(Feed(f["name"], f["id"], f["var_name"], f["ref_id"], tuple(f["shape"]), f["dtype"],
                       f["feed_dtype"], f["scale"], f["model_input"]) for f in items)
    for f in feeds:
        if not (isinstance(f.name, str) and _FEED_NAME.match(f.name)):
            raise UsageError(f"{where}: feed name {f.name!r} must be a plain file name "
                             "(no / \\ : ; =, no control character, not starting with . or -)")
        if not (isinstance(f.feed_dtype, str) and f.feed_dtype in _FEED_DTYPES):
            raise UsageError(f"{where}: feed {f.name}: feed_dtype must be one of {', '.join(sorted(_FEED_DTYPES))}, "
                             f"found {f.feed_dtype!r}")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in f.shape):
            raise UsageError(f"{where}: feed {f.name}: shape must be integers >= 0, found {list(f.shape)!r}")
    return feeds


@dataclass(frozen=True)
class MeasuredVar:
    """One operator output kept as an output of the layerwise model (original graph's id)."""

    id: int
    name: str
    ref_id: Optional[int]
    opr: str
    opr_type: str
    output: str
    inputs: Tuple[int, ...]
    input_shapes: Tuple[Tuple[int, ...], ...]
    shape: Tuple[int, ...]
    dtype: str
    static: bool
    problem: Optional[str]
    #: vars without a reference value computed together with this one (fused by lite at
    #: load time): the local error is that of the unit
    unit: Tuple[int, ...] = ()
    #: the longest reduction fused into the unit (a convolution behind a var named RELU): 1 if none
    unit_reduction: int = 1
    #: the operator's mode (Elemwise, Reduce, Pooling) or ConvBias's nonlinearity, when it has one
    mode: Optional[str] = None
    #: the layerwise model's output holding the sum of |terms| of each element (sums of products)
    magnitude: Optional[str] = None
    #: Softmax: the axis it normalises; LayerNorm: its first normalised axis
    axis: Optional[int] = None
    #: which output of its operator this var is (LayerNorm: 0 values, 1 mean, 2 rstd)
    output_index: int = 0
    #: its unit's operators then its own, in execution order (a unit only): what the
    #: elementwise bound evaluates step by step
    steps: Tuple[Step, ...] = ()


@dataclass(frozen=True)
class LayerwiseModel:
    """A built layerwise model (``layerwise.mge``) and what it feeds and measures."""

    path: Path
    source_model: Path
    ref_dump: Optional[Path]
    feeds: Tuple[Feed, ...]
    measured: Tuple[MeasuredVar, ...]
    kept: Tuple[Tuple[int, str], ...]
    #: var id -> the .npy file of a constant's values the reference dump lacks (the build wrote
    #: them beside the model: ``constants/<id>.npy``)
    constants: Mapping[int, Path] = field(default_factory=dict)
    #: var id -> name of a constant whose value the build could not read (the reference dump's
    #: var of that name stands for it)
    constant_names: Mapping[int, str] = field(default_factory=dict)

    @property
    def not_isolated(self) -> Dict[int, str]:
        """Measured var id -> why its operator still reads a computed data var."""
        return {m.id: m.problem for m in self.measured if m.problem}

    def var(self, var_id: int) -> MeasuredVar:
        """The measured var with original id ``var_id``."""
        for m in self.measured:
            if m.id == var_id:
                return m
        raise KeyError(f"var {var_id} is not measured by {self.path}")


@dataclass(frozen=True)
class CheckResult:
    """One of the three checks: ``status`` pass | fail | skipped, failing var ids with why."""

    name: str
    status: str
    failures: Tuple[Tuple[int, str], ...] = ()
    note: str = ""


@dataclass(frozen=True)
class LocalVar:
    """Local and accumulated error of one var (MegEngine's metric; None when not comparable)."""

    id: int
    name: str
    opr_type: str
    dtype: str
    local_err: Optional[float]
    entire_err: Optional[float]
    isolated: bool
    problem: Optional[str] = None
    #: max |reference value| over finite elements (None: not a float var or no reference)
    ref_max_abs: Optional[float] = None
    #: the local difference in rounding units of each element's own scale
    #: (:mod:`lar_prec.compare.bounds`; None where no scale is known for the operator)
    bound: Optional[Bound] = None
    #: why its operator is not judged (no bound for its type, or its bound could not be
    #: measured); None when it has a bound or is exact (:mod:`lar_prec.diagnosis.local_bounds`)
    not_judged: Optional[str] = None


@dataclass(frozen=True)
class LocalResult:
    """The local errors of one test configuration against one reference dump."""

    layerwise: LayerwiseModel
    config: str
    ref_dump: Path
    test_dump: Optional[Path]
    local_dump: Path
    vars: Tuple[LocalVar, ...]
    checks: Tuple[CheckResult, ...]
    #: var id -> the algorithm(s) its operator ran under fast-run (from the algorithm cache;
    #: several when the cache cannot tell two operators apart); empty otherwise
    algorithms: Mapping[int, Tuple[str, ...]] = field(default_factory=dict)
    #: the layerwise runs (local, then the checks'), each with its folder and run.json
    runs: Tuple[RunResult, ...] = ()

    def by_id(self) -> Dict[int, LocalVar]:
        """Var id -> :class:`LocalVar`."""
        return {v.id: v for v in self.vars}

    def check(self, name: str) -> CheckResult:
        """The check called ``name`` (isolation, reference_self, test_fed)."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)
