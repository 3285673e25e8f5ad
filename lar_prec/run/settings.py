"""What to run and how, in one frozen record (:class:`Settings`), and the analysis made ready
from it (:class:`Prepared`).

The CLI (or the Python API's keyword functions, or the zoo's worker) makes one
:class:`Settings` from what the user gave; the workflow hands it down whole instead of
re-spelling a dozen keywords at every step. The prepare step
(:func:`lar_prec.workflows.common.analysis.prepare`) checks it and reads the model once; what
it learnt (the model's path and mode, the analysis folder, the inputs written, the
load_and_run chosen) travels in :class:`Prepared`, so the runs, the local error and the
oracle read fields instead of reading the model again. Records only: nothing here runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.records import PathLike

if TYPE_CHECKING:  # names for the annotations only: the CLI imports this module before --help
    from lar_prec.run.config import LoadAndRun
    from lar_prec.run.device import RemoteSpec
    from lar_prec.run.inputs import PreparedInputs


@dataclass(frozen=True)
class Settings:
    """What to run and how: made once from the user's options, then only read.

    Every field is the user's value as given (``threshold`` too: each workflow parses it with
    its own default meaning); checks happen in the prepare step, so a bad value is a usage
    error (exit 2) before any folder exists.
    """

    #: the ``.mge`` model, as the user spelled it (error messages name it so)
    model: PathLike
    #: ``--input`` items (``name:file.npy``, ``name:{1,3,8,8}``, ``name:[1,2]``), a string or a sequence
    inputs: Union[str, Sequence[str]] = ()
    #: the analysis folder (None: ``./lar-prec-out/<command>-N``)
    out: Optional[PathLike] = None
    #: ``"auto"``, ``"band"``, a number or a Threshold: the user's value, parsed by the workflow
    threshold: Any = "auto"
    #: load_and_run: a LoadAndRun, a path, ``"bundled"`` or None (``$LAR_PREC_LOAD_AND_RUN``, PATH, bundled)
    lar: "Union[LoadAndRun, str, None]" = None
    #: seconds before a run is killed with its process group
    timeout: Optional[float] = None
    #: load_and_run flags of every run
    extra_flags: Tuple[str, ...] = ()
    #: environment changes of every run (a value None removes the variable)
    env: Optional[Mapping[str, Optional[str]]] = None
    #: seed of random data for shape-only inputs
    seed: int = 0
    #: runs at once
    jobs: int = 1
    #: make every run even after one failed (the first failure is still raised)
    keep_going: bool = False
    #: every run on this device (None: this machine)
    remote: "Optional[RemoteSpec]" = None
    #: measure the local error of every operator after the runs
    local: bool = True
    #: also run local error's reference self-check and test-fed check
    local_checks: bool = False
    #: write ``report.html`` next to ``report.json``
    html: bool = True
    #: ``progress(stage, done, total, running=..., finished=...)`` hook (clisupport.ProgressBars)
    progress: Optional[Callable[..., None]] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_flags", tuple(self.extra_flags))


@dataclass(frozen=True)
class Prepared:
    """An analysis made ready by the prepare step: the settings it came from, and what was
    checked and read once (the model, its mode, the folder, the inputs, the load_and_run)."""

    settings: Settings
    #: the model file, checked (a regular file), as given
    model: Path
    #: ``"mdl"`` or ``"lite"`` (:func:`lar_prec.run.probe.model_mode`), None when unreadable
    mode: Optional[str]
    #: the analysis folder, claimed
    dir: Path
    #: the inputs, written once into ``dir/inputs``
    inputs: "PreparedInputs"
    #: this machine's load_and_run (None for a remote analysis)
    lar: "Optional[LoadAndRun]"
