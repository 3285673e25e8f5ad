"""The analysis commands, each one workflow that runs load_and_run and writes an analysis
folder: ``naive-vs-default``, ``shake``, ``devices``, ``sweep``. Each command imports its
workflow when it runs, so ``lar-prec --help`` stays fast."""
from __future__ import annotations

import click

from lar_prec.cli.common import (finish_analysis, handle_errors, remote_from_options, remote_options, speed_options,
                                 store_option, workflow_options)
from lar_prec.clisupport import ProgressBars, check_report_outputs, input_paths, pass_through_flags
from lar_prec.errors import UsageError


@click.command("naive-vs-default", context_settings={"ignore_unknown_options": True})
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@workflow_options
@click.option("--text-dump", is_flag=True, help="Also make a --io-dump run and use its dependency edges.")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True, help="Runs at once.")
@remote_options
@store_option
@handle_errors
def naive_vs_default_cmd(model: str, lar_flags: tuple, inputs: tuple, threshold: str | None, out: str | None,
                         json_out: str | None, html_out: str | None, lar_path: str | None, timeout: float | None,
                         lar_args: tuple, seed: int, quiet: bool, keep_going: bool, no_local: bool,
                         local_checks: bool, text_dump: bool, jobs: int, remote: str | None, remote_dir: str | None,
                         keep_remote: bool, store: str | None = None, keep_previous: bool = False) -> None:
    """Which operator computes wrongly? Reference kernels against the default ones.

    Runs MODEL with MGB_USE_MEGDNN_DBG=2 (naive reference kernels) and with the default
    kernels, each in a fresh process with --bin-io-dump, compares every variable and names
    the root variables where the divergence starts. Exit code 0 no divergence, 1 divergence
    found, 2 usage or input error, 3 a load_and_run run failed.
    """
    from lar_prec.run.settings import Settings
    from lar_prec.workflows.naive_vs_default.naive_vs_default import analyse

    spec = remote_from_options(remote, lar_path, remote_dir, keep_remote)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None if spec else lar_path),
                         analysis_dir=out)
    with ProgressBars(not quiet, "naive-vs-default") as progress:
        settings = Settings(model=model, inputs=inputs, out=out, keep_previous=keep_previous, threshold=threshold or "auto", lar=lar_path,
                            timeout=timeout, extra_flags=pass_through_flags(lar_args, lar_flags), seed=seed,
                            jobs=jobs, keep_going=keep_going, remote=spec, local=not no_local,
                            local_checks=local_checks, progress=progress)
        analysis = analyse(settings, text_dump=text_dump)
    finish_analysis(analysis, json_out, html_out, quiet, store)



@click.command("shake", context_settings={"ignore_unknown_options": True})
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@workflow_options
@click.option("-n", "--repeat", type=click.IntRange(2, 1000), default=3, show_default=True, help="Runs of the configuration.")
@click.option("--config", "config_name", type=click.Choice(["default", "reproducible", "fast-run"]), default="default",
              show_default=True, help="Configuration repeated: default kernels, --reproducible, or --fast-run.")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Runs at once (concurrent runs disturb each other's fast-run timing).")
@click.option("--no-explain", is_flag=True, help="Do not rerun to find the cause of jitter.")
@click.option("--keep-all", is_flag=True,
              help="Keep every run's whole dump (default: run 1 whole, later runs only the vars that differ from it).")
@click.option("--threads", "threads", default=None, metavar="N,M,...",
              help="Threads mode: the same input under each --multithread count (e.g. 1,2,4), against 1 thread.")
@click.option("--batch-positions", "batch_positions", type=click.IntRange(2, 64), default=None, metavar="N",
              help="Batch mode: the input alone, then at each position of a batch of N; the same sample must "
                   "give the same output wherever it sits.")
@click.option("--observer", is_flag=True,
              help="Also run once without --bin-io-dump (outputs only): do the dumps perturb the run?")
@remote_options
@store_option
@handle_errors
def shake_cmd(model: str, lar_flags: tuple, inputs: tuple, threshold: str | None, out: str | None,
              json_out: str | None, html_out: str | None, lar_path: str | None, timeout: float | None,
              lar_args: tuple, seed: int, quiet: bool, keep_going: bool, no_local: bool, local_checks: bool,
              repeat: int, config_name: str, jobs: int, no_explain: bool, keep_all: bool, threads: str | None,
              batch_positions: int | None, observer: bool, remote: str | None, remote_dir: str | None,
              keep_remote: bool, store: str | None = None, keep_previous: bool = False) -> None:
    """Does the output jitter from run to run, where does it start, and what removes it?

    Runs MODEL --repeat times with one configuration, each in a fresh process. Jitter is any
    difference from run 1 (bitwise by default); roots are the first variables that differ
    while their inputs are equal, each with a cause (docs/jitter-causes.md): the algorithm
    each run chose (fast-run runs write their own --fast-run-algo-policy cache), a
    non-deterministic kernel (confirmed by pinned and --reproducible reruns), the thread
    count (--threads) or the batch position (--batch-positions). Runs after the first keep
    only the vars that differ from run 1 (--keep-all keeps every dump).
    Exit code 0 no jitter, 1 jitter found, 2 usage or input error, 3 a run failed.
    """
    from lar_prec.run.settings import Settings
    from lar_prec.workflows.shake.shake import analyse

    spec = remote_from_options(remote, lar_path, remote_dir, keep_remote)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None if spec else lar_path),
                         analysis_dir=out)
    with ProgressBars(not quiet, "shake") as progress:
        settings = Settings(model=model, inputs=inputs, out=out, keep_previous=keep_previous, threshold=0.0 if threshold is None else threshold,
                            lar=lar_path, timeout=timeout, extra_flags=pass_through_flags(lar_args, lar_flags),
                            seed=seed, jobs=jobs, keep_going=keep_going, remote=spec, local=not no_local,
                            local_checks=local_checks, progress=progress)
        analysis = analyse(settings, repeat=repeat, config=config_name, explain=not no_explain, keep_all=keep_all,
                           threads=threads, batch_positions=batch_positions, observer=observer)
    finish_analysis(analysis, json_out, html_out, quiet, store)


# ---- devices (issue 15) ----


@click.command("devices")
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@workflow_options
@click.option("--remote", "remotes", multiple=True, metavar="TARGET[=LAR]",
              help="A device: ssh:[user@]host[:port] or adb[:serial], optionally =PATH of its load_and_run "
                   "(else --lar, else load_and_run on its PATH). Repeatable.")
@click.option("--local", "local", is_flag=True, help="Also run on this machine (load_and_run from "
              "$LAR_PREC_LOAD_AND_RUN, PATH or bundled).")
@click.option("--reference", default="local", show_default=True, metavar="TARGET",
              help="Whose naive run (MGB_USE_MEGDNN_DBG=2) is the reference: 'local' or a --remote target.")
@click.option("--config", "config_name", type=click.Choice(["naive", "default", "reproducible", "fast-run"]),
              default="default", show_default=True, help="Configuration run on every target.")
@click.option("--remote-dir", "remote_dir", metavar="DIR", default=None, help="The devices' working folder.")
@click.option("--keep-remote", is_flag=True, help="Keep each run's folder on the devices after pulling it.")
@store_option
@handle_errors
def devices_cmd(model: str, lar_flags: tuple, inputs: tuple, threshold: str | None, out: str | None,
                json_out: str | None, html_out: str | None, lar_path: str | None, timeout: float | None,
                lar_args: tuple, seed: int, quiet: bool, keep_going: bool, no_local: bool, local_checks: bool,
                remotes: tuple, local: bool, reference: str, config_name: str, remote_dir: str | None,
                keep_remote: bool, store: str | None = None, keep_previous: bool = False) -> None:
    """Does MODEL compute the same on several devices? One configuration on every target.

    Runs --config on each target in parallel (one worker per target), compares each with the
    naive run of --reference (default: this machine), and reports per target the final-output
    error and the root; the HTML page adds a target-by-variable table. Targets whose graphs
    differ pair vars by name. Exit code 0 every target agrees, 1 one diverges, 2 usage or
    input error, 3 a run or a device failed.
    """
    from lar_prec.run.settings import Settings
    from lar_prec.workflows.devices.devices import analyse, parse_targets

    if local_checks:  # --no-local is accepted (nothing to turn off): devices measures no local error
        raise UsageError("devices does not measure local error; --local-checks applies to naive-vs-default, "
                         "shake and compare --model")

    targets = parse_targets(remotes, local=local, lar=lar_path, remote_dir=remote_dir, keep_remote=keep_remote)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None), analysis_dir=out)
    with ProgressBars(not quiet, "devices") as progress:
        # without --remote, --lar can only name this machine's binary (a missing one is exit 2); with
        # --remote it is the devices' path, and --local runs the usual lookup
        settings = Settings(model=model, inputs=inputs, out=out, keep_previous=keep_previous, threshold=threshold or "auto",
                            lar=lar_path if not remotes else None, timeout=timeout,
                            extra_flags=pass_through_flags(lar_args, lar_flags), seed=seed, progress=progress)
        analysis = analyse(settings, targets, reference=reference, config=config_name)
    finish_analysis(analysis, json_out, html_out, quiet, store)


@click.command("sweep", context_settings={"ignore_unknown_options": True})
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@click.option("--input", "inputs", multiple=True, metavar="SPEC",
              help="name:file.npy | name:{1,3,8,8} (seeded random data) | name:[1,2,3]; repeat or join with ';'.")
@click.option("--options", "options", default=None, metavar="LIST",
              help="Options to try, comma-separated (e.g. nhwcd4,ioc16,weight-preprocess). "
                   "[default: the layouts of this CPU, ioc16, io16xc32, conv-bias fusions, weight-preprocess, "
                   "fuse-preprocess, const-shape, record-comp-seq]")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True, help="Runs at once.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              metavar="S", help="Seconds per run; a run still going is killed and its option reported as hung.")
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Analysis folder; the previous analysis there is replaced, any other non-empty folder "
                   "refused. [default: ./lar-prec-out/sweep-N]")
@click.option("--keep-previous", is_flag=True, help="Keep the previous analysis of --out as OUT.prev.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Also write the JSON report here ('-': stdout).")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the HTML report here.")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="load_and_run to use ('bundled' for python -m lar_prec.lar).")
@click.option("--lar-args", "lar_args", multiple=True, metavar="FLAGS",
              help="Extra load_and_run flags for every run, the reference too.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random data for shape-only inputs.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or folder note on stderr.")
@click.option("--no-local", is_flag=True,
              help="Do not measure the local error of every operator under each option (one build of the "
                   "layerwise model, one run of it per option).")
@speed_options("Rounds of timed runs (no dump, load_and_run's --warmup-iter 1 --iter 10) of the default run and "
               "each option that loaded, interleaved, one at a time: each option's speed-up beside its precision "
               "verdict. 0 turns timing off; else 2 to 50.",
               "What the timed runs may cost: F times the sweep's wall time before timing ('none': no limit). "
               "The default run is always timed in full; an option's timed run still going at its share is "
               "stopped and keeps the iterations it printed (none printed: 'not timed (timing budget)').")
@remote_options
@store_option
@handle_errors
def sweep_cmd(model: str, lar_flags: tuple, inputs: tuple, options: str | None, jobs: int, timeout: float,
              out: str | None, json_out: str | None, html_out: str | None, lar_path: str | None, lar_args: tuple,
              seed: int, quiet: bool, no_local: bool, speed_runs: int, speed_budget: str, remote: str | None,
              remote_dir: str | None, keep_remote: bool, store: str | None = None, keep_previous: bool = False) -> None:
    """Which load_and_run optimisation option changes the result, and where?

    Runs MODEL once with the naive kernels on the plain graph (the reference), then with the
    default kernels under each option that applies, each in its own process with --timeout.
    Each option's dump is paired with the reference by var name, brought back to NCHW and
    compared; an option that diverges is rerun with the naive kernels to tell "a kernel is
    wrong under this option" from "the option changes the math". Unless --no-local, the
    layerwise model is built once and run under each option on the reference's values: an
    operator whose local error exceeds its floor is the option's root. Exit code 0 no option
    diverges, 1 an option diverges, crashes or hangs, 2 usage or input error, 3 the
    reference run failed.
    """
    from lar_prec.run.settings import Settings
    from lar_prec.workflows.sweep.options import parse_options
    from lar_prec.workflows.sweep.sweep import analyse
    from lar_prec.workflows.sweep.speed import check_speed_budget, check_speed_runs

    parse_options(options)  # a bad name fails before anything runs
    check_speed_runs(speed_runs)
    budget = check_speed_budget(speed_budget)
    spec = remote_from_options(remote, lar_path, remote_dir, keep_remote)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None if spec else lar_path),
                         analysis_dir=out)
    with ProgressBars(not quiet, "sweep") as progress:
        settings = Settings(model=model, inputs=inputs, out=out, keep_previous=keep_previous, lar=lar_path, timeout=timeout,
                            extra_flags=pass_through_flags(lar_args, lar_flags), seed=seed, jobs=jobs, remote=spec,
                            local=not no_local, progress=progress)
        analysis = analyse(settings, options=options, speed_runs=speed_runs, speed_budget=budget)
    finish_analysis(analysis, json_out, html_out, quiet, store)
