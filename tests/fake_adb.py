#!/usr/bin/env python3
"""A stand-in for Android's ``adb`` for tests: ``devices``, ``push``, ``pull``, ``shell``, ``-s``.

Devices are local folders: ``FAKE_ADB_DEVICES="SERIAL=/abs/root;SERIAL2=/abs/root2"``. A
device's files live at their real absolute paths, which must lie under its root (so the
device's shell, a local ``sh``, sees the same paths that push and pull use); anything outside
is refused like an unwritable folder on a phone.

It follows the real adb's command-line rules:
* ``adb [-s SERIAL] CMD ...``; without ``-s`` (and without $ANDROID_SERIAL) exactly one device
  must be attached ("adb: more than one device/emulator" otherwise);
* ``push LOCAL REMOTE`` creates REMOTE's parents; ``pull REMOTE LOCAL`` copies a folder's
  content into LOCAL when LOCAL does not exist, else into LOCAL/basename(REMOTE);
* ``shell ARGS...`` joins ARGS with spaces into ONE string for the device's ``sh -c``, and exits
  with its status (adb's shell protocol v2), stdout and stderr kept apart.

Every call is appended to ``$FAKE_ADB_LOG`` (one JSON argv per line) when set. Faults for tests:
* ``FAKE_ADB_TRUNCATE_ON_PULL=NAME``: while pulling a folder, the device's file NAME is cut to
  half its size just before it is copied (a file changing under the pull; adb still exits 0);
* ``FAKE_ADB_FAIL_PULL_AFTER=N``: a folder pull stops after N files with adb's error, exit 1.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List


def die(msg: str, code: int = 1) -> "None":
    sys.stderr.write(msg + "\n")
    sys.exit(code)


def devices() -> Dict[str, Path]:
    out: Dict[str, Path] = {}
    for item in os.environ.get("FAKE_ADB_DEVICES", "").split(";"):
        if "=" in item:
            serial, root = item.split("=", 1)
            out[serial] = Path(root).resolve()
    return out


def on_device(root: Path, remote: str) -> Path:
    if not remote.startswith("/"):
        die(f"adb: error: remote path '{remote}' is not absolute")
    p = Path(os.path.normpath(remote))
    if p != root and root not in p.parents:
        die(f"adb: error: failed to access '{remote}': Permission denied")
    return p


def push(root: Path, local: str, remote: str) -> None:
    src = Path(local)
    if not src.is_file():
        die(f"adb: error: cannot stat '{local}': No such file or directory")
    dest = on_device(root, remote)
    if remote.endswith("/") or dest.is_dir():
        dest = dest / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    print(f"{local}: 1 file pushed, 0 skipped.")


def pull(root: Path, remote: str, local: str) -> None:
    src = on_device(root, remote)
    if not src.exists():
        die(f"adb: error: failed to stat remote object '{remote}': No such file or directory")
    dest = Path(local)
    if src.is_file():
        if dest.is_dir():
            dest = dest / src.name
        shutil.copyfile(src, dest)
        print(f"{remote}: 1 file pulled, 0 skipped.")
        return
    if dest.exists():
        dest = dest / src.name
    truncate = os.environ.get("FAKE_ADB_TRUNCATE_ON_PULL")
    fail_after = int(os.environ.get("FAKE_ADB_FAIL_PULL_AFTER", "-1"))
    count = 0
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        if count == fail_after:
            die(f"adb: error: failed to copy '{f}' to '{dest / f.relative_to(src)}': connection reset by peer")
        if truncate and f.name == truncate:
            with open(f, "r+b") as fh:
                fh.truncate(f.stat().st_size // 2)
        target = dest / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
        count += 1
    dest.mkdir(parents=True, exist_ok=True)
    print(f"{remote}/: {count} files pulled, 0 skipped.")


def main(argv: List[str]) -> int:
    log = os.environ.get("FAKE_ADB_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(json.dumps(["adb", *argv]) + "\n")
    serial = os.environ.get("ANDROID_SERIAL")
    if argv[:1] == ["-s"]:
        if len(argv) < 2:
            die("adb: -s requires an argument")
        serial, argv = argv[1], argv[2:]
    if not argv:
        die("adb: usage: no command given")
    known = devices()
    cmd, args = argv[0], argv[1:]
    if cmd == "devices":
        print("List of devices attached")
        for s in known:
            print(f"{s}\tdevice")
        return 0
    if serial is None:
        if not known:
            die("adb: no devices/emulators found")
        if len(known) > 1:
            die("adb: more than one device/emulator")
        serial = next(iter(known))
    if serial not in known:
        die(f"adb: device '{serial}' not found")
    root = known[serial]
    if cmd == "push":
        if len(args) != 2:
            die("adb: usage: push LOCAL... REMOTE")
        push(root, *args)
        return 0
    if cmd == "pull":
        if len(args) != 2:
            die("adb: usage: pull REMOTE... LOCAL")
        pull(root, *args)
        return 0
    if cmd == "shell":
        if not args:
            die("adb: interactive shell is not supported by the fake adb")
        return subprocess.run(["sh", "-c", " ".join(args)], cwd=str(root), stdin=subprocess.DEVNULL).returncode
    die(f"adb: unknown command {cmd}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
