"""JUnit XML of ``check`` and ``zoo`` (``--junit FILE``), what CI systems show as failed tests:
``check``: one test case per regressed operator (a failure with its numbers), per improved one
(passing, said in its output), the run's history (skipped while it is too short to judge) and
the baseline; ``zoo``: one test case per cell (model x column x build x device), a failure for a
divergence or a regression, an error for a task that did not finish. Drawn from the commands'
JSON (``lar-prec.check/1``, ``lar-prec.zoo/1``); ElementTree escapes every value."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, List, Mapping, Optional


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.3g}"


def _case(suite: ET.Element, classname: str, name: str, *, failure: Optional[str] = None, details: str = "",
          error: Optional[str] = None, skipped: Optional[str] = None, out: str = "") -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
    if failure is not None:
        ET.SubElement(case, "failure", message=failure, type="regression").text = details or failure
    if error is not None:
        ET.SubElement(case, "error", message=error, type="error").text = details or error
    if skipped is not None:
        ET.SubElement(case, "skipped", message=skipped)
    if out:
        ET.SubElement(case, "system-out").text = out


def _text(suites: List[ET.Element]) -> str:
    root = ET.Element("testsuites", name="lar-prec")
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in suites:
        cases = s.findall("testcase")
        counts = {"tests": len(cases), "failures": sum(c.find("failure") is not None for c in cases),
                  "errors": sum(c.find("error") is not None for c in cases),
                  "skipped": sum(c.find("skipped") is not None for c in cases)}
        for k, v in counts.items():
            s.set(k, str(v))
            total[k] += v
        root.append(s)
    for k, v in total.items():
        root.set(k, str(v))
    ET.indent(root, space=" ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def check_junit(res: Mapping[str, Any]) -> str:
    """The JUnit XML of a ``check`` result."""
    run = res["run"]
    klass = ".".join(x for x in ("lar-prec.check", run.get("model_name"), run.get("command"), run.get("config")) if x)
    suite = ET.Element("testsuite", name=f"lar-prec check of run {run['uid'][:12]}", timestamp=str(run.get("created")))
    history = f"history of {run['uid'][:12]} ({res['history_runs']} past runs)"
    if res["enough_history"]:
        _case(suite, klass, history, out=res["verdict"])
    else:
        _case(suite, klass, history, skipped=res["verdict"])
    for v in res["regressed"] + res["improved"]:
        opt = f" under {v['option']}" if v.get("option") else ""
        name = f"{v['name']} ({v['opr_type']}){opt}"
        good = v.get("last_good") or {}
        details = "\n".join(x for x in (
            f"{v['verdict']}{' (root)' if v['root'] else ''}: {v['why']}",
            f"algorithm: {v['algorithm_changed']}" if v.get("algorithm_changed") else "",
            f"last good: run {str(good.get('uid'))[:12]} {good.get('created')} ({good.get('build')})" if good else "",
            f"checked run: {run['uid']}") if x)
        if v["verdict"] == "regressed":
            _case(suite, klass, name, failure=f"regressed{' (root)' if v['root'] else ''}: {v['why']}", details=details)
        else:
            _case(suite, klass, name, out=details)
    for v in (res.get("speed") or {}).get("parts") or ():
        name = f"speed of {v['option'] or 'the default run'}"
        if v["verdict"] == "regressed":
            _case(suite, klass, name, failure=f"regressed: {v['why']}", details=f"{v['why']}\nchecked run: {run['uid']}")
        elif v["verdict"] in ("not_judged", "not_timed"):
            _case(suite, klass, name, skipped=v["why"])
        else:
            _case(suite, klass, name, out=f"{v['verdict']}: {v['why']}")
    for n in res["nondeterministic"]:
        spread = "NaN/Inf in some runs" if n["nonfinite"] else f"spread {_num(n['spread'])}"
        _case(suite, klass, f"{n['name']} ({n['opr_type']}) repeatability",
              skipped=f"nondeterministic: {spread} over {n['runs']} runs of one build; never a regression of itself")
    base = res.get("baseline")
    if base:
        bad = base["state"] in ("regressed", "improved", "unrecorded")
        _case(suite, klass, f"baseline {base['file']}", failure=f"{base['state']}: {base['why']}" if bad else None,
              out="" if bad else base["why"])
    return _text([suite])


def zoo_junit(data: Mapping[str, Any]) -> str:
    """The JUnit XML of a ``zoo`` result: a test suite per model, a test case per cell."""
    suites: dict = {}
    for e in data["tasks"]:
        suite = suites.get(e["model"])
        if suite is None:
            suite = suites[e["model"]] = ET.Element("testsuite", name=f"lar-prec zoo {data['name']}: {e['model']}")
        klass = f"lar-prec.zoo.{data['name']}.{e['model']}"
        where = f"{e['build']} @ {e['device']}"
        if e["state"] == "failed":
            why = str(e.get("why") or e.get("verdict") or "failed")
            _case(suite, klass, f"{e['column']} on {where}", error=f"did not finish: {why}")
            continue
        for c in e["cells"] or [{"column": e["column"], "bad": e["exit_code"] == 1, "output_err": None, "root": None}]:
            regressed = c["regressed"] if "regressed" in c else e["regressed"]
            nums = f"output error {_num(c.get('output_err'))}" + (f", root {c['root']}" if c.get("root") else "")
            name = f"{c['column']} on {where}"
            stored = " (result already in the store)" if e["state"] == "stored" else ""
            slow = [v for v in (e.get("speed") or {}).get("parts") or ()
                    if v["verdict"] == "regressed" and (v["option"] or "default") in (c.get("speed_regressed") or ())]
            if slow and not regressed:
                _case(suite, klass, name, failure=f"speed regressed: {slow[0]['why']}; {nums}",
                      details=f"{nums}\nspeed: {slow[0]['why']}\nverdict: {e.get('verdict')}")
            elif regressed:
                _case(suite, klass, name, failure=f"regressed: {', '.join(regressed[:5])}; {nums}",
                      details=f"{nums}\nregressed operators: {', '.join(regressed)}\nverdict: {e.get('verdict')}")
            elif c.get("bad"):
                _case(suite, klass, name, failure=f"divergent: {nums}", details=f"{nums}\nverdict: {e.get('verdict')}")
            else:
                _case(suite, klass, name, out=f"ok: {nums}{stored}")
    return _text(list(suites.values()))
