"""Measuring on a Ray cluster: `tilec tune ... --ray auto|ADDRESS` (the extra `tilec[distributed]`).

The tuner's loop, its cost model and the SQLite records stay in the driver; `RayMeasurer` is a
Measurer whose candidates are built and timed on the cluster's nodes. One measurer actor runs
per node, and only on nodes of the task's hardware: each node advertises its hardware as a Ray
custom resource, `tilec-hw-<hash of the host's target key>` (the CPU's name and features; for
`--target cuda`, also the GPU's name and compute capability, which are part of that key), which
`python -m tilec.autotune.distributed` prints for `ray start --resources`. An actor needs one
unit of its node's resource, so a node holds one measurer and measures one batch at a time, and
a record is only ever measured on the hardware it is for. Inside the actor, a LocalMeasurer
builds the candidates on that node (its builder pool) and times them in a measurement process.

A batch is split among the live actors. When a node dies, its actor's calls fail with Ray's
RayActorError: that actor is dropped and only its in-flight candidates are measured again, on
the others. The confirmation's re-measurement (tilec.autotune.confirm) compares candidates with
each other, so it runs on one node.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any, Callable, Sequence

from tilec.autotune.measure import LocalMeasurer, MeasureOptions, MeasureResult, Measurer
from tilec.autotune.task import Config, Task
from tilec.errors import TilecError

RESOURCE_PREFIX = "tilec-hw-"


def hardware_resource(target_key: str) -> str:
    """The custom resource that nodes of this target's hardware advertise."""
    return RESOURCE_PREFIX + hashlib.sha256(target_key.encode()).hexdigest()[:16]


def node_resources(target: str = "llvm") -> dict[str, int]:
    """This machine's resources for `ray start --resources` (one unit: one measurer per node)."""
    from tilec.pipeline import resolve_target

    return {hardware_resource(resolve_target(target).key): 1}


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise TilecError("--ray needs the package ray: pip install 'tilec[distributed]'") from None
    return ray


def _reachable(address: str | None) -> None:
    """A HOST:PORT address that nothing answers at fails at once (Ray itself retries for minutes)."""
    import socket

    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit() or "://" in (address or ""):
        return
    try:
        socket.create_connection((host, int(port)), timeout=5.0).close()
    except OSError as err:
        raise TilecError(f"--ray {address}: no Ray cluster answers there ({err.strerror or err}); give the head node's "
                         f"address (HOST:6379 by default) or `auto` on a node of the cluster") from None


class NodeMeasurer:
    """The actor's body (made a Ray actor class by `_actor_class`): one node's measurer."""

    def __init__(self, options: MeasureOptions, factory: Callable[[], Measurer] | None = None) -> None:
        self._measurer: Any = factory() if factory is not None else LocalMeasurer(options)

    def node(self) -> str:
        return str(_ray().get_runtime_context().get_node_id())

    def measure(self, task: Task, configs: Sequence[Config]) -> list[MeasureResult]:
        return self._measurer.measure(task, configs)

    def remeasure(self, task: Task, configs: Sequence[Config]) -> list[list[float] | None]:
        return self._measurer.remeasure(task, configs)

    def close(self) -> None:
        close = getattr(self._measurer, "close", None)
        if close is not None:
            close()


def _actor_class() -> Any:
    return _ray().remote(num_cpus=0)(NodeMeasurer)


class RayMeasurer:
    """A Measurer over the measurer actors of a Ray cluster (see the module's text). `address`:
    "auto" (a running cluster this machine belongs to), a cluster address, or None when
    ray.init() has been called already. `factory` replaces each node's LocalMeasurer (tests)."""

    default_time: float | None = None  # (the nodes time the default; the records hold it)

    def __init__(self, address: str | None = "auto", options: MeasureOptions | None = None,
                 factory: Callable[[], Measurer] | None = None) -> None:
        ray = _ray()
        self._started = False
        if not ray.is_initialized():
            _reachable(address)
            try:
                ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise TilecError(f"--ray {address}: cannot connect to a Ray cluster ({err}); start one with "
                                 f"`ray start --head --resources '{json.dumps(node_resources())}'`") from None
            self._started = True
        self._options = options or MeasureOptions()
        self._factory = factory
        self._actors: dict[str, list[tuple[str, Any]]] = {}  # resource -> live (node id, actor)
        self.measured_by: Counter[str] = Counter()  # node id -> candidates it measured
        self.lost: list[str] = []  # node ids whose actor died

    def _live(self, task: Task) -> list[tuple[str, Any]]:
        resource = hardware_resource(task.target.key)
        if resource not in self._actors:
            ray = _ray()
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(resource, 0) >= 1]
            actor = _actor_class()
            self._actors[resource] = [
                (node, actor.options(resources={resource: 1}, max_restarts=0,
                                     scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                 .remote(self._options, self._factory)) for node in nodes]
        live = self._actors[resource]
        if not live:
            raise TilecError(f"no live node of the Ray cluster advertises {resource}, the hardware of target "
                             f"{task.target.name}: start its nodes with `ray start --resources '<JSON>'`, the JSON "
                             f"being what `python -m tilec.autotune.distributed` prints on each of them")
        return live

    def _drop(self, task: Task, actor: Any) -> None:
        live = self._actors[hardware_resource(task.target.key)]
        for entry in [e for e in live if e[1] is actor]:
            live.remove(entry)
            self.lost.append(entry[0])

    def measure(self, task: Task, configs: Sequence[Config]) -> list[MeasureResult]:
        ray = _ray()
        from ray.exceptions import RayActorError

        results: list[MeasureResult | None] = [None] * len(configs)
        queue = list(range(len(configs)))
        while queue:
            live = self._live(task)
            chunks = [queue[k::len(live)] for k in range(len(live))]
            calls = {actor.measure.remote(task, [configs[i] for i in chunk]): (node, actor, chunk)
                     for (node, actor), chunk in zip(live, chunks) if chunk}
            queue = []
            while calls:
                (ref,), _ = ray.wait(list(calls), num_returns=1)
                node, actor, chunk = calls.pop(ref)
                try:
                    out = ray.get(ref)
                except RayActorError:  # the node died: its candidates go to the others
                    self._drop(task, actor)
                    queue += chunk
                    continue
                for i, result in zip(chunk, out):
                    results[i] = result
                self.measured_by[node] += len(chunk)
        return [r for r in results if r is not None]

    def remeasure(self, task: Task, configs: Sequence[Config]) -> list[list[float] | None]:
        ray = _ray()
        from ray.exceptions import RayActorError

        while True:
            node, actor = self._live(task)[0]
            try:
                return ray.get(actor.remeasure.remote(task, list(configs)))
            except RayActorError:
                self._drop(task, actor)

    def close(self) -> None:
        ray = _ray()
        actors = [actor for live in self._actors.values() for _, actor in live]
        ray.wait([actor.close.remote() for actor in actors], num_returns=len(actors), timeout=10.0)
        for actor in actors:
            ray.kill(actor)
        self._actors.clear()
        if self._started:
            ray.shutdown()

    def __enter__(self) -> "RayMeasurer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":  # the resources of this node, for `ray start --resources`
    import sys

    print(json.dumps(node_resources(sys.argv[1] if len(sys.argv) > 1 else "llvm")))


__all__ = ["RESOURCE_PREFIX", "RayMeasurer", "hardware_resource", "node_resources"]
