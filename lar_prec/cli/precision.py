"""The deployment-precision commands (issue 23), whose result is their own JSON: ``quant`` (an int8
model against its float one) and ``mixed`` (which operators to keep in float32 under a float16
option). Each imports its workflow when it runs, so ``lar-prec --help`` stays fast."""
from __future__ import annotations

import sys

import click

from lar_prec.cli.common import advice_outputs, handle_errors, speed_options, store_option, to_store, view
from lar_prec.clisupport import check_report_outputs, input_paths


@click.command("quant")
@click.argument("float_model", type=click.Path(path_type=str))
@click.argument("quant_model", type=click.Path(path_type=str))
@click.option("--input", "inputs", multiple=True, metavar="SPEC", help="Inputs, as for naive-vs-default.")
@click.option("--out", default=None, metavar="DIR", help="Parent folder of the analysis folder.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON result; '-' for stdout.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill a run after S seconds.")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the HTML page here.")
@click.option("--lar", "lar_path", metavar="PATH", default=None, help="The load_and_run to use. [default: bundled]")
@store_option
@handle_errors
def quant_cmd(float_model: str, quant_model: str, inputs: tuple, out: str | None, json_out: str | None,
              html_out: str | None, timeout: float | None, lar_path: str | None, store: str | None = None) -> None:
    """Per-layer error of QUANT_MODEL (int8) against FLOAT_MODEL, worst first.

    Exit code 1 when some layer should stay in float (local SNR far below the others), 0 when none.
    """
    from lar_prec.report.quant import render_quant_terminal
    from lar_prec.run.settings import Settings
    from lar_prec.workflows.precision.quant import analyse

    check_report_outputs(json_out, html_out, input_paths(float_model, inputs, lar_path) + [quant_model])
    say = None if view()["quiet"] else (lambda msg: click.echo(f"lar-prec quant: {msg}", err=True))
    settings = Settings(model=float_model, inputs=list(inputs), out=out, lar=lar_path, timeout=timeout)
    res = analyse(settings, quant_model, progress=say)
    data = res.to_json()
    advice_outputs(data, render_quant_terminal, json_out, html_out)
    code = 1 if data["keep_in_float"] else 0
    to_store(store, data, code)
    sys.exit(code)


@click.command("mixed")
@click.argument("model", type=click.Path(path_type=str))
@click.option("--input", "inputs", multiple=True, metavar="SPEC", help="Inputs, as for naive-vs-default.")
@click.option("--option", "option", type=click.Choice(["ioc16", "io16xc32"]), default="ioc16", show_default=True,
              help="The float16 option to deploy with.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=None, metavar="E",
              help="Largest MegEngine error (|a-b|/max(|a|,|b|,1)) allowed on every output against the naive "
                   "float32 reference. [default: max(float16's band 2^-7, 2 x the output error of correct float16: "
                   "the naive kernels under the option)]")
@click.option("--out", default=None, metavar="DIR", help="Parent folder of the analysis folder.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON result; '-' for stdout.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill a run after S seconds.")
@click.option("--lar", "lar_path", metavar="PATH", default=None, help="The load_and_run to use. [default: bundled]")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the HTML page here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@speed_options("Rounds of timed runs (no dump, load_and_run's --warmup-iter 1 --iter 10) of the float32 model, the "
               "option alone and each verified keep-list, interleaved, one at a time: each point's speed-up against "
               "float32 beside its error. 0 turns timing off; else 2 to 50.",
               "What the timed runs may cost, F times mixed's wall time before timing ('none': no limit); as "
               "sweep's: a point's timed run still going at its share keeps the iterations it printed.")
@store_option
@handle_errors
def mixed_cmd(model: str, inputs: tuple, option: str, tolerance: float | None, out: str | None,
              json_out: str | None, html_out: str | None, timeout: float | None, lar_path: str | None,
              quiet: bool, speed_runs: int, speed_budget: str, store: str | None = None) -> None:
    """Which operators of MODEL to keep in float32 under --enable-ioc16 / --enable-io16xc32, verified.

    Proposes the operators whose local error under the option exceeds their float16 floor,
    kernel bugs (by the float64 oracle) first, writes a model with them in float32 and the
    rest in float16, runs it and widens the list until every output is within --tolerance of
    the naive float32 reference; every model tried is a point of the curve of output error
    against the share left in float16, timed against the float32 model (--speed-runs). Writes
    the keep-list (keep.json), the mixed model (mixed-N.mge) and mixed.json in the analysis
    folder.

    Exit code 0 when the option alone is within tolerance, 1 when operators must be kept in float32.
    """
    from lar_prec.report.mixed import render_mixed_terminal
    from lar_prec.run.settings import Settings
    from lar_prec.workflows.precision.mixed import analyse
    from lar_prec.workflows.sweep.speed import check_speed_budget, check_speed_runs

    check_speed_runs(speed_runs)
    budget = check_speed_budget(speed_budget)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, lar_path), analysis_dir=out)
    say = None if quiet else (lambda msg: click.echo(f"lar-prec mixed: {msg}", err=True))
    settings = Settings(model=model, inputs=list(inputs), out=out, lar=lar_path, timeout=timeout)
    res = analyse(settings, option=option, tolerance=tolerance, progress=say, speed_runs=speed_runs,
                  speed_budget=budget)
    data = res.to_json()
    advice_outputs(data, render_mixed_terminal, json_out, html_out)
    code = 1 if res.needs_float32 else 0
    to_store(store, data, code)
    sys.exit(code)
