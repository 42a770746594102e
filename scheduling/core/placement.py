"""Placement: turn "job J gets n GPUs of model M" into concrete GPU ids.

Two placers share one state object:

- ``place_buddy`` (PowerFlow/GreenFlow, ElasticFlow): a job of n <= node-size GPUs gets
  an aligned power-of-two block inside one node (offset a multiple of the block size),
  so the buddy halves left over stay usable for the next power-of-two job instead of
  becoming fragments that sit idle but powered. Larger jobs get whole nodes, packed
  onto as few switches as possible and onto partly used switches first, so that
  all-reduce stays under one switch and whole switches stay free for big jobs.
  Running jobs keep their GPUs when their size is unchanged; a resized job prefers a
  block that overlaps its current GPUs. If the kept layout leaves no room, the round
  repacks everyone largest first (still preferring each job's current block).
- ``place_first_fit``: the plain baseline placer: keep running jobs where they are, give
  every other job the first free GPUs in node order, across nodes if needed.

Both are pure and deterministic: the same cluster and requests give the same ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scheduling.core.types import Cluster


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    job_id: str
    n_gpus: int
    gpu_model: str
    current_gpu_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PlacementResult:
    gpu_ids: dict[str, tuple[str, ...]]  # job_id -> GPUs, in node/index order
    failed: tuple[str, ...]  # job ids that got nothing, in request order


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def buddy_sizes(node_gpus: int, capacity: int) -> tuple[int, ...]:
    """GPU counts the buddy placer serves: powers of two up to the node size, then
    the node size times powers of two (whole nodes), up to ``capacity``."""
    sizes: list[int] = []
    s = 1
    while s <= node_gpus and s <= capacity:
        sizes.append(s)
        s *= 2
    k = 2
    while node_gpus * k <= capacity:
        sizes.append(node_gpus * k)
        k *= 2
    if node_gpus <= capacity and node_gpus not in sizes:
        sizes.append(node_gpus)
    return tuple(sorted(sizes))


class _Layout:
    """Free/used state of the schedulable GPUs of one round, by (node, position).

    A node holding GPUs of several models is split into one virtual node per model,
    because a job never mixes GPU models.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.node_ids: list[str] = []  # GPU ids by position, per virtual node
        self.gpu_ids: list[list[str]] = []
        self.model: list[str] = []
        self.switch: list[str] = []
        self.free: list[list[bool]] = []
        self.free_count: list[int] = []
        self.where: dict[str, tuple[int, int]] = {}
        self.by_model: dict[str, list[int]] = {}
        for node in cluster.nodes:
            if not node.schedulable:
                continue
            per_model: dict[str, list] = {}
            for g in sorted(node.gpus, key=lambda g: g.index):
                per_model.setdefault(g.model, []).append(g)
            for model in sorted(per_model):
                gpus = per_model[model]
                v = len(self.gpu_ids)
                self.node_ids.append(node.name)
                self.gpu_ids.append([g.gpu_id for g in gpus])
                self.model.append(model)
                self.switch.append(node.switch)
                self.free.append([True] * len(gpus))
                self.free_count.append(len(gpus))
                self.by_model.setdefault(model, []).append(v)
                for pos, g in enumerate(gpus):
                    self.where[g.gpu_id] = (v, pos)
        # Buckets of virtual nodes by free count, per model: best fit without a scan.
        self.buckets: dict[str, list[dict[int, None]]] = {}
        for model, vs in self.by_model.items():
            size = max(len(self.gpu_ids[v]) for v in vs)
            b: list[dict[int, None]] = [{} for _ in range(size + 1)]
            for v in vs:
                b[self.free_count[v]][v] = None
            self.buckets[model] = b

    def node_size(self, model: str) -> int:
        return len(self.buckets[model]) - 1 if model in self.buckets else 0

    def take(self, picks: Iterable[tuple[int, int]]) -> tuple[str, ...]:
        out = []
        for v, pos in sorted(picks):
            assert self.free[v][pos], "placement picked a used GPU"
            self.free[v][pos] = False
            b = self.buckets[self.model[v]]
            del b[self.free_count[v]][v]
            self.free_count[v] -= 1
            b[self.free_count[v]][v] = None
            out.append(self.gpu_ids[v][pos])
        return tuple(out)

    def locate(self, gpu_ids: Sequence[str], model: str) -> list[tuple[int, int]] | None:
        """Positions of ``gpu_ids`` if all still exist, are schedulable and of ``model``."""
        locs = []
        for gid in gpu_ids:
            loc = self.where.get(gid)
            if loc is None or self.model[loc[0]] != model:
                return None
            locs.append(loc)
        return locs

    def all_free(self, locs: Sequence[tuple[int, int]]) -> bool:
        return all(self.free[v][p] for v, p in locs)

    # --- buddy blocks inside a node ---------------------------------------------

    def _aligned_block(self, v: int, size: int, prefer: set[int]) -> int | None:
        """Offset of the best free aligned block of ``size`` in node ``v``: most
        overlap with ``prefer``, then the one whose enclosing buddy is most used (so
        whole free halves stay whole), then the lowest offset."""
        fl = self.free[v]
        n = len(fl)
        best: tuple[int, int, int] | None = None
        best_off = None
        for off in range(0, n - size + 1, size):
            if not all(fl[off : off + size]):
                continue
            overlap = sum(1 for p in range(off, off + size) if p in prefer)
            outer = (off // (2 * size)) * 2 * size
            outer_free = sum(fl[outer : min(outer + 2 * size, n)])
            key = (-overlap, outer_free, off)
            if best is None or key < best:
                best, best_off = key, off
        return best_off

    def place_in_node(
        self, model: str, size: int, current: Sequence[tuple[int, int]]
    ) -> tuple[str, ...] | None:
        # A resized job first tries the node it already runs on, so that part of it
        # stays put and its data stays local.
        for v in dict.fromkeys(v for v, _ in current):
            prefer = {p for cv, p in current if cv == v}
            off = self._aligned_block(v, size, prefer)
            if off is not None and any(p in prefer for p in range(off, off + size)):
                return self.take((v, p) for p in range(off, off + size))
        buckets = self.buckets.get(model)
        if buckets is None:
            return None
        for f in range(size, len(buckets)):  # best fit: fullest node that fits
            for v in buckets[f]:
                off = self._aligned_block(v, size, set())
                if off is not None:
                    return self.take((v, p) for p in range(off, off + size))
        return None

    # --- whole nodes under switches ---------------------------------------------

    def place_whole_nodes(
        self, model: str, size: int, current: Sequence[tuple[int, int]]
    ) -> tuple[str, ...] | None:
        node_size = self.node_size(model)
        k = -(-size // node_size)
        if k * node_size != size:
            return None
        free_nodes = [
            v
            for v in self.by_model.get(model, ())
            if self.free_count[v] == len(self.gpu_ids[v]) == node_size
        ]
        if len(free_nodes) < k:
            return None
        mine = {v for v, _ in current}
        per_switch: dict[str, list[int]] = {}
        busy_on_switch: dict[str, int] = {}
        for v in self.by_model[model]:
            busy_on_switch[self.switch[v]] = (
                busy_on_switch.get(self.switch[v], 0) + len(self.gpu_ids[v]) - self.free_count[v]
            )
        for v in free_nodes:
            per_switch.setdefault(self.switch[v], []).append(v)
        for vs in per_switch.values():
            vs.sort(key=lambda v: (v not in mine, v))
        # One switch if any can hold it: the one with the fewest free nodes that
        # suffices, partly used ones first; else as few switches as possible.
        fitting = [s for s, vs in per_switch.items() if len(vs) >= k]
        chosen: list[int] = []
        if fitting:
            s = min(fitting, key=lambda s: (len(per_switch[s]), -busy_on_switch[s], s))
            chosen = per_switch[s][:k]
        else:
            order = sorted(per_switch, key=lambda s: (-len(per_switch[s]), -busy_on_switch[s], s))
            for s in order:
                need = k - len(chosen)
                if need <= 0:
                    break
                chosen.extend(per_switch[s][:need])
        return self.take((v, p) for v in chosen for p in range(node_size))

    # --- anything that fits -------------------------------------------------------

    def place_spread(self, model: str, size: int, *, first_fit: bool) -> tuple[str, ...] | None:
        vs = self.by_model.get(model, [])
        if sum(self.free_count[v] for v in vs) < size:
            return None
        if not first_fit:
            # Fewest nodes: one node that fits (fullest first), else the emptiest nodes.
            one = [v for v in vs if self.free_count[v] >= size]
            if one:
                v = min(one, key=lambda v: (self.free_count[v], v))
                return self.take(
                    [(v, p) for p in range(len(self.free[v])) if self.free[v][p]][:size]
                )
            vs = sorted(vs, key=lambda v: (-self.free_count[v], v))
        picks: list[tuple[int, int]] = []
        for v in vs:
            for p, is_free in enumerate(self.free[v]):
                if is_free and len(picks) < size:
                    picks.append((v, p))
            if len(picks) == size:
                break
        if len(picks) > size:
            picks = picks[:size]
        if len(picks) < size:
            return None
        return self.take(picks)


def _keep_in_place(
    layout: _Layout, requests: Sequence[PlacementRequest], out: dict[str, tuple[str, ...]]
) -> None:
    for r in requests:
        if r.current_gpu_ids and len(r.current_gpu_ids) == r.n_gpus:
            locs = layout.locate(r.current_gpu_ids, r.gpu_model)
            if locs is not None and layout.all_free(locs):
                layout.take(locs)
                out[r.job_id] = tuple(r.current_gpu_ids)


def _place_buddy_one(layout: _Layout, r: PlacementRequest) -> tuple[str, ...] | None:
    node_size = layout.node_size(r.gpu_model)
    if node_size == 0:
        return None
    current = (layout.locate(r.current_gpu_ids, r.gpu_model) if r.current_gpu_ids else None) or []
    if r.n_gpus <= node_size and is_power_of_two(r.n_gpus):
        return layout.place_in_node(r.gpu_model, r.n_gpus, current)
    if r.n_gpus > node_size and r.n_gpus % node_size == 0:
        return layout.place_whole_nodes(r.gpu_model, r.n_gpus, current)
    # Not a buddy size (a rigid baseline request such as 3 or 12 GPUs): fewest nodes.
    return layout.place_spread(r.gpu_model, r.n_gpus, first_fit=False)


def _buddy_pass(
    cluster: Cluster,
    requests: Sequence[PlacementRequest],
    *,
    keep: bool,
    largest_first: bool = True,
) -> PlacementResult:
    layout = _Layout(cluster)
    out: dict[str, tuple[str, ...]] = {}
    if keep:
        _keep_in_place(layout, requests, out)
    # Largest first: power-of-two blocks placed in decreasing size never fragment.
    rest = [r for r in requests if r.job_id not in out]
    if largest_first:
        rest.sort(key=lambda r: -r.n_gpus)
    failed = set()
    for r in rest:
        if not keep and r.current_gpu_ids and len(r.current_gpu_ids) == r.n_gpus:
            locs = layout.locate(r.current_gpu_ids, r.gpu_model)
            if locs is not None and layout.all_free(locs) and _is_buddy_block(layout, locs):
                out[r.job_id] = layout.take(locs)
                continue
        ids = _place_buddy_one(layout, r)
        if ids is None:
            failed.add(r.job_id)
        else:
            out[r.job_id] = ids
    return PlacementResult(out, tuple(r.job_id for r in requests if r.job_id in failed))


def _is_buddy_block(layout: _Layout, locs: Sequence[tuple[int, int]]) -> bool:
    nodes = {v for v, _ in locs}
    n = len(locs)
    if len(nodes) == 1:
        ps = sorted(p for _, p in locs)
        return is_power_of_two(n) and ps[0] % n == 0 and ps == list(range(ps[0], ps[0] + n))
    return all(sum(1 for cv, _ in locs if cv == v) == len(layout.gpu_ids[v]) for v in nodes)


def place_buddy(cluster: Cluster, requests: Sequence[PlacementRequest]) -> PlacementResult:
    """Buddy placement with network packing; see the module docstring.

    First keeps every unchanged running job in place; if that leaves some job without
    a block, also tries a full repack (largest first, each job preferring its current
    block) and a pass in request (priority) order, and keeps the layout that serves
    the requests best in priority order (ties: the one moving fewest jobs).
    """
    kept = _buddy_pass(cluster, requests, keep=True)
    if not kept.failed:
        return kept
    repacked = _buddy_pass(cluster, requests, keep=False)
    if not repacked.failed:
        return repacked
    ordered = _buddy_pass(cluster, requests, keep=False, largest_first=False)

    def served(res: PlacementResult) -> tuple[bool, ...]:
        return tuple(r.job_id in res.gpu_ids for r in requests)

    return max((kept, repacked, ordered), key=served)  # max keeps the first of equals


def place_first_fit(cluster: Cluster, requests: Sequence[PlacementRequest]) -> PlacementResult:
    """Keep running jobs in place; every other job, in request order, gets the first
    free GPUs of its model in node order (across nodes when needed)."""
    layout = _Layout(cluster)
    out: dict[str, tuple[str, ...]] = {}
    _keep_in_place(layout, requests, out)
    failed = []
    for r in requests:
        if r.job_id in out:
            continue
        ids = layout.place_spread(r.gpu_model, r.n_gpus, first_fit=True)
        if ids is None:
            failed.append(r.job_id)
        else:
            out[r.job_id] = ids
    return PlacementResult(out, tuple(failed))


PLACERS = {"buddy": place_buddy, "first_fit": place_first_fit}
