"""The main benchmark's targets as data (issues 7, 24, 40, 41): each one a row of RESULTS.md's
targets table, what it reads from the sections, its goal and how its value is shown."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Union

from sections import CHAIN_VARS, ROOTING_VARS, Section


class Measured:
    """What the targets read of the sections: each one's data, empty where the section was
    skipped (and, for those a missing piece makes unavailable, where it is not available)."""

    def __init__(self, sections: Dict[str, Section]) -> None:
        def data(name: str, available: bool = False) -> Dict[str, Any]:
            s = sections.get(name)
            return s.data if s is not None and (s.available or not available) else {}

        self.cmp, self.many = data("compare"), data("many")
        self.mem, self.st, self.nv = data("memory", True), data("startup", True), data("naive-vs-default", True)
        self.rooting_all, self.rooting = data("rooting"), data("rooting", True)
        self.lar = self.cmp.get("lar-prec")
        self.n = self.many.get("n_vars")
        other = [t for t in self.cmp.get("tools", []) if t.startswith("lar-prec --")]
        #: the first `lar-prec --...` row (--jobs 1), shown beside lar-prec's own
        self.alt_name, self.alt = (other[0], self.cmp[other[0]]) if other else ("", None)

    def per_var_us(self, tool: str) -> Optional[float]:
        """Median whole-process microseconds per variable of ``tool`` on the many-variable pair."""
        d = self.many.get(tool)
        return d["median_s"] / self.n * 1e6 if d and d.get("median_s") and self.n else None

    def peak_mb(self) -> Optional[float]:
        """The memory section's peak, else (the big pair skipped) the main pair's."""
        peak = self.mem.get("peak_mb")
        if peak is None and self.lar:
            peak = max(self.lar["maxrss_mb"], self.lar.get("tree_peak_mb") or 0.0)
        return peak

    def small_vars(self) -> str:
        return f"{self.n or 20_000:,} small vars"


Text = Union[str, Callable[[Measured], str]]


@dataclass(frozen=True)
class Target:
    """One target: its label, the value measured (None: not available), how it is shown, the
    goal as written (``{}``: the limit, times 100 with ``percent``) and the rule: PASS at or
    above ``limit`` when ``higher``, else PASS below it. ``optional``: no row without a value."""

    label: Text
    value: Callable[[Measured], Optional[float]]
    shown: Callable[[Measured, float], str]
    goal: str
    limit: float
    higher: bool
    percent: bool = False
    optional: bool = False

    def row(self, m: Measured) -> Dict[str, Any]:
        value = self.value(m)
        label = self.label if isinstance(self.label, str) else self.label(m)
        if value is None:
            result = "n/a"
        else:
            result = "PASS" if (value >= self.limit if self.higher else value < self.limit) else "FAIL"
        return {"target": label, "value": value, "shown": self.shown(m, value) if value is not None else "not available",
                "goal": self.goal.format(f"{100 * self.limit if self.percent else self.limit:g}"), "result": result}


def _alt(m: Measured, key: str, fmt: str) -> str:
    return f" (`{m.alt_name}`: {fmt.format(m.alt[key])})" if m.alt and m.alt.get(key) else ""


def _megengine_imports(m: Measured) -> Dict[str, Any]:
    """Neither `--help` nor `compare` imports megengine (not a number: its own row)."""
    imp = m.st.get("megengine_imported_by")
    if imp is None:
        return {"target": "no megengine import (--help, compare)", "value": None, "shown": "not available",
                "goal": "none imported", "result": "n/a"}
    bad = {k: v for k, v in imp.items() if v}
    shown = "none (" + ", ".join(imp) + ")" if not bad else "; ".join(f"{k}: {', '.join(v[:3])}" for k, v in bad.items())
    if "compare" not in imp:
        shown += "; compare not checked (not available)"
    return {"target": "no megengine import (--help, compare)", "value": not bad, "shown": shown,
            "goal": "none imported", "result": "PASS" if not bad and "compare" in imp else ("FAIL" if bad else "n/a")}


#: the targets table, in its order (issue 7, then 24, 40, 41)
TARGETS: List[Union[Target, Callable[[Measured], Dict[str, Any]]]] = [
    # lar-prec compare at least 5x faster than MegEngine's script
    Target("compare: speed vs MegEngine compare_binary_iodump (main pair)", lambda m: m.cmp.get("speedup"),
           lambda m, v: f"{v:.1f}x" + _alt(m, "speedup", "{:.1f}x"), ">= {}x", 5.0, True),
    # GB/s of dump read (both folders) per second of wall time
    Target("compare: dump read throughput (main pair, whole process)", lambda m: m.lar.get("gbps") if m.lar else None,
           lambda m, v: f"{v:.2f} GB/s" + _alt(m, "gbps", "{:.2f} GB/s"), ">= {} GB/s", 1.5, True),
    # peak RSS of lar-prec compare, any dump size
    Target(lambda m: "compare: peak RSS (big pair)" + (" (main pair only; big pair skipped)"
                                                       if m.mem.get("peak_mb") is None and m.lar else ""),
           Measured.peak_mb, lambda m, v: f"{v:.0f} MB", "< {} MB", 150.0, False),
    Target("`lar-prec --help` wall time", lambda m: m.st.get("help_median_s"), lambda m, v: f"{v:.3f} s", "< {} s", 0.5,
           False),
    _megengine_imports,
    Target(lambda m: f"rooting a graph of {m.rooting_all.get('n_vars', ROOTING_VARS):,} variables",
           lambda m: m.rooting.get("median_s"), lambda m, v: f"{v:.3f} s", "< {} s", 2.0, False),
    # issue 41: tree, root and its path, a chain 50,000 vars deep
    Target(lambda m: f"path to a root {m.rooting['chain']['depth'] if m.rooting.get('chain') else CHAIN_VARS:,} vars deep "
                     "(tree, roots, path)",
           lambda m: m.rooting["chain"]["median_s"] if m.rooting.get("chain") else None, lambda m, v: f"{v:.3f} s",
           "< {} s", 2.0, False),
    # naive-vs-default analysis time / load_and_run time
    Target("naive-vs-default (worst of resnet, vit, mobilenetv3, gru_topk): analysis time / load_and_run time",
           lambda m: m.nv.get("overhead_median"), lambda m, v: f"{100 * v:.1f}%", "< {}%", 0.20, False, percent=True),
    # issue 24: lar-prec compare on 20,000 small vars, whole process, per var; against MegEngine's script
    Target(lambda m: f"compare: per variable, {m.small_vars()} (whole process)", lambda m: m.per_var_us("lar-prec"),
           lambda m, v: f"{v:.0f} us", "<= {} us", 50.0, False),
    Target("compare: speed vs MegEngine on the many-variable pair", lambda m: m.many.get("speedup"),
           lambda m, v: f"{v:.2f}x", ">= {}x", 3.5, True),
    # big pair: lar-prec's speed as a share of `cat` of both folders
    Target("compare: big pair speed / `cat` of both folders", lambda m: m.mem.get("of_cat"),
           lambda m, v: f"{100 * v:.0f}% (cat {m.mem['cat_gbps']:.2f} GB/s)", ">= {}%", 0.5, True, percent=True),
    # issue 40: the default threshold as fast as a fixed one; statistics at little cost
    Target(lambda m: f"compare --threshold auto / fixed, {m.small_vars()} (same run)",
           lambda m: m.many.get("auto_over_fixed"), lambda m, v: f"{v:.2f}x", "<= {}x", 1.2, False),
    Target(lambda m: f"compare --threshold auto: per variable, {m.small_vars()}", lambda m: m.per_var_us("lar-prec, auto"),
           lambda m, v: f"{v:.0f} us", "<= {} us", 50.0, False),
    Target("compare --threshold auto: main pair speed / `cat` of both folders", lambda m: m.cmp.get("auto_of_cat"),
           lambda m, v: f"{100 * v:.0f}% (cat {m.cmp['cat_s']:.2f} s)", ">= {}%", 0.5, True, percent=True),
    # main pair, fixed threshold: this build against --before (statistics added)
    Target("compare, main pair, fixed threshold: time / `--before`", lambda m: m.cmp.get("over_before"),
           lambda m, v: f"{v:.2f}x" + (f"; {m.small_vars()} {m.many['over_before']:.2f}x" if m.many.get("over_before")
                                       else ""), "<= {}x", 1.1, False, optional=True),
]


def targets(sections: Dict[str, Section]) -> List[Dict[str, Any]]:
    """The targets with the measured values and PASS/FAIL/n/a."""
    m = Measured(sections)
    return [t.row(m) if isinstance(t, Target) else t(m) for t in TARGETS
            if not (isinstance(t, Target) and t.optional and t.value(m) is None)]
