"""Bring tensors dumped in a transformed layout back to plain NCHW (numpy only).

Layout transforms (``--enable-nchw44`` and friends) change how an operator's output is laid
out, and ``--bin-io-dump`` writes it as it is: a (1,16,32,32) NCHW output is dumped as
(1,4,32,32,4) under NCHW44. To compare it with the plain graph's var, it is first brought
back (reference/graph-options.md section 4):

=========  =====================  ==============================================
kind       dumped shape           back to NCHW
=========  =====================  ==============================================
nchwK      (N, C/K, H, W, K)      ``a.transpose(0,1,4,2,3).reshape(N,-1,H,W)[:, :C]``
           K = 4 (kind nchw4: NCHW4, NCHW44, NCHW44_DOT), 8 (nchw88), 32 (NCHW32), 64 (NCHW64)
nhwcd4     (N, H, C/4, W, 4)      ``a.transpose(0,2,4,1,3).reshape(N,-1,H,W)[:, :C]``
chwn4      (C/4, H, W, N, 4)      ``a.transpose(3,0,4,1,2).reshape(N,-1,H,W)[:, :C]``
=========  =====================  ==============================================

Channels are padded up to a multiple of K with zeros; the padding is cut off.

Which kind a dumped var has is not always clear from its shape ((1,8,8,8,4) fits NCHW4 and
NHWCD4). :func:`detect` decides from, in that order, the ``format`` of the operator that
produced the var in the model that ran (:func:`lar_prec.graphopts.format_map`), the layout
string of the dump title (``@ I2D`` marks NHWCD4), and the shapes; when several kinds fit and
nothing settles it, it says ``ambiguous`` instead of guessing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np  # imported on first use
from lar_prec.errors import UsageError

#: channel block of each packed kind
BLOCK: Dict[str, int] = {"nchw4": 4, "nchw88": 8, "nchw32": 32, "nchw64": 64, "nhwcd4": 4, "chwn4": 4}

#: every kind :func:`to_nchw` knows; ``nchw`` is the identity
#: plain NCHW whose channels are padded up to a multiple of 4 or 8 (the padding is cut off)
PADDED = "nchw_padded"
KINDS: Tuple[str, ...] = ("nchw",) + tuple(BLOCK) + (PADDED,)

#: MegEngine ``format`` parameter (as :func:`lar_prec.graphopts.format_map` gives it) -> kind
FORMAT_KIND: Dict[str, str] = {
    "NCHW": "nchw",
    "NCHW4": "nchw4",
    "NCHW44": "nchw4",
    "NCHW44_DOT": "nchw4",
    "NCHW88": "nchw88",
    "NCHW32": "nchw32",
    "NCHW64": "nchw64",
    "NHWCD4": "nhwcd4",
    "CHWN4": "chwn4",
}

#: layout option names (lar_prec.lar.graphopts / load_and_run ``--enable-<name>``) -> kind
OPTION_KIND: Dict[str, str] = {
    "nchw4": "nchw4", "nchw44": "nchw4", "nchw44_dot": "nchw4", "nchw88": "nchw88",
    "nchw32": "nchw32", "nchw64": "nchw64", "nhwcd4": "nhwcd4", "chwn4": "chwn4",
}


@dataclass(frozen=True)
class Detection:
    """How a dumped var is laid out relative to its plain NCHW shape.

    ``kind`` is one of :data:`KINDS`, or ``"ambiguous"`` (several kinds fit and nothing
    settles it; ``candidates`` lists them) or ``"unknown"`` (no kind fits). ``source`` says
    what decided: ``"same-shape"``, ``"format"``, ``"layout-string"`` or ``"shape"``.
    """

    kind: str
    source: str
    reason: str = ""
    candidates: Tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.kind in KINDS


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def packed_shape(kind: str, shape: Sequence[int]) -> Tuple[int, ...]:
    """The shape a plain NCHW ``shape`` has when laid out as ``kind``."""
    if kind == "nchw":
        return tuple(shape)
    if kind not in BLOCK:
        raise UsageError(f"unknown layout kind {kind!r} (one of {', '.join(KINDS)})")
    if len(shape) != 4:
        raise UsageError(f"layout {kind} needs a 4-dim NCHW shape, got {list(shape)}")
    n, c, h, w = (int(d) for d in shape)
    k = BLOCK[kind]
    if kind == "nhwcd4":
        return (n, h, _ceil(c, 4), w, 4)
    if kind == "chwn4":
        return (_ceil(c, 4), h, w, n, 4)
    return (n, _ceil(c, k), h, w, k)


def to_nchw(a: "np.ndarray", kind: str, shape: Sequence[int]) -> "np.ndarray":
    """``a`` (laid out as ``kind``) as an array of the plain NCHW ``shape``.

    Raises:
        UsageError: ``a``'s shape is not what ``kind`` makes of ``shape``.
    """
    if kind == PADDED:
        if a.ndim != 4 or a.shape[0] != shape[0] or tuple(a.shape[2:]) != tuple(shape[2:]) or a.shape[1] < shape[1]:
            raise UsageError(f"a channel-padded tensor of plain shape {list(shape)} cannot have shape {list(a.shape)}")
        return np.ascontiguousarray(a[:, :int(shape[1])])
    want = packed_shape(kind, shape)
    if tuple(a.shape) != want:
        raise UsageError(f"a {kind} tensor of plain shape {list(shape)} has shape {list(want)}, got {list(a.shape)}")
    if kind == "nchw":
        return a
    n, c, h, w = (int(d) for d in shape)
    if kind == "nhwcd4":
        t = a.transpose(0, 2, 4, 1, 3)
    elif kind == "chwn4":
        t = a.transpose(3, 0, 4, 1, 2)
    else:
        t = a.transpose(0, 1, 4, 2, 3)
    return np.ascontiguousarray(t.reshape(n, -1, h, w)[:, :c])


def candidates(dumped: Sequence[int], plain: Sequence[int]) -> Tuple[str, ...]:
    """Every packed kind whose layout of ``plain`` has the ``dumped`` shape."""
    if len(plain) != 4:
        return ()
    dumped = tuple(int(d) for d in dumped)
    return tuple(k for k in BLOCK if packed_shape(k, plain) == dumped)


def detect(dumped: Sequence[int], plain: Sequence[int], *, fmt: Optional[str] = None,
           layout: Optional[str] = None) -> Detection:
    """Decide how a var dumped with shape ``dumped`` relates to its plain shape ``plain``.

    Args:
        fmt: the ``format`` of the operator that produced the var in the model that ran
            (``NCHW44``, ``NHWCD4``, ...), when known.
        layout: the var's layout string from the dump title (``{1(512),...@ I2D{2,1} Float32}``).
    """
    dumped, plain = tuple(int(d) for d in dumped), tuple(int(d) for d in plain)
    if dumped == plain:
        return Detection("nchw", "same-shape")
    if (len(plain) == len(dumped) == 4 and dumped[0] == plain[0] and dumped[2:] == plain[2:]
            and dumped[1] in (_ceil(plain[1], 4) * 4, _ceil(plain[1], 8) * 8) and dumped[1] > plain[1]):
        # NCHW with the channels padded up to a multiple of 4 or 8: what NCHW44/88 leaves
        # where it relaid a var back (58 channels dumped as 60)
        return Detection(PADDED, "shape")
    fits = candidates(dumped, plain)
    if fmt is not None and fmt in FORMAT_KIND:
        kind = FORMAT_KIND[fmt]
        if kind in fits:
            return Detection(kind, "format")
        # the var may be a converted copy (a relayout back to NCHW): fall through to the rest
    if layout is not None and "@ I2D" in layout:
        if "nhwcd4" in fits:
            return Detection("nhwcd4", "layout-string")
        return Detection("unknown", "layout-string",
                         f"the layout string marks NHWCD4 but {list(dumped)} is not NHWCD4 of {list(plain)}")
    if len(fits) == 1:
        return Detection(fits[0], "shape")
    if not fits:
        return Detection("unknown", "shape", f"no layout turns {list(plain)} into {list(dumped)}")
    return Detection("ambiguous", "shape",
                     f"{list(dumped)} fits {' and '.join(fits)} of {list(plain)}; "
                     "the model's operator format would settle it", fits)


def to_plain(a: "np.ndarray", plain: Sequence[int], *, fmt: Optional[str] = None,
             layout: Optional[str] = None) -> Tuple[Optional["np.ndarray"], Detection]:
    """:func:`detect` then :func:`to_nchw`: ``a`` in the plain layout, or None when the
    detection is ``ambiguous`` or ``unknown`` (the Detection says why)."""
    det = detect(a.shape, plain, fmt=fmt, layout=layout)
    if not det.ok:
        return None, det
    return to_nchw(a, det.kind, plain), det
