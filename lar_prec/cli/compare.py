"""The commands on existing dumps: ``compare`` (two dump folders) and ``tree`` (the text
``compare_binary_iodump`` printed). Each imports its workflow when it runs, so ``lar-prec
--help`` stays fast."""
from __future__ import annotations

import sys

import click

from lar_prec.cli.common import handle_errors, lines_shown, report_out, store_option, to_store, write_outputs
from lar_prec.clisupport import check_report_outputs


@click.command("compare")
@click.argument("dir_a", type=click.Path(path_type=str))
@click.argument("dir_b", type=click.Path(path_type=str))
@click.option("--threshold", default="auto", show_default=True, metavar="auto|band|X",
              help="max_err above which a var diverges: 'auto' (from the data, per dtype; with --model, roots "
                   "by local error), 'band' (the dump-only rule even with --model) or a number, "
                   "like compare_binary_iodump -e X; 0 means bitwise.")
@click.option("--pass-ratio", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0, show_default=True,
              metavar="R", help="A float var passes when at least this share of its elements is within its "
                                "threshold (CANN's 99% rule: 0.99); the verdict says how many pass only so.")
@click.option("--stats", is_flag=True,
              help="Print each var's error statistics (quantiles, share within the threshold, the threshold it "
                   "would pass at) and count the relative and absolute error's quantiles too (twice the engine's time).")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON report (design.md schema); '-' for stdout.")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Write the HTML report (one offline file).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "megengine"]), default="table", show_default=True,
              help="stdout: the summary tables, one CSV row per var, or what compare_binary_iodump prints "
                   "(for accuracy_shake_var_tree and `lar-prec tree`).")
@click.option("--text-dump", type=click.Path(path_type=str), default=None, help="A --io-dump text file of the same model: adds its dependency edges.")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=None,
              help="Worker processes for big dumps (default: one per CPU; dumps under 48 MB use one).")
@click.option("--all", "all_vars", is_flag=True, help="Table: list vars in execution order, ok ones too, not the most divergent.")
@click.option("--pair", "pair", type=click.Choice(["auto", "id", "name"]), default="auto", show_default=True,
              help="How vars of A and B are matched: by var id (two runs of one graph), by var name (graphs "
                   "rewritten by different load_and_run options; B's transformed layouts are brought back to "
                   "NCHW), or auto: id when both folders come from the same graph, else name.")
@click.option("--model", "model", type=click.Path(path_type=str), default=None,
              help="The model the B side ran (A is the reference): adds the local error of every operator and "
                   "roots by it (--threshold auto), with a repro folder per root.")
@click.option("--config", "local_config", type=click.Choice(["default", "reproducible", "fast-run", "naive"]),
              default="default", show_default=True, help="With --model: the configuration B ran under.")
@click.option("--out", "local_out", type=click.Path(path_type=str), default=None,
              help="With --model: folder for the local analysis and repros. [default: ./lar-prec-out/compare-N]")
@click.option("--no-local", is_flag=True, help="With --model: do not measure local error.")
@click.option("--local-checks", is_flag=True, help="With --model: also run the two extra local checks.")
@click.option("--fast-run-algo-policy", "algo_policy", type=click.Path(path_type=str), default=None, metavar="CACHE",
              help="With --model: the algorithm cache B's fast-run wrote (load_and_run --fast-run-algo-policy); "
                   "the layerwise run replays B's algorithm choices.")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="With --model: the load_and_run B ran, for the layerwise run ('bundled' for python -m "
                   "lar_prec.lar). [default: bundled]")
@store_option
@handle_errors
def compare_cmd(dir_a: str, dir_b: str, threshold: str, pass_ratio: float, stats: bool, json_out: str | None,
                html_out: str | None, fmt: str, text_dump: str | None, jobs: int | None, all_vars: bool, pair: str,
                model: str | None, local_config: str, local_out: str | None, no_local: bool, local_checks: bool,
                algo_policy: str | None, lar_path: str | None, store: str | None = None) -> None:
    """Compare two --bin-io-dump folders and name the root variables.

    Exit code 0 when every var agrees within the threshold, 1 when any var diverges (or has
    NaN/Inf in other places, another shape or dtype, or exists on one side only), 2 on bad input.
    """
    from lar_prec.report.model import exit_code
    from lar_prec.report.terminal import render_csv, render_terminal
    from lar_prec.workflows.compare.compare import check_model_options, compare_dumps

    check_model_options(model, algo_policy=algo_policy, lar=lar_path)
    check_report_outputs(json_out, html_out, [dir_a, dir_b, text_dump, algo_policy,
                                              lar_path if lar_path != "bundled" else None], make_parents=False,
                         analysis_dir=local_out)
    compare_kw = dict(threshold=threshold, text_dump=text_dump, jobs=jobs, pairing=pair, paths=bool(html_out),
                      pass_ratio=pass_ratio, stats=stats)
    if model:
        # the layerwise machinery loads only when it runs: a dump-only compare starts ~40 ms sooner
        from lar_prec.workflows.compare.local import compare_with_model

        found = compare_with_model(dir_a, dir_b, model, config=local_config, out=local_out, local=not no_local,
                                   local_checks=local_checks, algo_policy=algo_policy, lar=lar_path, **compare_kw)
    else:
        found = compare_dumps(dir_a, dir_b, **compare_kw)
    tree, report = found.tree, found.report
    if json_out != "-":
        if fmt == "csv":
            click.echo(render_csv(report), nl=False)
        elif fmt == "megengine":
            from lar_prec.diagnosis.megcompat import megengine_text

            for block in megengine_text(tree.comparison):  # type: ignore[arg-type]
                click.echo(lines_shown(block))
            missing = [d.id for d in tree.diffs if d.status == "missing"]
            if missing:
                click.echo(f"note: {len(missing)} var(s) dumped on one side only, not printed: {missing[:10]}", err=True)
        else:
            render_terminal(report, report_out(), all_vars=all_vars)
            if stats:
                from lar_prec.report.terminal import most_divergent
                from lar_prec.report.triage import render_stats

                render_stats(most_divergent(report, 20), report_out(), len(report.vars))
    write_outputs(report, json_out, html_out)  # after the table: a failing write keeps the verdict shown
    to_store(store, report)
    sys.exit(exit_code(report))


@click.command("tree")
@click.argument("diff_txt", type=click.Path(path_type=str))
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON report; '-' for stdout.")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Write the HTML report (one offline file).")
@handle_errors
def tree_cmd(diff_txt: str, json_out: str | None, html_out: str | None) -> None:
    """Roots of what `python -m megengine.tools.compare_binary_iodump` printed.

    Like accuracy_shake_var_tree, without its bugs: 'not finite' and 'shape mismatch'
    failures count, any file order works, vars without inputs can be roots. Exit code 0 when
    the text lists no failure, 1 when it does, 2 when it cannot be read.
    """
    from lar_prec.report.model import exit_code
    from lar_prec.report.terminal import render_terminal
    from lar_prec.workflows.compare.tree import tree_report

    check_report_outputs(json_out, html_out, [diff_txt], make_parents=False)
    report = tree_report(diff_txt)
    if json_out != "-":
        render_terminal(report, report_out())
    write_outputs(report, json_out, html_out)
    sys.exit(exit_code(report))
