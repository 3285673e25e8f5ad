"""The command line of the bundled load_and_run (:mod:`lar_prec.lar`): the flags it implements
and the real binary's flags it refuses, gflags syntax (``--io-dump F`` = ``--io_dump F`` =
``--io_dump=F`` = ``-io-dump F``; bool flags as ``--x``, ``--x=false``, ``--nox``), the parsed
:class:`LarOptions` and their checks, and the ``--help`` text. No MegEngine here: parsing a
command line is cheap and testable without the wheel.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Sequence, Tuple

from lar_prec.lar import graphopts
from lar_prec.errors import UsageError
from lar_prec.lar.graphopts import GRAPH_FLAGS, LAYOUT_FLAGS, REFUSED_FLAGS

#: exit status of every failure of the bundled runner (gflags uses 1 for flag errors too)
EXIT_FAILURE = 1

PROG = "load_and_run"

# Flags the bundled runner implements: canonical (underscore) name -> kind.
_BOOL, _STR, _INT = "bool", "str", "int"
SUPPORTED_FLAGS: Dict[str, str] = {
    "input": _STR,
    "io_dump": _STR,
    "bin_io_dump": _STR,
    "bin_out_dump": _STR,
    "iter": _INT,
    "warmup_iter": _INT,
    "reproducible": _BOOL,
    "fast_run": _BOOL,
    "full_run": _BOOL,
    "fast_run_algo_policy": _STR,
    "binary_equal_between_batch": _BOOL,
    "fast_run_shared_batch_size": _INT,
    "multithread": _INT,
    "cpu": _BOOL,
    "cpu_default": _BOOL,
    "model_info": _BOOL,
    "verbose": _BOOL,
    "record_comp_seq": _BOOL,
    "copy_to_host": _BOOL,
    "lite": _BOOL,
    "help": _BOOL,
    "helpfull": _BOOL,
    "version": _BOOL,
    # optimisation options (reference/graph-options.md): layout transforms, one at a time
    "enable_nchw4": _BOOL,
    "enable_chwn4": _BOOL,
    "enable_nchw44": _BOOL,
    "enable_nchw88": _BOOL,
    "enable_nchw32": _BOOL,
    "enable_nchw64": _BOOL,
    "enable_nhwcd4": _BOOL,
    "enable_nchw44_dot": _BOOL,
    "layout_transform": _STR,
    "layout_transform_dump": _STR,
    # fp16 and fusion: graph rewrites (lar_prec.lar.graphopts)
    "enable_ioc16": _BOOL,
    "enable_io16xc32": _BOOL,  # lar-prec's own: the graph API's io16xc32, not a load_and_run flag
    "enable_fuse_conv_bias_nonlinearity": _BOOL,
    "enable_fuse_conv_bias_with_z": _BOOL,
    "optimize_for_inference": _BOOL,
    "fuse_grain": _BOOL,
    # runtime options megenginelite takes
    "enable_fuse_preprocess": _BOOL,
    "weight_preprocess": _BOOL,
    "const_shape": _BOOL,
    "record_comp_seq2": _BOOL,
    "no_sanity_check": _BOOL,
    "rewritten_model": _STR,  # lar-prec's own: where the rewritten model is kept
}

# Real load_and_run 1.13 flags that the bundled runner does not implement (reference 1.3).
UNSUPPORTED_FLAGS = frozenset(
    """
    batch_size io_dump_stdout io_dump_stderr workspace_limit thread cuda
    multithread_default multi_thread_core_ids
    fake_first disable_mem_opt tensorrt
    tensorrt_cache disable_assert_throw range
    check_dispatch check_var_value profile profile_host get_static_mem_info wait_gdb
    share_param_mem c_opr_lib c_opr_lib_with_param model_dump packed_model_dump
    pack_info_json pack_cache pack_info_cryption pack_model_cryption fitting
    dump_fitting_model mdl flagfile fromenv tryfromenv helpshort helpmatch
    helpon helppackage helpxml undefok
    """.split()
)

_TRUE = {"true", "t", "yes", "y", "1"}
_FALSE = {"false", "f", "no", "n", "0"}



class LarUsageError(UsageError):
    """A command line, input or model problem of the user's; printed as one line, no traceback."""


class UnknownFlag(LarUsageError):
    """A flag no load_and_run has: said as gflags says it (``ERROR: unknown command line flag
    'NAME'``, the name as typed), exit 1, as MegEngine's load_and_run does."""


#: what ``--version`` prints: gflags' line with load_and_run's version string (``main.cpp``
#: sets "1.0" in every build 1.7-1.13; the MegEngine version is on stderr of every run)
VERSION_LINE = f"{PROG} version 1.0"


def helpfull_text() -> str:
    """``--helpfull`` as gflags writes it (``    -NAME (help) type: T default: V``), for the flags
    the bundled runner implements; lar-prec's probe (``run/probe.py``) reads it as a real one's."""
    gtype = {_BOOL: "bool", _STR: "string", _INT: "int32"}
    lines = [f"{PROG}: {PROG} <model_path> [options Flags...]", "", "  Flags from lar_prec/lar/flags.py:"]
    defaults = {f.name: f.default for f in fields(LarOptions)}
    for name, kind in sorted(SUPPORTED_FLAGS.items()):
        default = defaults.get(name, False if kind == _BOOL else "")
        shown = str(default).lower() if kind == _BOOL else f'"{default or ""}"' if kind == _STR else str(default)
        lines.append(f"    -{name} (the bundled runner's --{name}) type: {gtype[kind]} default: {shown}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class LarOptions:
    """The parsed command line of the bundled load_and_run."""

    model: str
    input: str = ""
    io_dump: Optional[str] = None
    bin_io_dump: Optional[str] = None
    bin_out_dump: Optional[str] = None
    iter: int = 10
    warmup_iter: int = 1
    reproducible: bool = False
    fast_run: bool = False
    full_run: bool = False
    fast_run_algo_policy: Optional[str] = None
    binary_equal_between_batch: bool = False
    fast_run_shared_batch_size: int = 0
    multithread: int = -1
    cpu: bool = False
    #: CPU inplace mode: kernels run in the calling thread, no worker thread (megenginelite's
    #: enable_cpu_inplace_mode, what the real binary's --cpu-default sets)
    cpu_default: bool = False
    model_info: bool = False
    verbose: bool = False
    record_comp_seq: bool = False
    copy_to_host: bool = False
    lite: bool = False
    enable_nchw4: bool = False
    enable_chwn4: bool = False
    enable_nchw44: bool = False
    enable_nchw88: bool = False
    enable_nchw32: bool = False
    enable_nchw64: bool = False
    enable_nhwcd4: bool = False
    enable_nchw44_dot: bool = False
    layout_transform: str = ""
    layout_transform_dump: Optional[str] = None
    enable_ioc16: bool = False
    enable_io16xc32: bool = False
    enable_fuse_conv_bias_nonlinearity: bool = False
    enable_fuse_conv_bias_with_z: bool = False
    optimize_for_inference: bool = False
    fuse_grain: bool = False
    enable_fuse_preprocess: bool = False
    weight_preprocess: bool = False
    const_shape: bool = False
    record_comp_seq2: bool = False
    no_sanity_check: bool = False
    rewritten_model: Optional[str] = None

    @property
    def layout(self) -> Optional[str]:
        """The layout transform asked for (a lar_prec.lar.graphopts layout name), or None."""
        for flag, name in LAYOUT_FLAGS.items():
            if getattr(self, flag):
                return name
        return None

    @property
    def needs_rewrite(self) -> bool:
        """True when the model must be rewritten by MegEngine's graph API before the run."""
        return any(getattr(self, f) for f in GRAPH_FLAGS)

    @property
    def record_level(self) -> int:
        """``comp_node_seq_record_level``: 2 with --record_comp_seq2 (it wins, as in load_and_run)."""
        return 2 if self.record_comp_seq2 else 1 if self.record_comp_seq else 0


# --------------------------------------------------------------------------- argv parsing


def flag_names(flags: Sequence[str]) -> set:
    """load_and_run flag names in one spelling: ``--fast-run``/``--fast_run=x`` -> ``fast_run``."""
    return {f.split("=")[0].lstrip("-").replace("-", "_") for f in flags}


def is_fast_run(flags: Sequence[str]) -> bool:
    """The flags make load_and_run choose algorithms by profiling."""
    return bool(flag_names(flags) & {"fast_run", "full_run"})


def _unsupported_message(name: str) -> str:
    return (
        f"--{name} is a load_and_run flag the bundled runner (lar_prec.lar) does not support; "
        "run a MegEngine build of load_and_run with --lar PATH (or LAR_PREC_LOAD_AND_RUN)"
    )


def parse_argv(argv: Sequence[str]) -> Tuple[Dict[str, Any], List[str]]:
    """Parse gflags-style ``argv`` (without the program name) into ``(flags, positionals)``.

    Flag names are normalised to the underscore form. Raises LarUsageError for unknown,
    unsupported or malformed flags, like gflags does (it exits 1).
    """
    flags: Dict[str, Any] = {}
    positionals: List[str] = []
    i = 0
    args = list(argv)
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positionals.extend(args[i:])
            break
        if not arg.startswith("-") or arg == "-":
            positionals.append(arg)
            continue
        body = arg[2:] if arg.startswith("--") else arg[1:]
        given, eq, value = body.partition("=")
        # gflags retries a lookup with '-' replaced by '_' (reference 1.1)
        name = given.replace("-", "_")
        has_value = bool(eq)
        if (name not in SUPPORTED_FLAGS and name not in UNSUPPORTED_FLAGS and name not in REFUSED_FLAGS
                and name.startswith("no")):
            negated = name[2:]
            if SUPPORTED_FLAGS.get(negated) == _BOOL and not has_value:
                flags[negated] = False
                continue
            if negated in UNSUPPORTED_FLAGS:
                raise LarUsageError(_unsupported_message(negated))
            if negated in REFUSED_FLAGS:
                continue  # --noenable_jit asks for what this build does anyway
        if name in REFUSED_FLAGS:
            if has_value and value.lower() in _FALSE:
                continue
            raise LarUsageError(REFUSED_FLAGS[name])
        if name in UNSUPPORTED_FLAGS:
            raise LarUsageError(_unsupported_message(name))
        kind = SUPPORTED_FLAGS.get(name)
        if kind is None:
            raise UnknownFlag(f"unknown command line flag '{given}'")
        if kind == _BOOL:
            if not has_value:
                flags[name] = True
            elif value.lower() in _TRUE:
                flags[name] = True
            elif value.lower() in _FALSE:
                flags[name] = False
            else:
                raise LarUsageError(f"illegal value '{value}' specified for bool flag '{name}'")
            continue
        if not has_value:
            if i >= len(args):
                raise LarUsageError(f"flag '{name}' is missing its argument")
            value = args[i]
            i += 1
        if kind == _INT:
            try:
                flags[name] = int(value, 10)
            except ValueError:
                raise LarUsageError(f"illegal value '{value}' specified for int flag '{name}'") from None
        else:
            flags[name] = value
    return flags, positionals


def parse_options(argv: Sequence[str]) -> LarOptions:
    """Parse and check a full command line (without the program name) into LarOptions."""
    flags, positionals = parse_argv(argv)
    if not positionals:
        raise LarUsageError("no model given: usage: python -m lar_prec.lar MODEL [flags]")
    if len(positionals) > 1:
        extra = positionals[1]
        hint = " (bool flags take --flag=true / --flag=false)" if extra.lower() in _TRUE | _FALSE else ""
        raise LarUsageError(f"unexpected argument '{extra}' after the model {positionals[0]!r}{hint}")
    flags.pop("help", None)
    flags.pop("version", None)
    opts = LarOptions(model=positionals[0], **flags)
    if opts.iter < 0 or opts.warmup_iter < 0:
        raise LarUsageError("--iter and --warmup_iter must not be negative")
    if opts.fast_run and opts.full_run:
        raise LarUsageError("--fast_run and --full_run can not be used together")
    if opts.io_dump and opts.bin_io_dump:
        raise LarUsageError(
            "--io_dump and --bin_io_dump can not be used in one run: a network holds one dumper "
            "(the real load_and_run segfaults); make one run per dump"
        )
    if opts.bin_out_dump and (opts.io_dump or opts.bin_io_dump):
        raise LarUsageError("--bin_out_dump and --io_dump/--bin_io_dump can not be used in one run: "
                            "load_and_run keeps only the last dump option")
    if opts.multithread == 0 or opts.multithread < -1:
        raise LarUsageError("--multithread needs a positive number of threads")
    if opts.fast_run_shared_batch_size < 0:
        raise LarUsageError("--fast_run_shared_batch_size must not be negative")
    if (
        opts.fast_run_algo_policy
        and not os.path.exists(opts.fast_run_algo_policy)
        and not (opts.fast_run or opts.full_run)
    ):
        raise LarUsageError(
            f"--fast_run_algo_policy {opts.fast_run_algo_policy} does not exist; "
            "give --fast_run or --full_run to create it"
        )
    if opts.fast_run_shared_batch_size and not (opts.fast_run or opts.full_run or opts.fast_run_algo_policy):
        raise LarUsageError("--fast_run_shared_batch_size needs --fast_run, --full_run or --fast_run_algo_policy")
    try:
        graphopts.check_options(opts)
    except UsageError as exc:
        raise LarUsageError(str(exc)) from None
    return opts


_HELP = """\
usage: python -m lar_prec.lar MODEL [flags]

The load_and_run bundled with lar-prec (megenginelite, CPU). Flags (dash or underscore form):
  --input "name:file.npy;name:{1,3,8,8};name:[1,2,3];file.json"
  --io_dump FILE | --bin_io_dump DIR      text or binary dump of every operator output
  --bin_out_dump DIR                      the network outputs only, DIR/run<k>-out<i> per execution
                                          (k counts warm-ups too; i: output index, title names it)
  --iter N [10]  --warmup_iter N [1]      every execution is dumped (the last one survives)
  --reproducible  --fast_run  --full_run  --fast_run_algo_policy FILE
  --binary_equal_between_batch  --fast_run_shared_batch_size N
  --multithread N  --cpu  --cpu_default (inplace: no worker thread)  --model_info  --verbose  --copy_to_host  --lite
Optimisation options (load_and_run's meaning; one layout transform at a time):
  --enable_nchw44 | --enable_nchw88 | --enable_nhwcd4 | --enable_nchw4 | --enable_nchw32
  --enable_nchw64 | --enable_nchw44_dot   (megenginelite runtime options)
  --enable_chwn4  --enable_ioc16  --enable_fuse_conv_bias_nonlinearity
  --enable_fuse_conv_bias_with_z  --optimize_for_inference  --fuse_grain
                                          (graph rewrites with MegEngine's graph API)
  --enable_io16xc32                       lar-prec's own: fp16 I/O, fp32 compute (graph API only;
                                          not a load_and_run flag)
  --layout_transform cpu [--layout_transform_dump FILE]   global layout transform
  --enable_fuse_preprocess  --weight_preprocess  --const_shape
  --record_comp_seq  --record_comp_seq2 (needs --no_sanity_check)  --no_sanity_check
  --rewritten_model FILE                  lar-prec's own: keep the rewritten model here (default
                                          <dump>.rewritten.mge beside the dump); its path and
                                          sha256 are printed on stderr:
                                          "lar_prec.lar: rewritten model: sha256=HEX path=PATH"
  --enable_jit is refused: JIT needs a compiler the CPU wheel lacks.
Environment: MGB_USE_MEGDNN_DBG=2 (naive kernels), MGB_DUMP_INPUT (binary dumps of inputs).
Other load_and_run flags need a MegEngine build: lar-prec ... --lar PATH."""
