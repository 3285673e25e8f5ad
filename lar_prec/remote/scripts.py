"""What lar-prec runs on a device: small POSIX ``sh`` scripts, and what they print back.

Each script needs only a POSIX shell and the tools every Linux board and Android phone
has (busybox, toybox or coreutils): mkdir, cat, mv, rm, kill, find, wc, tail, sleep, and
setsid/sha256sum/timeout when present. Paths are quoted with :func:`lar_prec.remote.transport.shell_quote`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.errors import UsageError
from lar_prec.remote.transport import shell_quote

#: last line of a run's wrapper on the device: its load_and_run's exit status
RC_MARKER = "lar-prec-rc="
#: seconds the device gives a timed-out run between SIGTERM and SIGKILL of its process group
KILL_GRACE_SECONDS = 2
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class DeviceInfo:
    """What the device says about itself (recorded in run.json; shown next to verdicts)."""

    transport: str
    target: str
    remote_dir: str
    uname: str
    cpu_model: Optional[str]
    cpu_features: Tuple[str, ...]
    android_model: Optional[str]
    android_abi: Optional[str]
    lar: str
    lar_found: bool
    lar_version: Optional[str]

    def to_json(self) -> Dict[str, Any]:
        """The device facts as a JSON object."""
        return {"transport": self.transport, "target": self.target, "remote_dir": self.remote_dir,
                "uname": self.uname, "cpu_model": self.cpu_model, "cpu_features": list(self.cpu_features),
                "android_model": self.android_model, "android_abi": self.android_abi,
                "load_and_run": {"path": self.lar, "found": self.lar_found, "version": self.lar_version}}


@dataclass(frozen=True)
class RemoteRunPlan:
    """The device folders of one run: pass ``dump_dir`` (or ``text_dump``) to load_and_run."""

    label: str
    dir: str
    dump_dir: Optional[str]
    text_dump: Optional[str]


# ------------------------------------------------------------------ device-side scripts (POSIX sh)

# `set -- $(sha256sum F)` keeps the hash without cut/awk, which some boards lack
HASH_FN = ('h() { if command -v sha256sum >/dev/null 2>&1; then set -- $(sha256sum "$1"); echo "$1"; '
            'elif [ -f "$1.sha256" ]; then cat "$1.sha256"; fi; }')


def run_script(plan: RemoteRunPlan, argv: Sequence[str], env: Mapping[str, Optional[str]]) -> str:
    """The wrapper that runs ``argv`` on the device in a fresh process of its own group.

    load_and_run's output goes to files in the run folder (adb before Android 7 merges the
    streams, and a file survives a dropped connection); its pid goes to ``.pid`` so a timeout
    can kill the group from a second connection; the last line is ``lar-prec-rc=N``.
    """
    lines = ["umask 022", f"mkdir -p {shell_quote(plan.dir)} || exit 3", f"cd {shell_quote(plan.dir)} || exit 3"]
    if plan.dump_dir:
        lines.append(f"mkdir -p {shell_quote(plan.dump_dir)} || exit 3")  # the real binary needs it to exist
    for name, value in env.items():
        if not _NAME.fullmatch(name):
            raise UsageError(f"environment variable name {name!r} is not a shell name")
        lines.append(f"unset {name}" if value is None else f"{name}={shell_quote(value)}; export {name}")
    cmd = " ".join(shell_quote(a) for a in argv)
    redirect = "</dev/null >stdout.txt 2>stderr.txt &"
    lines += [
        # setsid: the run leads its own process group, so one kill reaches all it started
        f"if command -v setsid >/dev/null 2>&1; then setsid {cmd} {redirect}",
        f"else {cmd} {redirect}",
        "fi",
        "pid=$!",
        "echo $pid > .pid",
        "wait $pid",
        "rc=$?",
        "rm -f .pid",
        f"echo {RC_MARKER}$rc",
    ]
    return "\n".join(lines)


def kill_script(run_dir: str, grace: int = KILL_GRACE_SECONDS) -> str:
    """Kill a run's process group on the device: SIGTERM, ``grace`` seconds, SIGKILL."""
    return "\n".join([
        f"cd {shell_quote(run_dir)} 2>/dev/null || {{ echo 'no run folder'; exit 0; }}",
        # fractional sleep where the device has it (busybox, toybox, coreutils), else 1 s
        "nap() { sleep 0.2 2>/dev/null || sleep 1; }",
        # the wrapper may not have written the pid yet when the timeout was short
        "i=0; while [ ! -s .pid ] && [ $i -lt 25 ]; do nap; i=$((i+1)); done",
        "[ -s .pid ] || { echo 'no pid: the run had ended'; exit 0; }",
        "p=$(cat .pid)",
        "kill -TERM -$p 2>/dev/null || kill -TERM $p 2>/dev/null",
        f"i=0; while kill -0 $p 2>/dev/null && [ $i -lt {grace * 5} ]; do nap; i=$((i+1)); done",
        "if kill -0 $p 2>/dev/null; then kill -KILL -$p 2>/dev/null || kill -KILL $p 2>/dev/null; "
        "echo \"killed $p (SIGKILL)\"; else echo \"killed $p (SIGTERM)\"; fi",
        "rm -f .pid",
    ])


def cpu_script(run_dir: str) -> str:
    """What the stall watch of :meth:`RemoteSession.run` polls on the device, from ``/proc``: a
    ``thread STATE WCHAN`` line per thread of the run's process group, then ``cpu=<clock
    ticks>`` (user + system, with reaped children); ``none`` when the run has no pid yet, has
    ended, or the device has no ``/proc``. A wait channel the kernel hides reads ``0``."""
    return "\n".join([
        f"cd {shell_quote(run_dir)} 2>/dev/null || {{ echo none; exit 0; }}",
        "[ -s .pid ] || { echo none; exit 0; }",
        "p=$(cat .pid); t=0; found=0",
        "for s in /proc/[0-9]*/stat; do",
        "  read -r line < \"$s\" 2>/dev/null || continue",
        # after the command name's last ') ': state ppid pgrp ... utime(12) stime(13) cutime cstime
        "  set -- ${line##*) }",
        "  [ \"$3\" = \"$p\" ] || continue",
        "  found=1; t=$((t + ${12} + ${13} + ${14} + ${15}))",
        "  for ts in ${s%/stat}/task/[0-9]*/stat; do",
        "    read -r tl < \"$ts\" 2>/dev/null || continue",
        "    set -- ${tl##*) }",
        # wchan has no newline: read fails but sets w
        "    w=0; read -r w < \"${ts%/stat}/wchan\" 2>/dev/null",
        "    echo \"thread $1 ${w:-0}\"",
        "  done",
        "done",
        "if [ $found = 1 ]; then echo \"cpu=$t\"; else echo none; fi",
    ])


def parse_cpu(out: str) -> Tuple[Optional[int], List[Tuple[str, str]]]:
    """:func:`cpu_script`'s answer: the group's CPU ticks (None: no run to judge) and its
    threads' (state, wait channel)."""
    ticks: Optional[int] = None
    threads: List[Tuple[str, str]] = []
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "thread":
            threads.append((words[1], words[2] if len(words) > 2 else "0"))
        elif line.startswith("cpu=") and line[4:].strip().isdigit():
            ticks = int(line[4:])
    return ticks, threads


def stderr_script(run_dir: str, limit: int = 64 * 1024) -> str:
    """The last ``limit`` bytes of a run's stderr on the device (read when the run looks idle)."""
    return f"cd {shell_quote(run_dir)} 2>/dev/null && tail -c {int(limit)} stderr.txt 2>/dev/null"


def manifest_script(remote_dir: str) -> str:
    """List ``size ./relative/path`` of every file under a folder, then an end marker."""
    return "\n".join([
        f"cd {shell_quote(remote_dir)} || exit 3",
        "rm -f .pid",
        'find . -type f | while IFS= read -r f; do echo "$(wc -c < "$f") $f"; done',
        "echo lar-prec-manifest-end",
    ])


def device_info_script(remote_dir: str, lar: str, probe_dir: str) -> str:
    """The device's facts. ``load_and_run --version`` runs like a run (own process group, its
    pid in ``probe_dir/.pid``), so a Ctrl-C here can end it with :func:`kill_script` on a
    board without ``timeout(1)``, where nothing else would."""
    keys = "model name|Hardware|Processor|CPU part|CPU implementer|CPU architecture|flags|Features|isa|uarch"
    q = shell_quote(probe_dir)
    return "\n".join([
        "echo @@uname; uname -a 2>&1",
        f"echo @@cpu; grep -E '^({keys})[[:space:]]*:' /proc/cpuinfo 2>/dev/null | sort -u",
        "echo @@getprop; if command -v getprop >/dev/null 2>&1; then "
        "echo \"model=$(getprop ro.product.model)\"; echo \"abi=$(getprop ro.product.cpu.abi)\"; fi",
        f"echo @@lar; if command -v {shell_quote(lar)} >/dev/null 2>&1; then echo found; "
        "T=; if command -v timeout >/dev/null 2>&1; then T='timeout 20'; fi; "
        f"mkdir -p {q} && cd {q} && {{ "
        f"if command -v setsid >/dev/null 2>&1; then setsid $T {shell_quote(lar)} --version </dev/null >version.txt 2>&1 & "
        f"else $T {shell_quote(lar)} --version </dev/null >version.txt 2>&1 & fi; "
        "pid=$!; echo $pid > .pid; wait $pid; rm -f .pid; head -n 3 version.txt; cd / ; "
        f"rm -rf {q}; }}; else echo missing; fi",
        "echo @@end",
    ])


def parse_device_info(text: str, *, transport: str, target: str, remote_dir: str, lar: str) -> DeviceInfo:
    """A DeviceInfo from the output of the device-info script."""
    sections: Dict[str, List[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            sections[current] = []
        elif current:
            sections[current].append(line.rstrip())
    cpu: Dict[str, str] = {}
    features: set = set()
    for line in sections.get("cpu", []):
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in ("flags", "Features", "isa"):
            features.update(value.split())
        elif value:
            cpu.setdefault(key, value)
    model = next((cpu[k] for k in ("model name", "Hardware", "Processor", "uarch") if k in cpu), None)
    if model is None and "CPU part" in cpu:
        model = f"CPU implementer {cpu.get('CPU implementer', '?')} part {cpu['CPU part']}"
    props = dict(ln.partition("=")[::2] for ln in sections.get("getprop", []) if "=" in ln)
    lar_lines = sections.get("lar", [])
    found = bool(lar_lines) and lar_lines[0] == "found"
    version = "\n".join(ln for ln in lar_lines[1:] if ln.strip()) or None
    return DeviceInfo(transport, target, remote_dir, "\n".join(sections.get("uname", [])).strip(), model,
                      tuple(sorted(features)), props.get("model") or None, props.get("abi") or None, lar,
                      found, version if found else None)
