"""The Dask cluster a zoo runs on: an embedded LocalCluster (one single-threaded worker process
per core, plus one worker per device of the manifest owning that device's resource), or the
team's scheduler (``--scheduler tcp://HOST:PORT``), whose workers advertise the devices they
reach (``dask worker ... --resources "dev-ssh-HOST=1"``). Every device a task needs must be
owned by a worker before anything runs.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import threading
import urllib.request
from typing import Any, Dict, Iterator, Optional, Sequence

from distributed import Client, LocalCluster, Nanny

from lar_prec.errors import LarPrecError, UsageError
from lar_prec.zoo.manifest import ManifestError, ZooDevice
from lar_prec.zoo.procs import ZOO_TAG, kill_tagged
from lar_prec.zoo.worker import ZooWorkerPlugin, stop_runs

#: seconds to reach a scheduler, and for the embedded workers to start
CONNECT_TIMEOUT = 20.0
START_TIMEOUT = 120.0
#: seconds to close the client and the embedded cluster (then what is left is killed)
CLOSE_TIMEOUT = 10.0
log = logging.getLogger(__name__)
_ADDRESS = re.compile(r"(tcp|tls)://[A-Za-z0-9_.:\[\]-]+:\d{1,5}\Z")


class ClusterError(LarPrecError):
    """The scheduler cannot be reached, or the cluster did not start (exit 3)."""

    exit_code = 3


class CtrlC:
    """The zoo's SIGINT handler (main thread only): the first Ctrl-C raises KeyboardInterrupt and
    is remembered, so that one lost inside Dask (raised while the main thread ran a finalizer or a
    callback that swallows it, as when the embedded cluster starts) is raised again at the next
    :meth:`check`; later ones are noted and ignored, so that stopping the runs and closing the
    cluster finish and leave no process behind."""

    def __init__(self) -> None:
        self.seen = False
        self._old: Any = None
        self._deferred = False

    def _handler(self, _signum: int, _frame: Any) -> None:
        first, self.seen = not self.seen, True
        if first and not self._deferred:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Ctrl-C noted, not raised, inside (Dask's constructors: interrupted, they leave a
        half-made client whose finalizer waits 60 s at exit); raised when it ends."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False
        self.check()

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


class ZooCluster:
    """A connected Dask client (and the embedded cluster it started). Use as a context manager."""

    def __init__(self, scheduler: Optional[str], devices: Sequence[ZooDevice], *, workers: Optional[int] = None,
                 tag: str = "", connect_timeout: float = CONNECT_TIMEOUT, ctrl_c: Optional[CtrlC] = None) -> None:
        self.scheduler = scheduler
        self.connect_timeout = connect_timeout
        self.tag = tag
        self.ctrl_c = ctrl_c or CtrlC()
        self.cluster: Optional[LocalCluster] = None
        self._starting: Optional[Client] = None  # the embedded cluster's client while its workers start
        try:
            self.client: Client = self._embedded(devices, workers) if scheduler is None else self._connect(scheduler)
            self.client.register_plugin(ZooWorkerPlugin(embedded=scheduler is None), name=ZooWorkerPlugin.name)
        except BaseException:  # Ctrl-C while it starts too: what started is closed, nothing is left running
            self.close()
            raise

    def _connect(self, address: str) -> Client:
        if not _ADDRESS.match(address):
            raise UsageError(f"--scheduler {address!r}: expected tcp://HOST:PORT (e.g. tcp://10.0.0.5:8786)")
        # Dask bounds the TCP connect by its timeout, not the handshake that follows: a port that
        # accepts and never answers (a frozen scheduler, a proxy) would hold Client() forever.
        # So Client() is made in a thread of its own, waited for --connect-timeout, and left
        # behind (a daemon thread: it ends with the process) when it has not answered by then.
        made: Dict[str, Any] = {}

        def connect() -> None:
            try:
                made["client"] = Client(address, timeout=self.connect_timeout, set_as_default=False)
            except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread)
                made["error"] = exc

        waiter = threading.Thread(target=connect, name="lar-prec-scheduler-connect", daemon=True)
        waiter.start()
        waiter.join(self.connect_timeout + 1.0)  # Dask's own deadline, and a second for its reply
        exc = made.get("error")
        if waiter.is_alive():
            raise ClusterError(f"scheduler {address}: no answer within {self.connect_timeout:g} s (the port accepts "
                               "connections but does not answer as a Dask scheduler); check the address, or "
                               "start it with `dask scheduler` (docs/zoo.md)")
        if isinstance(exc, (OSError, TimeoutError)):
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise ClusterError(f"scheduler {address}: cannot reach it within {self.connect_timeout:g} s ({detail}); "
                               "start it with `dask scheduler` (docs/zoo.md)") from None
        if exc is not None:
            raise exc
        return made["client"]

    def _embedded(self, devices: Sequence[ZooDevice], workers: Optional[int]) -> Client:
        n = workers or os.cpu_count() or 1
        try:
            with self.ctrl_c.deferred():
                self._make_local(devices, n)
            # tasks go out as soon as one worker is there (the others join while the first runs)
            self._starting.wait_for_workers(1, timeout=START_TIMEOUT)  # type: ignore[union-attr]
            return self._starting  # type: ignore[return-value]
        except (OSError, TimeoutError, asyncio.TimeoutError) as exc:
            raise ClusterError(f"the embedded Dask cluster did not start: {' '.join(str(exc).split())}") from None

    def _make_local(self, devices: Sequence[ZooDevice], n: int) -> None:
        """The LocalCluster (its scheduler; the workers start in the background) and its client."""
        self.cluster = LocalCluster(n_workers=0, threads_per_worker=1, processes=True, memory_limit=0,
                                    dashboard_address=":0", env={ZOO_TAG: self.tag},
                                    # the zoo reports every failure itself, once, in its own words
                                    silence_logs=logging.CRITICAL)
        spec = self.cluster.new_spec
        for i in range(n):
            self.cluster.worker_spec[f"cpu-{i}"] = spec
        # one worker per device owns its resource: the device's tasks go there, one at a time
        for d in devices:
            if d.resource is not None:
                self.cluster.worker_spec[f"device-{d.name}"] = {
                    "cls": Nanny, "options": {**spec["options"], "resources": {d.resource: 1}}}
        self.cluster.scale(len(self.cluster.worker_spec))  # the workers start in the background
        self._starting = Client(self.cluster, set_as_default=False)

    @property
    def workers(self) -> Dict[str, Dict[str, Any]]:
        return dict(self.client.scheduler_info(n_workers=-1).get("workers") or {})

    def check_devices(self, devices: Sequence[ZooDevice]) -> None:
        """Refuse (exit 2) a device whose resource no worker advertises: its tasks would wait forever.
        (The embedded cluster starts a worker for each device itself.)"""
        if self.cluster is not None:
            return
        owned = {r for w in self.workers.values() for r, v in (w.get("resources") or {}).items() if v}
        if not self.workers:
            raise ClusterError(f"scheduler {self.scheduler}: no worker is connected (start one with `dask worker "
                               f"{self.scheduler}`)")
        lost = [d for d in devices if d.resource is not None and d.resource not in owned]
        if lost:
            d = lost[0]
            raise ManifestError(f"device {d.name!r} ({d.remote}): no worker of {self.scheduler} owns it; start the "
                                f"worker that reaches it with --resources \"{d.resource}=1\" (docs/zoo.md)")

    @property
    def dashboard(self) -> Optional[str]:
        """The dashboard's link when it answers (it needs bokeh where the scheduler runs)."""
        try:
            link = self.client.dashboard_link
            if "dashboard" not in (self.client.scheduler_info(n_workers=0).get("services") or {}):
                return None
            with urllib.request.urlopen(link, timeout=2) as r:  # noqa: S310 (the scheduler's own http://)
                # without bokeh the scheduler serves a page that says so: no dashboard then
                return link if r.status == 200 and b"needs bokeh" not in r.read(4096) else None
        except (OSError, ValueError, KeyError):
            return None

    def stop_runs(self, keys: Sequence[str]) -> None:
        """Kill the load_and_run runs of the workers that hold ``keys`` (Ctrl-C)."""
        processing = self.client.processing()
        busy = [w for w, ks in processing.items() if set(ks) & set(keys)]
        if busy:
            self.client.run(stop_runs, workers=busy)

    def close(self) -> None:
        """Close the client and the embedded cluster (each bounded: a cluster interrupted while it
        started may not answer), then kill what the embedded workers left running."""
        client = getattr(self, "client", None) or self._starting
        try:
            if client is not None:
                client.close(timeout=CLOSE_TIMEOUT)
            if self.cluster is not None:
                self.cluster.close(timeout=CLOSE_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 (asyncio's TimeoutError too: what is left is killed below)
            log.info("closing the Dask cluster: %s", exc)
        if self.tag:  # what the embedded workers' children left behind (Ctrl-C, a worker killed)
            kill_tagged(ZOO_TAG, self.tag, exclude=(os.getpid(),))

    def __enter__(self) -> "ZooCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
