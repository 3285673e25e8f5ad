"""MegDNN's ``DTypeEnum`` as lar-prec reads it from dump headers (``load_and_run.md`` 3.4).

One :class:`DType` per code: its name, the numpy dtype of its raw bytes (None for sub-byte
types) and its size in bits, which checks a file's data size even when values cannot be decoded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec.errors import UsageError

__all__ = ["DType", "DTYPES", "dtype_by_name"]

@dataclass(frozen=True)
class DType:
    """One ``DTypeEnum`` entry of MegDNN (``load_and_run.md`` 3.4).

    ``storage`` is the numpy dtype of the raw bytes in a dump (``storage_str``, e.g. ``"<f4"``),
    or ``None`` for sub-byte types that numpy cannot address. ``bits`` is the size of one
    element in bits, used to check a file's data size even when the values cannot be decoded.
    """

    code: int
    name: str
    storage_str: Optional[str]
    kind: str  # "float" | "int" | "bool" | "quantized" | "byte" | "lowbit" | "complex"
    bits: int = 0

    @property
    def storage(self) -> Optional[np.dtype]:
        """The numpy dtype of the raw bytes, or None (sub-byte types). Made on first use:
        indexing and planning a comparison need no numpy, which `lar-prec compare` then
        imports while its worker already compares (start-up time)."""
        if self.storage_str is None:
            return None
        d = _STORAGE.get(self.storage_str)
        if d is None:
            d = _STORAGE[self.storage_str] = np.dtype(self.storage_str)
        return d

    @property
    def is_quantized(self) -> bool:
        """True for every Quantized* type (also the 4- and 1-bit ones): values are raw
        integers and the scale/zero point are not stored in the dump."""
        return self.name.startswith("Quantized")

    @property
    def decodable(self) -> bool:
        """True when :meth:`BinaryDump.array` can turn the bytes into a numpy array."""
        return self.storage_str is not None

    def value_dtype(self) -> np.dtype:
        """The dtype of :meth:`BinaryDump.array`: float32 for BFloat16, else ``storage``.

        Raises:
            UsageError: for sub-byte types, which have no numpy dtype.
        """
        if self.name == "BFloat16":
            return np.dtype(np.float32)
        if self.storage is None:
            raise UsageError(f"dtype {self.name} (code {self.code}) is a sub-byte type with no numpy dtype")
        return self.storage

    def nbytes(self, size: int) -> int:
        """Bytes that ``size`` elements take in a dump (sub-byte types are packed)."""
        return (size * self.bits + 7) // 8


_STORAGE: Dict[str, "np.dtype"] = {}


# every DTypeEnum value of MegDNN (dnn/include/megdnn/dtype.h): code, name, numpy storage
# ("-": a packed sub-byte type with no numpy dtype), kind, bits. BFloat16 is stored as raw
# bits; BinaryDump.array() widens them to float32.
_TABLE = """
     0  Float32          <f4  float      32
     1  Uint8            u1   int         8
     2  Int8             i1   int         8
     3  Int16            <i2  int        16
     4  Int32            <i4  int        32
     5  IntB1            -    lowbit      1
     6  IntB2            -    lowbit      2
     7  IntB4            -    lowbit      4
     8  Byte             u1   byte        8
     9  Float16          <f2  float      16
    10  UintB4           -    lowbit      4
    11  BFloat16         <u2  float      16
    12  Bool             ?    bool        8
    13  Uint16           <u2  int        16
    14  Complex64        <c8  complex    64
100000  Quantized8Asymm  u1   quantized   8
100001  QuantizedS32     <i4  quantized  32
100002  QuantizedS8      i1   quantized   8
100003  Quantized4Asymm  -    lowbit      4
100004  QuantizedS4      -    lowbit      4
100005  QuantizedS16     <i2  quantized  16
100006  QuantizedS1      -    lowbit      1
"""


def _table_row(line: str) -> DType:
    code, name, storage, kind, bits = line.split()
    return DType(int(code), name, None if storage == "-" else storage, kind, int(bits))


#: every ``DTypeEnum`` value of MegDNN (dnn/include/megdnn/dtype.h), by code
DTYPES: Dict[int, DType] = {d.code: d for d in map(_table_row, _TABLE.strip().splitlines())}
_DTYPES_BY_NAME: Dict[str, DType] = {d.name.lower(): d for d in DTYPES.values()}
_DTYPES_BY_EXACT_NAME: Dict[str, DType] = {d.name: d for d in DTYPES.values()}

# numpy dtype (its .str) -> the DTypeEnum code a writer uses when the caller gives no dtype
_NUMPY_TO_CODE = {"<f4": 0, "|u1": 1, "|i1": 2, "<i2": 3, "<i4": 4, "<f2": 9, "|b1": 12, "<u2": 13, "<c8": 14}


def dtype_by_name(name: str) -> DType:
    """The :class:`DType` called ``name`` (case-insensitive), e.g. ``"QuantizedS8"``.

    Raises:
        UsageError: the name is not a MegDNN dtype; the message lists the known names.
    """
    d = _DTYPES_BY_EXACT_NAME.get(name)  # the usual spelling, without normalising it (per var)
    if d is None:
        d = _DTYPES_BY_NAME.get(name.strip().lower())
    if d is None:
        known = ", ".join(x.name for x in DTYPES.values())
        raise UsageError(f"unknown dtype name {name!r}; known: {known}")
    return d


def _dtype_of(dtype: Union[int, str, DType]) -> DType:
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return dtype_by_name(dtype)
    if int(dtype) not in DTYPES:
        raise UsageError(f"unknown dtype code {dtype}; known: {sorted(DTYPES)}")
    return DTYPES[int(dtype)]

