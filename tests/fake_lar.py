#!/usr/bin/env python3
"""A stand-in for an external ``load_and_run`` binary, for runner tests.

Only the standard library: it must behave like a foreign program, not like lar-prec.

* ``--version``: prints ``load_and_run (fake) 1.13.0`` and exits 0; ``--helpfull``: no flag
  list (exit 1), so lar-prec cannot tell its flags and refuses none in advance.
* Otherwise it appends ``{"args": argv[1:], "env": {...}}`` to the JSON-lines file named by
  ``FAKE_LAR_RECORD`` (env: MGB_USE_MEGDNN_DBG, MGB_DUMP_INPUT, FAKE_LAR_EXTRA when present).
* Dumps: with ``--bin-io-dump DIR`` (any gflags spelling) it copies the files of the real dump
  folder ``FAKE_LAR_SOURCE_DUMP`` (``FAKE_LAR_SOURCE_DUMP_NAIVE`` when MGB_USE_MEGDNN_DBG=2
  and that is set) into DIR (which must exist, as for the real binary); with
  ``--io-dump FILE`` it copies ``FAKE_LAR_SOURCE_TEXT`` (or writes one line).
* ``FAKE_LAR_JITTER_VAR``: the dump file name (e.g. ``00000b``) whose first value gets
  clock-dependent low bits flipped, so every run differs there; not when the flag named by
  ``FAKE_LAR_JITTER_UNLESS`` (e.g. ``--reproducible``) is in argv.
* ``FAKE_LAR_MODE``: ``ok`` (default); ``exit1`` (message on stderr, exit 1); ``segv``
  (copies half of the dump, then kills itself with SIGSEGV); ``sleep`` (starts a child
  ``sleep`` in its process group, writes its pid to ``FAKE_LAR_CHILD_PID``, sleeps 60 s);
  ``stall`` (what MegEngine does after some JIT errors on some CPUs: prints
  ``bad err=45 in Xbyak::Error``, then every thread waits forever in a futex, using no CPU); ``busy``
  (burns CPU for ``FAKE_LAR_BUSY_SECONDS``, default 8, then runs as ``ok``: slow but healthy);
  ``drop_output`` (the dump without its last var, the model's output); ``bad_dump`` (its last
  file cut to 30 bytes), both exiting 0.
* ``FAKE_LAR_MODE_IF_FLAG``: ``FLAG=MODE[,FLAG=MODE...]``: that mode when FLAG is in argv
  (e.g. ``--enable-nchw88=sleep,--enable-nhwcd4=segv``), a binary that hangs or crashes
  under one option only.
* ``FAKE_LAR_VERSION_MODE=sleep``: ``--version`` does what ``sleep`` mode does (its child's
  pid goes to ``FAKE_LAR_VERSION_CHILD_PID``) and ignores SIGINT, like a binary stuck in a
  slow start.
* A dump that cannot be written (a full disk) ends the run like the real binary: one
  ``SystemError`` line on stderr, exit 1.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time


def flag_value(argv, name):
    """The value of flag ``name`` (underscore form) in gflags syntax, or None."""
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            continue
        body, eq, value = arg.lstrip("-").partition("=")
        if body.replace("-", "_") == name:
            if eq:
                return value
            return argv[i + 1] if i + 1 < len(argv) else None
    return None


def perturb_first_value(path):
    """Flip low mantissa bits of the first float32 value, differently in every process:
    a stand-in for a kernel whose result changes from run to run."""
    import struct

    with open(path, "r+b") as fh:
        name_len = struct.unpack("<I", fh.read(4))[0]
        offset = 40 + name_len
        fh.seek(offset)
        (bits,) = struct.unpack("<I", fh.read(4))
        fh.seek(offset)
        # microseconds of the start time: two runs never flip the same bits (a pid modulo 7,
        # as before, repeated across three runs about once in 50)
        fh.write(struct.pack("<I", bits ^ (1 + time.time_ns() // 1000 % 65535)))


def sleep_with_child(pid_file):
    """Start a child ``sleep 60`` (in this process group), write its pid, sleep 60 s."""
    child = subprocess.Popen(["sleep", "60"])
    if pid_file:
        with open(pid_file + ".tmp", "w") as fh:
            fh.write(str(child.pid))
        os.replace(pid_file + ".tmp", pid_file)  # the test sees the whole pid or nothing
    time.sleep(60)


def copy_dump(src, dst):
    """Copy one dump file; a failed write ends the run like the real binary's dumper."""
    try:
        shutil.copyfile(src, dst)
    except OSError as exc:
        sys.stderr.write(f"SystemError: failed to write {dst}: {exc.strerror}\n")
        sys.exit(1)


def main():
    argv = sys.argv[1:]
    if argv == ["--version"]:
        if os.environ.get("FAKE_LAR_VERSION_MODE") == "sleep":
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            sleep_with_child(os.environ.get("FAKE_LAR_VERSION_CHILD_PID"))
        print("load_and_run (fake) 1.13.0")
        return 0
    if argv == ["--helpfull"]:  # a foreign program: no gflags flag list (lar-prec then refuses nothing in advance)
        print("load_and_run (fake): no flag list")
        return 1
    record = os.environ.get("FAKE_LAR_RECORD")
    if record:
        env = {k: os.environ[k] for k in ("MGB_USE_MEGDNN_DBG", "MGB_DUMP_INPUT", "FAKE_LAR_EXTRA") if k in os.environ}
        with open(record, "a") as fh:
            fh.write(json.dumps({"args": argv, "env": env}) + "\n")
    mode = os.environ.get("FAKE_LAR_MODE", "ok")
    for item in os.environ.get("FAKE_LAR_MODE_IF_FLAG", "").split(","):
        flag, _, flag_mode = item.partition("=")
        if flag and flag in argv:
            mode = flag_mode
    sys.stderr.write("load model: 1.000ms\n")
    if mode == "exit1":
        sys.stderr.write("[ERR] fake failure\nterminate called after throwing an instance of 'mgb::MegBrainError'\n"
                         "  what():  fake load_and_run error: something went wrong\n")
        return 1
    if mode == "sleep":
        sleep_with_child(os.environ.get("FAKE_LAR_CHILD_PID"))
        return 0
    if mode == "stall":
        sys.stderr.write("bad err=45 in Xbyak::Error\n")
        sys.stderr.flush()
        # no CPU at all until killed: every thread parked in a futex wait, as MegEngine's are
        never = threading.Event()
        for _ in range(2):
            threading.Thread(target=never.wait, daemon=True).start()
        never.wait()
        return 0
    if mode == "busy":
        end = time.monotonic() + float(os.environ.get("FAKE_LAR_BUSY_SECONDS", "8"))
        while time.monotonic() < end:
            sum(range(10000))
    bin_dir = flag_value(argv, "bin_io_dump")
    if bin_dir is not None:
        if not os.path.isdir(bin_dir):
            sys.stderr.write(f"SystemError: failed to open {bin_dir}/000001: No such file or directory\n")
            os.kill(os.getpid(), signal.SIGABRT)
        src = os.environ.get("FAKE_LAR_SOURCE_DUMP")
        if os.environ.get("MGB_USE_MEGDNN_DBG") == "2" and os.environ.get("FAKE_LAR_SOURCE_DUMP_NAIVE"):
            src = os.environ["FAKE_LAR_SOURCE_DUMP_NAIVE"]
        names = sorted(os.listdir(src)) if src else []
        if mode == "segv":
            names = names[: len(names) // 2]
        if mode == "drop_output":  # the run "forgets" its last var: the model's output
            names = names[:-1]
        for name in names:
            copy_dump(os.path.join(src, name), os.path.join(bin_dir, name))
        if mode == "bad_dump" and names:  # a dump cut short (a full disk the run did not notice)
            with open(os.path.join(bin_dir, names[-1]), "r+b") as fh:
                fh.truncate(30)
        jitter = os.environ.get("FAKE_LAR_JITTER_VAR")
        unless = os.environ.get("FAKE_LAR_JITTER_UNLESS")
        if jitter and not (unless and unless in argv):
            perturb_first_value(os.path.join(bin_dir, jitter))
    text = flag_value(argv, "io_dump")
    if text is not None:
        src = os.environ.get("FAKE_LAR_SOURCE_TEXT")
        if src:
            copy_dump(src, text)
        else:
            with open(text, "w") as fh:
                fh.write("var1 produced: name=data layout={1(1) Float32} owner_opr=data{1}[0]{Host2DeviceCopy} opr0\n")
    if mode == "segv":
        sys.stderr.flush()
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGSEGV)
    sys.stderr.write("iter 0/1: e2e=1.000 ms (host=1.000 ms)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
