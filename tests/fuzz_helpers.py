"""Fuzzing of text formats, shared by the reader tests: lines of a real example picked in
any order, a few bytes replaced, the text cut anywhere."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lar_prec.errors import DumpFormatError


def fuzz_lines(lines: Sequence[str], *, max_size: int, max_examples: int) -> Callable:
    """Decorator: the test gets ``picks`` (lines of ``lines``), ``edits`` (position, bytes that
    replace one byte) and ``cut`` (where the text ends, or None); pass them to :func:`mutated`."""
    def decorate(test: Callable) -> Callable:
        return settings(max_examples=max_examples, deadline=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture])(given(
            picks=st.lists(st.sampled_from(list(lines)), max_size=max_size),
            edits=st.lists(st.tuples(st.integers(0, 4000), st.binary(max_size=3)), max_size=4),
            cut=st.one_of(st.none(), st.integers(0, 4000)),
        )(test))
    return decorate


def mutated(picks: List[str], edits: List[Tuple[int, bytes]], cut: Optional[int]) -> bytes:
    """The picked lines as UTF-8, each edit applied in turn, then cut at ``cut``."""
    data = bytearray("".join(picks).encode())
    for pos, ins in edits:
        data[pos:pos + 1] = ins
    if cut is not None:
        del data[cut:]
    return bytes(data)


def read_or_refused(read: Callable[[Path], Any], path: Path, data: bytes) -> Any:
    """``data`` written to ``path`` and read by ``read``: what it read, or None when it raised
    a DumpFormatError that names the file (at the start of its message, as every reader must)."""
    path.write_bytes(data)
    try:
        return read(path)
    except DumpFormatError as e:
        assert e.path == path and str(e).startswith(str(path))
        return None
