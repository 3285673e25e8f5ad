#!/usr/bin/env python3
"""A stand-in for a user's own load_and_run build that really runs models: a wrapper around
the bundled one (``python -m lar_prec.lar``), for the tests of local error with ``--lar`` and
``--remote``. Only the standard library here; MegEngine runs in the children.

* ``--version``: prints ``load_and_run (wrapped) 1.13.0``.
* ``WRAPPED_LAR_FAULT=NAME:SIZE`` (e.g. ``c2.weight:1e-4``): a binary whose default kernels
  are wrong for one layer. Unless ``MGB_USE_MEGDNN_DBG=2`` (the naive reference kernels), the
  model it is given (the user's model or a layerwise model: both keep the weight's name) is
  run with constant NAME scaled by 1+SIZE, rewritten by ``lar_prec.lar.layerwise_build
  .rewrite_const``; under naive kernels it is rewritten with a factor of 1, so both sides run
  the same re-dumped graph (same var ids, same weight alignment). A wrong kernel leaves the
  weight as it is: the dumped constant NAME gets the model's own value back (else the two
  runs would show different weights, which compare reports as such); so under
  ``WRAPPED_LAR_JITTER`` and ``WRAPPED_LAR_OP_FAULT``.
* ``WRAPPED_LAR_OP_FAULT=NAME:SIZE``: a binary whose kernel for the operator reading constant
  NAME is wrong: its output comes out 1+SIZE times too large (the model runs with NAME scaled,
  as the fault).
  SIZE ``bits=N``: the kernel computes with NAME rounded to N mantissa bits (a changed
  algorithm, as TF32's 10 bits); ``u=S``: with each element of NAME times 1 + S u, u ~ U[-1, 1]
  from a fixed seed (a kernel a little off at every element, issue 57); ``nan``: its output is
  NaN. Opt-in: only these values do it.
* ``WRAPPED_LAR_PAIR_FAULT=NAME:SIZE``: a fault that needs two operators in a row: the kernel of
  the operator reading constant NAME (a convolution) is wrong, 1+SIZE times too large, only when
  its output is consumed by a ReLU (``RELU`` or ``FUSE_ADD_RELU``) in the same graph (as a fused
  kernel would be); the dump shows NAME with its own values (as the operator fault). Alone, its
  output a model output, it is right, unless ``WRAPPED_LAR_PAIR_ALONE=crash``: then the binary
  aborts (SIGABRT), a different failure. Without NAME in the model it runs the model as given.
* ``WRAPPED_LAR_CACHE=FOLDER``: keep each rewritten model (by the model's bytes, NAME and
  factor) there, so later runs skip the rewrite (its MegEngine import is most of a run).
* ``WRAPPED_LAR_FAULT_IF_FLAG=FLAG=NAME:SIZE`` (e.g. ``--enable-nchw44=c2.weight:1e-2``): the
  same fault, only in runs whose argv holds FLAG: a kernel that is wrong under one option.
* ``WRAPPED_LAR_JITTER=NAME:SIZE``: a default kernel that jitters: as the fault, with a
  factor 1 + SIZE x (a random number in [0.5, 1.5), new in every process), unless
  ``--reproducible`` is in argv. With ``WRAPPED_LAR_JITTER_DIR=FOLDER`` the k-th process
  (counted by files made there) takes 1 + k instead: any two differ by SIZE or more, so a test
  can tell a jitter from rounding every time.
* ``WRAPPED_LAR_JITTER_IF_FLAG=FLAG=NAME:SIZE`` (e.g. ``--enable-ioc16=c2.weight:1e-2``): the
  jitter, only in runs whose argv holds FLAG (a kernel that differs run to run under one option,
  as one reading memory it did not write); with ``WRAPPED_LAR_JITTER_DIR`` any two of those runs
  differ by SIZE or more. Its naive runs (``MGB_USE_MEGDNN_DBG=2``) keep the weight.
* ``WRAPPED_LAR_RACE=NAME:SIZE``: a default kernel that reads memory it did not write: wrong by
  about SIZE and never the same twice. As the fault, with the k-th process's factor
  1 + SIZE x (1 + k/10) (k counted in ``WRAPPED_LAR_JITTER_DIR``, which it needs; naive runs are
  not counted and get 1): its distance from a correct run (about SIZE) stays above its own spread
  over up to 10 runs (k/10 x SIZE), as MegEngine's float16 max pooling under ``--enable-ioc16``
  is on some x86 CPUs.
* ``WRAPPED_LAR_HANG=TEXT``: on a model whose path contains TEXT it hangs, with a child
  ``sleep`` in its process group whose pid goes to ``WRAPPED_LAR_HANG_PID``.
* ``WRAPPED_LAR_RENUMBER=OFFSET``: its dumps number vars differently from the graph MegEngine
  loads in Python (as a real load_and_run in MDL mode may): every var id in the
  ``--bin-io-dump`` folder (file names and titles) is shifted by OFFSET.
* ``WRAPPED_LAR_TIES=reorder``: default kernels that order ties another way: the index outputs
  of TopK and ArgSort it dumps list tied values in reverse order, an ArgMax picks the last of
  tied maxima (the values are the same). ``WRAPPED_LAR_TIES=wrong``: a TopK that returns a
  wrong index (the first of each row swapped with the row's smallest value's).
* ``WRAPPED_LAR_CRASH_TIMED=FLAG``: a build that crashes (SIGABRT) only when it runs without
  any dump (a timed run: no ``--bin-io-dump``, ``--io-dump`` or ``--bin-out-dump``) and its
  argv holds FLAG: an option that loads and dumps, and crashes when timed.
* ``WRAPPED_LAR_SLOW_TIMED=FLAG:SECONDS[:after]``: in a timed run (no dump) whose argv holds
  FLAG it waits SECONDS before running the model (an option whose load and warm-up are slow, as
  float16 emulated on x86 is); with ``:after``, once the model ran and printed its iterations
  (a process that lingers past its time).
* ``WRAPPED_LAR_SLOW=MS``: a slower build: each timed iteration (load_and_run's ``iter k/N:
  e2e=X ms`` line) takes MS milliseconds more: the wrapper sleeps that long when the line comes
  and prints it with X + MS (``host=`` too), so every timing of it is slower on any CPU.
* ``WRAPPED_LAR_FLAG_AS=FROM=TO,...`` (e.g. ``--const-shape=,--enable-nchw44-dot=--enable-nchw44``):
  a build where option FROM is option TO, or does nothing (TO empty: FROM is dropped from argv),
  as a build that accepts a flag it does not implement; its runs under FROM are bit for bit
  those under TO.
* ``WRAPPED_LAR_REFUSE=TEXT``: like an old build that cannot load some models, it fails (exit
  1, MegEngine's style of message) on any model whose path contains TEXT.
"""
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time


#: shifts every var id of a dump folder (run in a child: this script imports no lar_prec)
RENUMBER = """
import dataclasses, os, sys
from lar_prec.dumps.binary import dump_file_name, read_binary_dump, write_binary_dump
from lar_prec.dumps.titles import format_title
folder, k = sys.argv[1], int(sys.argv[2])
shift = lambda v: dataclasses.replace(v, id=v.id + k)
for name in sorted(n for n in os.listdir(folder) if not n.startswith(".")):  # not lar-prec's marker
    path = os.path.join(folder, name)
    d = read_binary_dump(path)
    title = format_title(shift(d.var), [shift(u) for u in d.inputs])
    write_binary_dump(os.path.join(folder, dump_file_name(d.var.id + k)), d.array(), title, d.var.dtype)
    os.remove(path)
"""


#: a fault's rewrite: the model with the constant changed (scaled by a factor, rounded
#: to ``bits=N`` mantissa bits, ``nan``), and the constant's own values
OP_FAULT = """
import sys
import numpy as np
import megengine.utils.comp_graph_tools as cgt
from megengine.core.tensor import megbrain_graph as G
from lar_prec.lar.const_rewrite import rewrite_const
model, name, change, out, original = sys.argv[1:]
def rounded(value, bits):
    drop = 23 - bits  # float32: round to nearest on the mantissa's top bits
    i = np.ascontiguousarray(value, dtype=np.float32).view(np.uint32).astype(np.uint64)
    i = (i + (1 << (drop - 1))) & ~np.uint64((1 << drop) - 1)
    return i.astype(np.uint32).view(np.float32)
if change.startswith("bits="):
    rewrite_const(model, name, lambda v: rounded(v, int(change[5:])), out)
elif change.startswith("u="):  # elementwise, the same u in every process
    def jitter(v):
        u = np.random.default_rng(0).uniform(-1.0, 1.0, np.shape(v))
        return (np.asarray(v, dtype=np.float64) * (1.0 + float(change[2:]) * u)).astype(np.asarray(v).dtype)
    rewrite_const(model, name, jitter, out)
else:
    rewrite_const(model, name, lambda v: v * float(change), out)
found = cgt.find_vars_by_name(G.load_graph(model).output_vars_list, [name])
np.save(original, np.asarray(found[0].value))
"""

#: the pair fault's rewrite: how the operator reading the constant is used (``pair``: a ReLU
#: consumes its output; ``alone``: nothing does; ``other``; ``absent``: no such constant), and
#: the model with the constant scaled by the factor given for that use
PAIR_FAULT = """
import sys
import numpy as np
from lar_prec.lar import quickimport
quickimport.import_megengine()
import megengine.utils.comp_graph_tools as cgt
from megengine.core.tensor import megbrain_graph as G
from lar_prec.lar.const_rewrite import scale_const
model, name, factors, out, original, use_file = sys.argv[1:]
outs = G.load_graph(model).output_vars_list
oprs = cgt.get_oprs_seq(outs, prune_reshape=False)
reader = next((o for o in oprs if any(v.name == name for v in o.inputs)), None)
if reader is None:
    use = "absent"
else:
    ids = {v.id for v in reader.outputs}
    users = [o for o in oprs if any(v.id in ids for v in o.inputs)]
    relu = any(o.type == "Elemwise" and any(m in o.params for m in ('"RELU"', '"FUSE_ADD_RELU"')) for o in users)
    use = "pair" if relu else "alone" if not users else "other"
    scale_const(model, name, float(dict(f.split("=") for f in factors.split(","))[use]), out)
    found = cgt.find_vars_by_name(outs, [name])
    np.save(original, np.asarray(found[0].value))
open(use_file, "w").write(use)
"""

#: puts the constant's own values back into a dump folder (the kernel, not the weight, is wrong)
RESTORE = """
import os, sys
import numpy as np
from lar_prec.dumps.binary import read_binary_dump, write_binary_dump
from lar_prec.dumps.titles import format_title
folder, name, original = sys.argv[1:]
value = np.load(original)
for f in sorted(n for n in os.listdir(folder) if not n.startswith(".")):
    path = os.path.join(folder, f)
    d = read_binary_dump(path)
    if d.var.name == name and tuple(d.shape) == value.shape:
        write_binary_dump(path, value, format_title(d.var, d.inputs), d.var.dtype)
"""


def _prefix(model, tag, tmp):
    """Where a rewrite of ``model`` goes: WRAPPED_LAR_CACHE, by the model's bytes and ``tag``, or ``tmp``."""
    cache = os.environ.get("WRAPPED_LAR_CACHE")
    if not cache:
        return os.path.join(tmp, "")
    with open(model, "rb") as fh:
        return os.path.join(cache, hashlib.sha256(fh.read() + tag.encode()).hexdigest()[:20] + "-")


def rewrite(model, name, change, tmp):
    """The model with constant ``name`` changed by ``change`` (a factor's repr; for an operator
    fault also ``bits=N``) and the path of the constant's own values, from WRAPPED_LAR_CACHE when
    it holds them; None on failure."""
    prefix = _prefix(model, f"{name}:{change}", tmp)
    out, original = prefix + "model.mge", prefix + "original.npy"
    if os.path.exists(out) and os.path.exists(original):
        return out, original
    part = os.path.join(tmp, "part.mge")
    proc = subprocess.run([sys.executable, "-c", OP_FAULT, model, name, change, part, os.path.join(tmp, "original.npy")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return None, None
    os.replace(os.path.join(tmp, "original.npy"), original)  # before the model: a model found means both are
    os.replace(part, out)
    return out, original


#: rewrites the index outputs of a dump folder as kernels that order ties another way would
#: give them (or, "wrong", a TopK with a wrong index): run in a child, numpy only
TIES = """
import sys
import numpy as np
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import write_binary_dump
folder, mode = sys.argv[1:3]
f = DumpFolder(folder)
for vid in f.ids:
    d = f[vid]
    if d.var.opr_type not in ("TopK", "ArgsortForward", "Argmax") or d.dtype.kind == "float":
        continue
    idx = d.array().copy()
    x = f[d.input_ids[0]].array()
    for row in range(idx.shape[0]):
        if d.var.opr_type == "Argmax":
            tied = np.flatnonzero(x[row] == x[row, idx[row, 0]])
            idx[row, 0] = tied[-1]
        elif mode == "wrong":
            if d.var.opr_type == "TopK":
                idx[row, 0] = int(np.argmin(x[row]))
        else:  # each run of equal values in reverse order
            v = x[row, idx[row]]
            start = 0
            for k in range(1, len(v) + 1):
                if k == len(v) or v[k] != v[start]:
                    idx[row, start:k] = idx[row, start:k][::-1]
                    start = k
    write_binary_dump(d.file, idx, d.title, d.dtype.code)
    # what computes nothing from those indices (ArgMax's axis removal) carries them
    for uid in f.ids:
        u = f[uid]
        if u.input_ids[:1] == (vid,) and u.var.opr_type in ("AxisAddRemove", "Reshape"):
            write_binary_dump(u.file, idx.reshape(u.shape), u.title, u.dtype.code)
"""


def pair_rewrite(model, name, factors, tmp):
    """(use, rewritten model, the constant's own values) of the pair fault (``PAIR_FAULT``), from
    WRAPPED_LAR_CACHE when it holds them; use None on failure."""
    prefix = _prefix(model, f"pair:{name}:{factors}", tmp)
    out, original, use_file = prefix + "model.mge", prefix + "original.npy", prefix + "use.txt"
    if not os.path.exists(use_file):
        part, part_orig, part_use = (os.path.join(tmp, n) for n in ("part.mge", "part.npy", "part.txt"))
        proc = subprocess.run([sys.executable, "-c", PAIR_FAULT, model, name, factors, part, part_orig, part_use],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return None, None, None
        with open(part_use) as fh:
            if fh.read() != "absent":
                os.replace(part_orig, original)
                os.replace(part, out)
        os.replace(part_use, use_file)  # last: a use found means the rest is there
    with open(use_file) as fh:
        return fh.read(), out, original


def flag_value(argv, name):
    """The value of flag ``name`` (underscore form) in gflags syntax, or None."""
    for i, arg in enumerate(argv):
        body, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and body.replace("-", "_") == name:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def _process_index(folder):
    """This process's number among the jittering ones: the first ``jitter-<k>`` file it can
    create in ``folder`` (atomic, also for processes started at once)."""
    k = 0
    while True:
        try:
            os.close(os.open(os.path.join(folder, f"jitter-{k}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return k
        except FileExistsError:
            k += 1


#: the bundled runner's per-iteration line (lar_prec/lar/main.py)
ITER_LINE = re.compile(r"(iter \d+/\d+: e2e=)([0-9.]+)( ms \(host=)([0-9.]+)( ms\))")


def _run_bundled(argv):
    """The bundled runner on ``argv``; under ``WRAPPED_LAR_SLOW=MS`` each iteration line is
    held MS milliseconds and its times printed MS larger."""
    slow = os.environ.get("WRAPPED_LAR_SLOW")
    if not slow:
        return subprocess.run([sys.executable, "-m", "lar_prec.lar", *argv]).returncode
    ms = float(slow)
    proc = subprocess.Popen([sys.executable, "-m", "lar_prec.lar", *argv], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = ITER_LINE.search(line)
        if m:
            time.sleep(ms / 1000.0)
            line = ITER_LINE.sub(lambda g: f"{g[1]}{float(g[2]) + ms:.3f}{g[3]}{float(g[4]) + ms:.3f}{g[5]}", line)
        sys.stderr.write(line)
        sys.stderr.flush()
    return proc.wait()


def main():
    argv = sys.argv[1:]
    if argv == ["--version"]:
        print("load_and_run (wrapped) 1.13.0")
        return 0
    for pair in filter(None, os.environ.get("WRAPPED_LAR_FLAG_AS", "").split(",")):
        src, _, dst = pair.partition("=")
        argv = [dst if a == src else a for a in argv if a != src or dst]
    model = argv[0] if argv and not argv[0].startswith("-") else None
    refuse = os.environ.get("WRAPPED_LAR_REFUSE")
    if model and refuse and refuse in model:
        sys.stderr.write(f"[ERR] MegBrainError: load model {model}: unsupported model format for this build\n")
        return 1
    crash_flag = os.environ.get("WRAPPED_LAR_CRASH_TIMED")
    if model and crash_flag and crash_flag in argv and not any(
            flag_value(argv, f) for f in ("bin_io_dump", "io_dump", "bin_out_dump")):
        sys.stderr.write("terminate called after throwing an instance of 'megdnn::Error' (wrapped_lar, timed)\n")
        sys.stderr.flush()
        os.abort()
    slow_flag, _, slow = os.environ.get("WRAPPED_LAR_SLOW_TIMED", "").partition(":")
    slow_secs, _, slow_when = slow.partition(":")
    slow_here = bool(model and slow_flag and slow_flag in argv and not any(
        flag_value(argv, f) for f in ("bin_io_dump", "io_dump", "bin_out_dump")))
    if slow_here and slow_when != "after":
        time.sleep(float(slow_secs))
    hang = os.environ.get("WRAPPED_LAR_HANG")
    if model and hang and hang in model:
        pid_file = os.environ.get("WRAPPED_LAR_HANG_PID")
        child = subprocess.Popen(["sleep", "300"])  # in this process group, like a worker thread's process
        if pid_file:
            with open(pid_file + ".tmp", "w") as fh:
                fh.write(str(child.pid))
            os.replace(pid_file + ".tmp", pid_file)
        child.wait()
        return 1
    op_fault = os.environ.get("WRAPPED_LAR_OP_FAULT")
    race = os.environ.get("WRAPPED_LAR_RACE")
    fault = op_fault or os.environ.get("WRAPPED_LAR_FAULT") or os.environ.get("WRAPPED_LAR_JITTER") or race
    flag, _, when_flag = os.environ.get("WRAPPED_LAR_FAULT_IF_FLAG", "").partition("=")
    if when_flag and flag in argv:
        fault = when_flag
    jflag, _, jitter_when = os.environ.get("WRAPPED_LAR_JITTER_IF_FLAG", "").partition("=")
    jitter = bool(os.environ.get("WRAPPED_LAR_JITTER")) and fault == os.environ["WRAPPED_LAR_JITTER"]
    if jitter_when and jflag in argv:
        fault, jitter = jitter_when, True
    pair = os.environ.get("WRAPPED_LAR_PAIR_FAULT")
    naive = os.environ.get("MGB_USE_MEGDNN_DBG") == "2"
    tmp = None
    original = None
    restore = False
    try:
        if model and pair:
            name, _, size = pair.rpartition(":")
            tmp = tempfile.mkdtemp(prefix="wrapped-lar-")
            factors = f"pair={1.0 if naive else 1.0 + float(size)!r},alone=1.0,other=1.0"
            use, rewritten, original = pair_rewrite(model, name, factors, tmp)
            if use is None:
                return 1
            if use == "alone" and not naive and os.environ.get("WRAPPED_LAR_PAIR_ALONE") == "crash":
                shutil.rmtree(tmp, ignore_errors=True)
                sys.stderr.write("terminate called after throwing an instance of 'megdnn::Error' (wrapped_lar)\n")
                sys.stderr.flush()
                os.abort()
            if use != "absent":
                argv, restore = [rewritten] + argv[1:], True
        elif model and fault:
            name, _, size = fault.rpartition(":")
            if op_fault and size.startswith(("bits=", "u=")):
                change = "1.0" if naive else size
            else:
                step = float(size)
                if race and fault == race:  # wrong, and another factor in every process
                    step *= 0.0 if naive else 1 + _process_index(os.environ["WRAPPED_LAR_JITTER_DIR"]) / 10
                elif jitter:  # a new factor per process
                    count_dir = os.environ.get("WRAPPED_LAR_JITTER_DIR")
                    step *= 0.0 if "--reproducible" in argv else (1 + _process_index(count_dir) if count_dir else
                                                                  0.5 + random.random())
                change = repr(1.0 if naive else 1.0 + step)
            tmp = tempfile.mkdtemp(prefix="wrapped-lar-")
            rewritten, original = rewrite(model, name, change, tmp)
            if rewritten is None:
                return 1
            argv, restore = [rewritten] + argv[1:], True
        rc = _run_bundled(argv)
        if slow_here and slow_when == "after":
            time.sleep(float(slow_secs))
        offset = os.environ.get("WRAPPED_LAR_RENUMBER")
        dump = flag_value(argv, "bin_io_dump")
        if rc == 0 and restore and dump:  # a fault, a jitter or the pair rewrote a constant: its dump is the model's
            rc = subprocess.run([sys.executable, "-c", RESTORE, dump, name, original]).returncode
        ties = os.environ.get("WRAPPED_LAR_TIES")
        if rc == 0 and ties and dump and os.environ.get("MGB_USE_MEGDNN_DBG") != "2":
            rc = subprocess.run([sys.executable, "-c", TIES, dump, ties]).returncode
        if rc == 0 and offset and dump:
            rc = subprocess.run([sys.executable, "-c", RENUMBER, dump, offset]).returncode
        return rc
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
