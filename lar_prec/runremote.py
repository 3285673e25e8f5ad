"""Runs on a device (``--remote``), under the import path the README documented
(``from lar_prec.runremote import RemoteSpec``). The code lives in :mod:`lar_prec.run.device`;
nothing inside the package imports this module."""
from __future__ import annotations

from lar_prec.run.device import DEFAULT_REMOTE_LAR, RemoteSessions, RemoteSpec, remote_spec

__all__ = ["DEFAULT_REMOTE_LAR", "RemoteSessions", "RemoteSpec", "remote_spec"]
