"""Running load_and_run, under the name the project was specified with. The code lives in
:mod:`lar_prec.run`; nothing inside the package imports this module.

Example::

    from lar_prec.runner import prepare_inputs, run_once

    inputs = prepare_inputs(["data:x.npy"], "analysis/inputs", "model.mge")
    naive = run_once("model.mge", inputs, "naive", "analysis")
    print(naive.status, naive.dump_dir, naive.seconds)
"""
from __future__ import annotations

from lar_prec.dumps.binary import INCOMPLETE_MARKER
from lar_prec.inputspec import check_file, split_input_specs
from lar_prec.outputs import sha256_file
from lar_prec.run.argv import build_argv, check_extra_flags, parse_env_assignments, split_lar_args
from lar_prec.run.config import (
    BUNDLED,
    CONFIGS,
    DEBUG_ENV,
    ENV_LOAD_AND_RUN,
    LoadAndRun,
    RunConfig,
    bundled_load_and_run,
    check_timeout,
    get_config,
    load_and_run_version,
    megengine_version,
    resolve_load_and_run,
)
from lar_prec.run.device import RemoteSessions, RemoteSpec
from lar_prec.run.dirs import CLAIM_NAME, new_analysis_dir, new_run_dir
from lar_prec.run.inputs import (
    INPUTS_SCHEMA,
    PlannedInput,
    PreparedInput,
    PreparedInputs,
    plan_inputs,
    prepare_inputs,
    read_model_io,
    write_inputs,
)
from lar_prec.run.once import run_once, run_single
from lar_prec.run.proc import interrupt_active_runs, reset_interrupt
from lar_prec.run.record import RUN_SCHEMA, RunResult, read_run_json, write_run_json

__all__ = [
    "BUNDLED", "CONFIGS", "DEBUG_ENV", "ENV_LOAD_AND_RUN", "LoadAndRun", "RunConfig", "bundled_load_and_run",
    "check_timeout", "get_config", "load_and_run_version", "megengine_version", "resolve_load_and_run",
    "RemoteSessions", "RemoteSpec", "CLAIM_NAME", "new_analysis_dir", "new_run_dir", "INPUTS_SCHEMA",
    "PlannedInput", "PreparedInput", "PreparedInputs", "plan_inputs", "prepare_inputs", "read_model_io",
    "write_inputs", "run_once", "run_single", "interrupt_active_runs", "reset_interrupt", "RUN_SCHEMA",
    "RunResult", "read_run_json", "write_run_json", "build_argv", "check_extra_flags", "parse_env_assignments",
    "split_lar_args", "check_file", "split_input_specs", "sha256_file", "INCOMPLETE_MARKER",
]
