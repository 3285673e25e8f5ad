"""Real MegEngine models for tests and the demo, built by ``python -m cases.build``.

The built files live in ``cases/build/`` (git-ignored); ``load_manifest()`` reads its index
without importing megengine.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

BUILD_DIR = Path(__file__).resolve().parent / "build"


@dataclass(frozen=True)
class Case:
    """One built case: a dumped .mge model and one .npy file per input."""

    name: str
    model: Path
    inputs: Tuple[Tuple[str, Path], ...]
    description: str
    runs_in_lite: bool
    note: str
    dtype: str
    #: constants a fault benchmark scales (names of constant vars in the model), if any
    fault_consts: Tuple[str, ...] = ()

    def input_specs(self) -> Tuple[str, ...]:
        """The inputs as load_and_run ``--input`` items, ``name:path.npy``."""
        return tuple(f"{n}:{p}" for n, p in self.inputs)


def load_manifest(build_dir: Optional[Path] = None) -> Dict[str, Case]:
    """Read ``manifest.json`` of a build folder; paths in it are relative to that folder."""
    root = Path(build_dir) if build_dir else BUILD_DIR
    data = json.loads((root / "manifest.json").read_text())
    cases = {}
    for c in data["cases"]:
        cases[c["name"]] = Case(
            name=c["name"],
            model=root / c["model"],
            inputs=tuple((s.split(":", 1)[0], root / s.split(":", 1)[1]) for s in c["inputs"]),
            description=c["description"],
            runs_in_lite=c["runs_in_lite"],
            note=c.get("note", ""),
            dtype=c.get("dtype", "float32"),
            fault_consts=tuple(c.get("fault_consts", ())),
        )
    return cases
