"""Styled lines and tables, written to a rich Console or to a plain text stream.

Every renderer builds :class:`Line` s and :class:`Table` s; :func:`open_output` picks where
they go: a rich ``Console`` (colour, wrapping to its width) or, for a pipe or a file, a plain
text stream (aligned columns, nothing wrapped, and rich not even imported: it is most of a
small ``compare``'s start-up). Text that came from a file (var names, notes, stderr lines) is
shown with its control characters escaped (:func:`shown`), so a name holding ``\\x1b]0;...``
cannot retitle or clear the user's terminal.
"""
from __future__ import annotations

import re
from typing import IO, TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    from rich.console import Console

#: C0 and C1 control characters and DEL (tab and newline are laid out, not passed through)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(s: str) -> str:
    """``s`` with every control character written as an escape (``\\x1b``): safe to print."""
    return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()), s) if _CONTROL.search(s) else s


def fit_names(names: Sequence[str], width: int) -> Dict[str, str]:
    """Each name in at most ``width`` characters (more where needed), two different names never
    the same text: a longer name keeps its head and its tail around an ellipsis (the tail tells
    ``blocks.0.attn.BatchedMatrixMul[0]`` from ``...[1]``), and where two still read alike the
    column widens until they do not."""
    distinct = sorted(set(names))
    longest = max((len(n) for n in distinct), default=0)
    w = max(width, 5)
    while True:
        head = (w - 1) // 2
        cut = {n: n if len(n) <= w else n[:head] + "\u2026" + n[len(n) - (w - 1 - head):] for n in distinct}
        if w >= longest or len(set(cut.values())) == len(distinct):
            return cut
        w += 1


class Line:
    """One line of styled text: (text, rich style) segments. User data stays text, never
    markup (var names contain [ ])."""

    __slots__ = ("segs",)

    def __init__(self, *parts: Any) -> None:
        self.segs: List[Tuple[str, str]] = []
        for p in parts:
            self.append(*(p if isinstance(p, tuple) else (p,)))

    def append(self, text: Any, style: str = "") -> None:
        self.segs.append((shown(str(text)), style or ""))

    @property
    def plain(self) -> str:
        return "".join(t for t, _ in self.segs)


def cell(text: Any, style: str = "") -> Line:
    return Line((text, style))


def text(s: str, style: str = "", *more: Any) -> Line:
    return Line((s, style), *more)


#: the width terminal output keeps to (tables drop their optional columns to fit; ``--wide``: all)
WIDTH = 100


class Table:
    """A titled table: columns (header, rich column options) and rows of :class:`Line`.

    A column added with ``drop=N`` (N > 0) is optional: where the table is wider than the
    output, the optional columns go, the highest N first, until it fits (``--wide`` keeps
    them; the JSON has every value); ``cut=True`` marks the text column shortened (head and
    tail around an ellipsis, names kept distinct) when dropping is not enough."""

    def __init__(self, title: str) -> None:
        self.title = text(title, "bold")
        self.columns: List[Tuple[str, Dict[str, Any]]] = []
        self.rows: List[List[Line]] = []

    def add_column(self, head: str, **kw: Any) -> None:
        self.columns.append((head, kw))

    def add_row(self, *cells: Any) -> None:
        self.rows.append([c if isinstance(c, Line) else Line(c) for c in cells])

    def widths(self) -> List[int]:
        return [max([len(h)] + [len(r[i].plain) for r in self.rows]) for i, (h, _) in enumerate(self.columns)]

    def fitted(self, width: Optional[int]) -> Tuple["Table", List[str]]:
        """This table within ``width`` columns (None: as it is), and the heads of the columns left out."""
        keep = list(range(len(self.columns)))

        def total() -> int:
            w = self.widths()
            return sum(w[i] for i in keep) + 3 * (len(keep) - 1) + 1

        dropped: List[str] = []
        optional = sorted((i for i, (_, kw) in enumerate(self.columns) if kw.get("drop")),
                          key=lambda i: -self.columns[i][1]["drop"])
        while width is not None and optional and total() > width:
            i = optional.pop(0)
            keep.remove(i)
            dropped.append(self.columns[i][0])
        out = Table("")
        out.title = self.title
        out.columns = [(h, {k: v for k, v in kw.items() if k not in ("drop", "cut")})
                       for h, kw in (self.columns[i] for i in keep)]
        out.rows = [[r[i] for i in keep] for r in self.rows]
        over = total() - width if width is not None else 0
        cut = [j for j, i in enumerate(keep) if self.columns[i][1].get("cut")]
        if over > 0 and cut:
            j = cut[0]
            col_w = out.widths()[j]
            room = max(12, col_w - over)
            short = fit_names([r[j].plain for r in out.rows], room)
            out.rows = [[Line((short[c.plain], c.segs[0][1] if c.segs else "")) if k == j else c
                         for k, c in enumerate(r)] for r in out.rows]
        return out, dropped




def _left_out(dropped: List[str]) -> Line:
    return text(f"  (left out to fit: {', '.join(dropped)}; --wide or the JSON has them)", "dim")


class RichOut:
    """Writes lines and tables to a rich Console. ``wide``: tables keep every column;
    ``explain``: renderers give their long explanations in full (the threshold's rule)."""

    def __init__(self, console: "Console", *, wide: bool = False, explain: bool = False,
                 limit: Optional[int] = WIDTH) -> None:
        self.con = console
        self.width = console.width
        self.wide = wide
        self.explain = explain
        self.limit = limit  # tables keep within min(its width, limit); None: the console's width

    @staticmethod
    def _t(line: Line) -> Any:
        # rich only for a terminal (start-up time)
        from rich.text import Text

        return Text.assemble(*line.segs)

    def rule(self, line: Line) -> None:
        self.con.rule(self._t(line), align="left")

    def print(self, line: Line, wrap: bool = False) -> None:
        self.con.print(self._t(line))  # rich wraps every line to the terminal

    def write(self, text: str) -> int:
        """Raw text, for renderers that write their own lines (reduce)."""
        return self.con.file.write(text)

    def flush(self) -> None:
        self.con.file.flush()

    def table(self, t: Table) -> None:
        # rich only for a terminal (start-up time)
        from rich import box
        from rich.table import Table

        t, dropped = t.fitted(None if self.wide else min(self.width, self.limit or self.width))
        rt = Table(title=self._t(t.title), box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
        for head, kw in t.columns:
            rt.add_column(head, **kw)
        for row in t.rows:
            rt.add_row(*[self._t(c) for c in row])
        self.con.print(rt)
        if dropped:
            self.print(_left_out(dropped))


class PlainOut:
    """Writes lines and tables as plain text: columns aligned, nothing wrapped; a table keeps to
    ``width`` by leaving out its optional columns (``wide``: every column)."""

    def __init__(self, stream: IO[str], width: int = WIDTH, *, wide: bool = False, explain: bool = False) -> None:
        self.stream = stream
        self.width = width
        self.wide = wide
        self.explain = explain

    def write(self, text: str) -> int:
        """Raw text, for renderers that write their own lines (reduce)."""
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def _w(self, text: str) -> None:
        self.stream.write(text.replace("\n", " ").rstrip() + "\n")

    def rule(self, line: Line) -> None:
        head = line.plain + " "
        self._w(head + "─" * max(3, self.width - len(head)))

    def print(self, line: Line, wrap: bool = False) -> None:
        """One line; ``wrap``: a long one (a note) folded at spaces to the width, indented after the first."""
        if not wrap or self.wide or len(line.plain) <= self.width:
            self._w(line.plain)
            return
        import textwrap

        for part in textwrap.wrap(line.plain, self.width, subsequent_indent="  ", break_on_hyphens=False):
            self._w(part)

    def table(self, t: Table) -> None:
        t, dropped = t.fitted(None if self.wide else self.width)
        heads = [h for h, _ in t.columns]
        cells = [[c.plain.replace("\n", " ") for c in row] for row in t.rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(heads)]
        right = [kw.get("justify") == "right" for _, kw in t.columns]

        def fmt(vals: Sequence[str]) -> str:
            return " " + "   ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(vals, widths, right))

        self._w(t.title.plain)
        self._w(fmt(heads))
        self._w("─" * (sum(widths) + 3 * (len(widths) - 1) + 1))
        for r in cells:
            self._w(fmt(r))
        if dropped:
            self.print(_left_out(dropped))


def open_output(console: Union["Console", IO[str], "RichOut", "PlainOut", None]) -> Union[RichOut, PlainOut]:
    """Where lines and tables go: an output the command line made (100 columns unless
    ``--wide``), or for a caller of the Python API a rich ``Console`` of its own (None: a
    default one on stdout; tables within its width) or a text stream (every column, as before);
    both with every explanation whole."""
    if console is None:
        from rich.console import Console  # rich only for a terminal (start-up time)

        return RichOut(Console(), explain=True, limit=None)
    if isinstance(console, (RichOut, PlainOut)):
        return console
    if hasattr(console, "rule") and hasattr(console, "width"):
        return RichOut(console, explain=True, limit=None)  # type: ignore[arg-type]
    return PlainOut(console, 120, wide=True, explain=True)  # type: ignore[arg-type]
