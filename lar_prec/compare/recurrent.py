"""The rounding bound of MegEngine's fused LSTM (graph type ``LSTM``), step by step (issue 51 #1).

MegDNN's naive LSTM runs, at each time step, one cell (``dnn/src/common/lstm_cell.cpp``): the
gates ``W_ih x_t + b_ih + W_hh h + b_hh`` in the order i, f, g, o (sums of products), then
``sigmoid`` of i, f, o and ``tanh`` of g, ``c' = f * c + i * g`` (FUSE_MUL_ADD4) and
``h' = o * tanh(c')``. Its flattened weights are read as contiguous memory
(``dnn/src/naive/rnn/rnn.cpp``, ``CellWeightsWrapperBase``): for one layer in one direction
``W_ih (4 H, I)``, then ``W_hh (4 H, H)``, then ``b_ih (4 H)`` and ``b_hh (4 H)``, whatever the
``(4 H, I + H [+ 2])`` shape the tensor has.

:func:`lstm_scales` replays that on the reference's inputs in float64 with rounding scales
(:class:`lar_prec.compare.elemwise.Val`): each gate a sum of ``K = I + H + 2`` products
(``(sqrt(K) + 1) * sum|terms|``) plus the scale ``h`` carries from the step before through
``|W_hh|``, then the cell's elementwise steps. The replay's own output is held to the
reference output, or the test kernel's own output on the same inputs, first (a weight fault in
the model makes the replay, which reads the model's weights, reproduce the test kernel and not
the reference): a layout it reproduces neither of is not judged (a wrong guess would make a
wrong bound). Numpy only, float64.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.compare import elemwise
from lar_prec.compare.elemwise import Val

#: how near the replay must come to the reference output (relative to its largest |value|) to
#: say it understood the layout: far above float32 rounding, far below any other layout's
REPRODUCED = 1e-4


def _sigmoid(a: Val) -> Val:
    return elemwise.MODES["SIGMOID"].expr(a)


def _tanh(a: Val) -> Val:
    return elemwise.MODES["TANH"].expr(a)


def lstm_scales(x: "np.ndarray", hx: "np.ndarray", cx: "np.ndarray", flat: "np.ndarray",
                *outputs: Optional["np.ndarray"]) -> Tuple[Optional[Tuple["np.ndarray", "np.ndarray", "np.ndarray"]], str]:
    """``U`` of the LSTM's output ``(T, B, H)``, its last ``h`` and its last ``c`` (each ``(1, B, H)``)
    on the reference's input ``x (T, B, I)``, states ``hx``, ``cx (1, B, H)`` and flattened
    weights; ``outputs``: the reference's output and the test kernel's on the same inputs, one of
    which the replay must reproduce.
    Returns (None, why) for a layout it does not handle (several layers or directions, a
    width that is not ``I + H`` or ``I + H + 2``) or does not reproduce."""
    x, hx, cx, flat = (np.asarray(a, dtype=np.float64) for a in (x, hx, cx, flat))
    if x.ndim != 3 or hx.ndim != 3 or flat.ndim != 2:
        return None, "an LSTM whose inputs are not (T, B, I), (layers, B, H) and a weight matrix"
    t_len, batch, width = x.shape
    layers, _, hidden = hx.shape
    if layers != 1:
        return None, "an LSTM of several layers or directions: no bound yet"
    if flat.shape[0] != 4 * hidden or flat.shape[1] not in (width + hidden, width + hidden + 2):
        return None, f"an LSTM weight matrix of shape {flat.shape}: not (4 H, I + H [+ 2])"
    raw, g4 = flat.reshape(-1), 4 * hidden
    w_ih = raw[:g4 * width].reshape(g4, width)
    w_hh = raw[g4 * width:g4 * (width + hidden)].reshape(g4, hidden)
    biases = raw[g4 * (width + hidden):].reshape(-1, g4)  # (2, 4 H): b_ih, b_hh; or none
    bias = biases.sum(axis=0) if len(biases) else np.zeros(g4)
    b_abs = np.abs(biases).sum(axis=0) if len(biases) else 0.0
    k = width + hidden + 2
    h, c = Val.of(hx[0]), Val.of(cx[0])
    outs, scales = [], []
    for step in range(t_len):
        xt = x[step]
        value = xt @ w_ih.T + h.v @ w_hh.T + bias
        terms = np.abs(xt) @ np.abs(w_ih).T + np.abs(h.v) @ np.abs(w_hh).T + b_abs
        gates = Val(value, (math.sqrt(k) + 1.0) * terms + h.u @ np.abs(w_hh).T)
        part = [Val(gates.v[:, j * hidden:(j + 1) * hidden], gates.u[:, j * hidden:(j + 1) * hidden]) for j in range(4)]
        i, f, g, o = _sigmoid(part[0]), _sigmoid(part[1]), _tanh(part[2]), _sigmoid(part[3])
        c = elemwise.add(elemwise.mul(f, c), elemwise.mul(i, g))
        h = elemwise.mul(o, _tanh(c))
        outs.append(h.v)
        scales.append(h.u)
    out = np.stack(outs)
    if not any(_reproduces(out, y) for y in outputs if y is not None):
        return None, "the LSTM's replay in float64 reproduces neither its reference output nor the test kernel's: layout not understood"
    return (np.stack(scales), h.u[None], c.u[None]), ""


def _reproduces(replay: "np.ndarray", y: "np.ndarray") -> bool:
    y = np.asarray(y, dtype=np.float64)
    if y.shape != replay.shape:
        return False
    top = float(np.max(np.abs(y))) if y.size else 0.0
    return not y.size or float(np.max(np.abs(replay - y))) <= REPRODUCED * max(top, 1.0)


def lstm_output_scale(xs: Sequence[Optional["np.ndarray"]], which: int, reference_output: Optional["np.ndarray"],
                      test_output: Optional["np.ndarray"] = None) -> Tuple[Optional["np.ndarray"], str]:
    """``U`` of output ``which`` (0: the sequence, 1: the last h, 2: the last c) of an
    LSTM whose inputs' reference values are ``xs`` (input, hx, cx, weights); output 3 is
    its reserve space, a workspace: not judged. ``reference_output`` and ``test_output``: the
    sequence output of the reference and of the test kernel on the same inputs."""
    if which not in (0, 1, 2):
        return None, "the LSTM's reserve space is a workspace: not judged"
    if len(xs) != 4 or any(v is None for v in xs) or (reference_output is None and test_output is None):
        return None, "a reference value of the LSTM's inputs or output is missing"
    got, why = lstm_scales(xs[0], xs[1], xs[2], xs[3], reference_output, test_output)  # type: ignore[arg-type]
    return (None, why) if got is None else (got[which], "")
