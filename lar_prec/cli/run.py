"""The commands that run load_and_run once: ``run`` (one configuration on a model) and
``replay`` (a repro folder again). Each imports what it runs when it runs, so ``lar-prec
--help`` stays fast."""
from __future__ import annotations

import sys

import click

from lar_prec.cli.common import handle_errors, remote_from_options, remote_options
from lar_prec.report.console import shown


@click.command("run")
@click.argument("model", type=click.Path(path_type=str))
@click.option("--config", "config_name", type=click.Choice(["naive", "default", "reproducible", "fast-run"]),
              default="default", show_default=True,
              help="naive: MGB_USE_MEGDNN_DBG=2 --cpu; reproducible: --reproducible; fast-run: --fast-run.")
@click.option("--input", "inputs", multiple=True, metavar="SPEC",
              help="name:file.npy | name:{1,3,8,8} (seeded random) | name:[1,2,3] | name:random[LOW,HIGH]@SEED; "
                   "repeat or join with ';'. Without --input every input gets seeded random data.")
@click.option("--text-dump", is_flag=True, help="--io-dump a text file instead of --bin-io-dump (its own run).")
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Analysis folder; the previous analysis there is replaced, any other non-empty folder "
                   "refused. [default: ./lar-prec-out/run-N]")
@click.option("--keep-previous", is_flag=True, help="Keep the previous analysis of --out as OUT.prev.")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="load_and_run to use ('bundled' for python -m lar_prec.lar). "
                   "[default: $LAR_PREC_LOAD_AND_RUN, load_and_run on PATH, bundled]")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill the run (its whole process group) after S seconds.")
@click.option("--lar-args", "lar_args", multiple=True, metavar="FLAGS",
              help="Extra load_and_run flags, e.g. --lar-args '--multithread 2'.")
@click.option("--env", "env_items", multiple=True, metavar="NAME=VALUE",
              help="Extra environment for the run (-NAME removes a variable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random data for shape-only inputs.")
@remote_options
@handle_errors
def run_cmd(model: str, config_name: str, inputs: tuple, text_dump: bool, out: str | None, lar_path: str | None,
            keep_previous: bool,
            timeout: float | None, lar_args: tuple, env_items: tuple, seed: int, remote: str | None,
            remote_dir: str | None, keep_remote: bool) -> None:
    """Run load_and_run once on MODEL and keep its dump and run.json.

    Prints the run folder. Exit code 0 when the run succeeded, 3 when load_and_run failed
    (crash, error, timeout: its stderr tail is shown and kept in the run folder), 2 for
    usage or input errors.
    """
    from lar_prec.run.argv import parse_env_assignments, split_lar_args
    from lar_prec.run.once import single_run
    from lar_prec.run.settings import Settings

    settings = Settings(model=model, inputs=inputs, out=out, keep_previous=keep_previous, lar=lar_path, timeout=timeout,
                        extra_flags=split_lar_args(lar_args), env=parse_env_assignments(env_items), seed=seed,
                        remote=remote_from_options(remote, lar_path, remote_dir, keep_remote))
    result = single_run(settings, config_name, text_dump=text_dump)
    click.echo(shown(str(result.dir)))
    what = result.text_dump if result.text_dump is not None else result.dump_dir
    made = [i["name"] for i in result.inputs if (i.get("generated") or {}).get("why")]
    said = f"; inputs: seeded random, no --input given ({', '.join(made)})" if made else ""
    click.echo(shown(f"ok: {result.config} run in {result.seconds:.2f} s; dump: {what}{said}"), err=True)


@click.command("replay")
@click.argument("repro_dir", type=click.Path(path_type=str))
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill a run after S seconds. [default: 600]")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="The load_and_run whose output is in question (the test side). [default: bundled]")
@handle_errors
def replay_cmd(repro_dir: str, timeout: float | None, lar_path: str | None) -> None:
    """Run a repro folder (repro-<id>/ of an analysis) again and say whether it reproduces.

    Runs the one-operator model under the test and the reference configuration, each in a
    fresh load_and_run (the test side's: --lar), on the recorded inputs. Exit code 1 when the
    divergence is reproduced (the test output is the recorded one bit for bit, or at least
    half the recorded error away from the reference: "not bit for bit"), 0 when it is not,
    2 for a folder that is not a repro, 3 when a run failed.
    """
    from lar_prec.diagnosis.local import DEFAULT_TIMEOUT
    from lar_prec.diagnosis.replay import replay, replay_verdict

    code, line = replay_verdict(replay(repro_dir, timeout=timeout or DEFAULT_TIMEOUT, lar=lar_path))
    click.echo(line)
    sys.exit(code)
