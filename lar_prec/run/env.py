"""Where a run ran: the environment recorded in run.json, and the differences between runs.

A run's ``environment`` (run.json and every report's ``runs[]``) says which machine and
binary produced its dump: host (``local`` or the ``--remote`` target), ``uname -a``, CPU
model and features, Android model and ABI, the load_and_run and the version it printed, and
the ``MGB_*`` variables it ran with. :func:`environment_differences` lists what differs
between the runs of one report, so a verdict can say "these two runs also differed in
CPU features" next to it. The variables a configuration sets on purpose
(``MGB_USE_MEGDNN_DBG`` of ``naive``) are recorded but not listed as a difference.
No numpy, no megengine.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

#: the fields compared between runs, in the order differences are listed
COMPARED = ("host", "uname", "cpu_model", "cpu_features", "android_model", "android_abi", "load_and_run",
            "load_and_run_version", "mgb_env")

_CPUINFO: Optional[Tuple[Optional[str], Tuple[str, ...]]] = None


def _cpuinfo() -> Tuple[Optional[str], Tuple[str, ...]]:
    """This machine's CPU model and feature flags from /proc/cpuinfo (x86 ``flags``, ARM ``Features``)."""
    global _CPUINFO
    if _CPUINFO is None:
        model, feats = None, ()
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    key, _, value = line.partition(":")
                    key = key.strip().lower()
                    if model is None and key in ("model name", "hardware", "cpu model", "processor") \
                            and value.strip() and not value.strip().isdigit():
                        model = value.strip()
                    elif not feats and key in ("flags", "features"):
                        feats = tuple(sorted(set(value.split())))
        except OSError:
            pass
        _CPUINFO = (model, feats)
    return _CPUINFO


_UNAME: Optional[str] = None


def _uname() -> str:
    """``uname -a`` of this machine, as a device reports its own (os.uname() lacks the OS field)."""
    global _UNAME
    if _UNAME is None:
        import subprocess

        try:
            _UNAME = subprocess.run(["uname", "-a"], capture_output=True, text=True, timeout=10,
                                    stdin=subprocess.DEVNULL).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            _UNAME = ""
        if not _UNAME:
            u = os.uname()
            _UNAME = " ".join((u.sysname, u.nodename, u.release, u.version, u.machine))
    return _UNAME


def _mgb(env: Mapping[str, Optional[str]]) -> Dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith("MGB_") and v is not None}


def local_environment(lar_describe: str, lar_version: Optional[str], env_changes: Mapping[str, Optional[str]],
                      config_vars: Iterable[str] = ()) -> Dict[str, Any]:
    """The environment of a run on this machine (its MGB_* variables: the inherited ones
    with the run's changes applied)."""
    model, feats = _cpuinfo()
    effective = {**{k: v for k, v in os.environ.items() if k.startswith("MGB_")}, **dict(env_changes)}
    return {"host": "local", "transport": "local",
            "uname": _uname(),
            "cpu_model": model, "cpu_features": list(feats), "android_model": None, "android_abi": None,
            "load_and_run": lar_describe, "load_and_run_version": lar_version, "mgb_env": _mgb(effective),
            "config_vars": sorted(config_vars)}


def remote_environment(device: Mapping[str, Any], env_changes: Mapping[str, Optional[str]],
                       config_vars: Iterable[str] = ()) -> Dict[str, Any]:
    """The environment of a run on a device, from :meth:`DeviceInfo.to_json` (its MGB_*
    variables: the run's changes; the device's login environment is not read)."""
    lar = device.get("load_and_run") or {}
    return {"host": device.get("target"), "transport": device.get("transport"), "uname": device.get("uname"),
            "cpu_model": device.get("cpu_model"), "cpu_features": list(device.get("cpu_features") or ()),
            "android_model": device.get("android_model"), "android_abi": device.get("android_abi"),
            "load_and_run": lar.get("path"), "load_and_run_version": lar.get("version"),
            "mgb_env": _mgb(env_changes), "config_vars": sorted(config_vars)}


def _show(field: str, value: Any) -> str:
    if value is None or value == "" or value == []:
        return "(none)"
    if field == "mgb_env":
        return " ".join(f"{k}={v}" for k, v in value.items()) or "(none)"
    return str(value)


def environment_differences(envs: Sequence[Tuple[str, Mapping[str, Any]]]) -> List[Dict[str, Any]]:
    """What differs between the environments of labelled runs: ``[{"field", "values":
    {label: text}}]``. CPU features list, per run, only the features some other run lacks;
    MGB_* variables a run's configuration sets on purpose are left out. Runs without a
    recorded environment (old run.json files) take no part."""
    envs = [(label, env) for label, env in envs if env]
    if len(envs) < 2:
        return []
    out: List[Dict[str, Any]] = []
    for f in COMPARED:
        if f == "cpu_features":
            sets = {label: set(env.get(f) or ()) for label, env in envs}
            common = set.intersection(*sets.values())
            if all(s == common for s in sets.values()):
                continue
            out.append({"field": f, "values": {label: "only: " + (" ".join(sorted(s - common)) or "(none)")
                                               for label, s in sets.items()}})
            continue
        if f == "mgb_env":
            skip = {v for _, env in envs for v in env.get("config_vars") or ()}
            values = {label: _show(f, {k: v for k, v in (env.get(f) or {}).items() if k not in skip})
                      for label, env in envs}
        else:
            values = {label: _show(f, env.get(f)) for label, env in envs}
        if len(set(values.values())) > 1:
            out.append({"field": f, "values": values})
    return out


def format_differences(diffs: Sequence[Mapping[str, Any]], limit: int = 160) -> List[str]:
    """One line per differing field, for the terminal."""
    lines = []
    for d in diffs:
        text = "; ".join(f"{label}: {value}" for label, value in d["values"].items())
        lines.append(f"{d['field']} differs: " + (text if len(text) <= limit else text[:limit - 3] + "..."))
    return lines
