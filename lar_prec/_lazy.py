"""A module imported on first attribute access, to keep heavy imports off start-up paths."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule(ModuleType):
    """Stands for ``name`` until an attribute is read, then imports it (once) and delegates."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._lazy_target: Any = None

    def __getattr__(self, attr: str) -> Any:
        target = self.__dict__.get("_lazy_target")
        if target is None:
            target = importlib.import_module(self.__name__)
            # the module's names become this one's: later lookups are plain dict hits, not a
            # call of this method (hot loops use np.* per chunk and per var)
            self.__dict__.update({k: v for k, v in vars(target).items() if k not in ("__name__", "__spec__", "__loader__")})
            self.__dict__["_lazy_target"] = target
        return getattr(target, attr)


# numpy costs ~0.1 s to import; the runner and the bundled load_and_run's argument parsing
# do not need it before the first load_and_run starts.
numpy = LazyModule("numpy")
