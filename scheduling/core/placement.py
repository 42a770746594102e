"""Placement: turn "job J gets n GPUs of model M" into concrete GPU ids.

Everything about *which* GPUs lives here: one free-GPU state and the named pickers that
choose from it. A policy either leaves naming to the round's placer (its ``placement``
attribute names one of ``PLACERS``) or names the GPUs of every grant itself with the
same state and pickers and says so with ``placement = None`` (EaCO, ONES, netdelay).

- :class:`FreeGpus` is the one free-GPU state of a round: the schedulable GPUs by
  (virtual) node, which of them are free, and how many are free per GPU model. A node
  holding GPUs of several models is split into one virtual node per model, because a
  job never mixes GPU models. Policies that only count GPUs (FIFO, Tiresias, the
  budget greedy) use its per-model count (``fits``/``reserve``/``release``, through
  ``policies.base.GpuLedger``); the others take and give named GPUs.
- Pickers, by name (``PICKERS``), each ``(free, model, n, current=()) -> ids | None``;
  they choose but do not take:

  - ``buddy``: a job of n <= node-size GPUs gets an aligned power-of-two block inside
    one node (offset a multiple of the block size), so the buddy halves left over stay
    usable for the next power-of-two job instead of becoming fragments that sit idle
    but powered. Larger jobs get whole nodes, packed onto as few switches as possible
    and onto partly used switches first, so that all-reduce stays under one switch and
    whole switches stay free for big jobs. Other sizes: the fewest nodes. A resized job
    prefers a block that overlaps its current GPUs.
  - ``first_fit``: the first free GPUs in node order, across nodes if needed.
  - ``packed``: as few nodes as the size allows (the fullest node that fits, an aligned
    block inside it when there is one; else whole free nodes under one switch).
  - ``spread``: any free GPUs, emptiest nodes first.
  - ``contiguous``: a job that already runs grows in place when its neighbours are free;
    otherwise the smallest run of consecutive free GPUs inside one node that holds it.

- Placers (``PLACERS``) place a whole round's requests: ``place_buddy`` (PowerFlow /
  GreenFlow, ElasticFlow) keeps unchanged running jobs in place and places the rest
  largest first with the ``buddy`` picker, repacking everyone if the kept layout leaves
  no room; ``place_first_fit`` keeps running jobs in place and gives every other job the
  ``first_fit`` picker's GPUs in request order.

All of it is pure and deterministic: the same cluster and requests give the same ids.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


def job_buddy_sizes(job: Any, node_gpus: int, capacity: int) -> tuple[int, ...]:
    """The buddy sizes a job may run at: those within its ``min_gpus..max_gpus``, or
    its ``min_gpus`` alone when no buddy size lies in that range."""
    hi = max(job.max_gpus, job.min_gpus)
    sizes = tuple(s for s in buddy_sizes(node_gpus, capacity) if job.min_gpus <= s <= hi)
    return sizes or (job.min_gpus,)


Loc = tuple[int, int]  # (virtual node, position in it)


class _Layout:
    """The schedulable GPUs of a cluster by virtual node (one per node and GPU model, in
    cluster order; GPUs in index order): what ``FreeGpus`` starts every round from. Built
    once per cluster object; a 4,096-GPU simulated cluster spent most of each round
    rebuilding it."""

    def __init__(self, cluster: Cluster) -> None:
        self.name: list[str] = []
        self.gpu_ids: list[list[str]] = []
        self.model: list[str] = []
        self.switch: list[str] = []
        self.where: dict[str, Loc] = {}
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
                self.name.append(node.name)
                self.gpu_ids.append([g.gpu_id for g in gpus])
                self.model.append(model)
                self.switch.append(node.switch)
                self.by_model.setdefault(model, []).append(v)
                for pos, g in enumerate(gpus):
                    self.where[g.gpu_id] = (v, pos)


# The last cluster's layout. A cluster is immutable (frozen, tuples all the way down) and the
# simulator passes the same object every round; the live service builds a new one per round,
# which misses. Holding the cluster keeps its id from being reused by another object.
_last_layout: tuple[Cluster, _Layout] | None = None


def _layout_of(cluster: Cluster) -> _Layout:
    global _last_layout
    last = _last_layout
    if last is not None and last[0] is cluster:
        return last[1]
    layout = _Layout(cluster)
    _last_layout = (cluster, layout)
    return layout


class FreeGpus:
    """The free/used state of a round's schedulable GPUs, by (virtual) node and per model.

    Virtual node ``v`` (an int, cluster order; one per node and GPU model) has
    ``name[v]`` (its node's name), ``switch[v]``, ``model[v]`` and ``gpu_ids[v]`` in
    index order; ``is_free[v][p]`` says whether position ``p`` is free. ``free`` counts
    the free GPUs per model; it starts at the GPUs counted, or at ``counts`` when given
    (a round's ``capacity``, for policies that reserve GPUs by count).
    """

    def __init__(self, cluster: Cluster, counts: Mapping[str, int] | None = None) -> None:
        layout = _layout_of(cluster)
        # The layout's lists and dicts are shared between rounds and only read here.
        self.name: list[str] = layout.name
        self.gpu_ids: list[list[str]] = layout.gpu_ids
        self.model: list[str] = layout.model
        self.switch: list[str] = layout.switch
        self.where: dict[str, Loc] = layout.where
        self.by_model: dict[str, list[int]] = layout.by_model
        # What a round changes, fresh:
        self.is_free: list[list[bool]] = [[True] * len(ids) for ids in layout.gpu_ids]
        self.free_count: list[int] = [len(ids) for ids in layout.gpu_ids]
        if counts is None:
            counts = {m: sum(len(self.gpu_ids[v]) for v in vs) for m, vs in self.by_model.items()}
        self.free: dict[str, int] = dict(counts)
        # Buckets of virtual nodes by free count, per model: best fit without a scan.
        self.buckets: dict[str, list[dict[int, None]]] = {}
        for model, vs in self.by_model.items():
            size = max(len(self.gpu_ids[v]) for v in vs)
            b: list[dict[int, None]] = [{} for _ in range(size + 1)]
            for v in vs:
                b[self.free_count[v]][v] = None
            self.buckets[model] = b

    # --- counts ------------------------------------------------------------------------

    def count(self, model: str) -> int:
        return self.free.get(model, 0)

    def fits(self, model: str, n: int) -> bool:
        return self.free.get(model, 0) >= n

    def reserve(self, model: str, n: int) -> None:
        """Count ``n`` GPUs of ``model`` as used without naming them (the placer names
        them after the policy has decided)."""
        self.free[model] -= n

    def release(self, model: str, n: int) -> None:
        self.free[model] += n

    # --- named GPUs --------------------------------------------------------------------

    def node_size(self, model: str) -> int:
        return len(self.buckets[model]) - 1 if model in self.buckets else 0

    def node_of(self, gpu_id: str) -> int:
        return self.where[gpu_id][0]

    def n_nodes(self, gpu_ids: Iterable[str]) -> int:
        return len({self.where[g][0] for g in gpu_ids})

    def free_ids(self, v: int) -> list[str]:
        """The free GPUs of virtual node ``v``, in index order."""
        return [g for g, f in zip(self.gpu_ids[v], self.is_free[v], strict=True) if f]

    def has(self, gpu_id: str, model: str) -> bool:
        """``gpu_id`` is a schedulable GPU of ``model`` (free or not)."""
        loc = self.where.get(gpu_id)
        return loc is not None and self.model[loc[0]] == model

    def free_of(self, gpu_id: str) -> bool:
        v, p = self.where[gpu_id]
        return self.is_free[v][p]

    def locate(self, gpu_ids: Sequence[str], model: str) -> list[Loc] | None:
        """Positions of ``gpu_ids`` if all still exist, are schedulable and of ``model``."""
        locs = []
        for gid in gpu_ids:
            loc = self.where.get(gid)
            if loc is None or self.model[loc[0]] != model:
                return None
            locs.append(loc)
        return locs

    def all_free(self, locs: Sequence[Loc]) -> bool:
        return all(self.is_free[v][p] for v, p in locs)

    def valid(self, gpu_ids: Sequence[str], model: str) -> bool:
        """All ids exist, are schedulable, of ``model`` and still free."""
        locs = self.locate(gpu_ids, model)
        return locs is not None and self.all_free(locs)

    def _set(self, v: int, p: int, free: bool) -> None:
        self.is_free[v][p] = free
        b = self.buckets[self.model[v]]
        del b[self.free_count[v]][v]
        self.free_count[v] += 1 if free else -1
        b[self.free_count[v]][v] = None
        self.free[self.model[v]] += 1 if free else -1

    def take_at(self, locs: Iterable[Loc]) -> tuple[str, ...]:
        """Take the GPUs at ``locs``; their ids in node/index order."""
        out = []
        for v, p in sorted(locs):
            assert self.is_free[v][p], "placement picked a used GPU"
            self._set(v, p, False)
            out.append(self.gpu_ids[v][p])
        return tuple(out)

    def take(self, gpu_ids: Iterable[str]) -> tuple[str, ...]:
        """Take the GPUs ``gpu_ids``; the ids in the order given."""
        out = tuple(gpu_ids)
        for g in out:
            v, p = self.where[g]
            assert self.is_free[v][p], "placement picked a used GPU"
            self._set(v, p, False)
        return out

    def give(self, gpu_ids: Iterable[str]) -> None:
        """Return GPUs (a preempted job's) to the free ones."""
        for g in gpu_ids:
            v, p = self.where[g]
            if not self.is_free[v][p]:
                self._set(v, p, True)

    def aligned_block(self, v: int, size: int, prefer: Collection[int] = ()) -> int | None:
        """Offset of the best free aligned block of ``size`` in node ``v``: most
        overlap with ``prefer``, then the one whose enclosing buddy is most used (so
        whole free halves stay whole), then the lowest offset."""
        fl = self.is_free[v]
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

    def block(self, v: int, off: int, size: int) -> tuple[str, ...]:
        return tuple(self.gpu_ids[v][off : off + size])


Ids = tuple[str, ...]


# --- pickers: choose GPUs, do not take them --------------------------------------------


def _buddy_in_node(free: FreeGpus, model: str, size: int, current: Sequence[Loc]) -> Ids | None:
    # A resized job first tries the node it already runs on, so that part of it
    # stays put and its data stays local.
    for v in dict.fromkeys(v for v, _ in current):
        prefer = {p for cv, p in current if cv == v}
        off = free.aligned_block(v, size, prefer)
        if off is not None and any(p in prefer for p in range(off, off + size)):
            return free.block(v, off, size)
    buckets = free.buckets.get(model)
    if buckets is None:
        return None
    for f in range(size, len(buckets)):  # best fit: fullest node that fits
        for v in buckets[f]:
            off = free.aligned_block(v, size, set())
            if off is not None:
                return free.block(v, off, size)
    return None


def _buddy_whole_nodes(free: FreeGpus, model: str, size: int, current: Sequence[Loc]) -> Ids | None:
    node_size = free.node_size(model)
    k = -(-size // node_size)
    if k * node_size != size:
        return None
    free_nodes = [
        v
        for v in free.by_model.get(model, ())
        if free.free_count[v] == len(free.gpu_ids[v]) == node_size
    ]
    if len(free_nodes) < k:
        return None
    mine = {v for v, _ in current}
    per_switch: dict[str, list[int]] = {}
    busy_on_switch: dict[str, int] = {}
    for v in free.by_model[model]:
        busy_on_switch[free.switch[v]] = (
            busy_on_switch.get(free.switch[v], 0) + len(free.gpu_ids[v]) - free.free_count[v]
        )
    for v in free_nodes:
        per_switch.setdefault(free.switch[v], []).append(v)
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
    return tuple(free.gpu_ids[v][p] for v in sorted(chosen) for p in range(node_size))


def _in_node_order(free: FreeGpus, model: str, size: int, *, fewest_nodes: bool) -> Ids | None:
    """``size`` free GPUs in node order (first fit), or on the fewest nodes: one node
    that fits (fullest first), else the emptiest nodes first."""
    vs = free.by_model.get(model, [])
    if sum(free.free_count[v] for v in vs) < size:
        return None
    if fewest_nodes:
        one = [v for v in vs if free.free_count[v] >= size]
        if one:
            v = min(one, key=lambda v: (free.free_count[v], v))
            return tuple(free.free_ids(v)[:size])
        vs = sorted(vs, key=lambda v: (-free.free_count[v], v))
    picks: list[Loc] = []
    for v in vs:
        for p, is_free in enumerate(free.is_free[v]):
            if is_free and len(picks) < size:
                picks.append((v, p))
        if len(picks) == size:
            break
    if len(picks) < size:
        return None
    return tuple(free.gpu_ids[v][p] for v, p in sorted(picks))


def pick_buddy(free: FreeGpus, model: str, n: int, current: Sequence[str] = ()) -> Ids | None:
    """Buddy placement with network packing; see the module docstring."""
    node_size = free.node_size(model)
    if node_size == 0:
        return None
    locs = (free.locate(current, model) if current else None) or []
    if n <= node_size and is_power_of_two(n):
        return _buddy_in_node(free, model, n, locs)
    if n >= node_size and n % node_size == 0:
        # whole nodes (n == node_size too: on 6-GPU nodes a 6-GPU job takes one node, not
        # the emptiest GPUs of two)
        return _buddy_whole_nodes(free, model, n, locs)
    # Not a buddy size (a rigid baseline request such as 3 or 12 GPUs): fewest nodes.
    return _in_node_order(free, model, n, fewest_nodes=True)


def pick_first_fit(free: FreeGpus, model: str, n: int, current: Sequence[str] = ()) -> Ids | None:
    """The first ``n`` free GPUs of ``model`` in node order, across nodes if needed."""
    return _in_node_order(free, model, n, fewest_nodes=False)


def pick_packed(free: FreeGpus, model: str, n: int, current: Sequence[str] = ()) -> Ids | None:
    """``n`` GPUs on as few nodes as the size allows (one node if ``n`` fits in one,
    else whole free nodes under one switch), or None."""
    if free.count(model) < n:
        return None
    nodes = free.by_model.get(model, [])
    if not nodes:
        return None
    size = max(len(free.gpu_ids[v]) for v in nodes)
    if n <= size:
        # Best fit: the fullest node that still has room keeps empty nodes whole;
        # inside it an aligned power-of-two block (buddy style) when there is one,
        # so that what is left stays in blocks the next jobs can use.
        fits = [v for v in nodes if free.free_count[v] >= n]
        if not fits:
            return None
        if is_power_of_two(n):
            aligned = [(v, off) for v in fits if (off := free.aligned_block(v, n)) is not None]
            if aligned:
                v, off = min(aligned, key=lambda t: (free.free_count[t[0]], t[0]))
                return free.block(v, off, n)
        v = min(fits, key=lambda v: (free.free_count[v], v))
        return tuple(free.free_ids(v)[:n])
    k = -(-n // size)
    whole = [v for v in nodes if free.free_count[v] == len(free.gpu_ids[v]) == size]
    by_switch: dict[str, list[int]] = {}
    for v in whole:
        by_switch.setdefault(free.switch[v], []).append(v)
    fitting = [s for s, vs in by_switch.items() if len(vs) >= k]
    if not fitting:
        return None
    s = min(fitting, key=lambda s: (len(by_switch[s]), s))
    picks = [g for v in by_switch[s][:k] for g in free.free_ids(v)]
    return tuple(picks[:n])


def pick_spread(free: FreeGpus, model: str, n: int, current: Sequence[str] = ()) -> Ids | None:
    """Any ``n`` free GPUs, emptiest nodes first (by node name among equals)."""
    if free.count(model) < n:
        return None
    nodes = sorted(
        free.by_model.get(model, []), key=lambda v: (-free.free_count[v], free.name[v], v)
    )
    picks: list[str] = []
    for v in nodes:
        for g in free.free_ids(v):
            if len(picks) < n:
                picks.append(g)
    return tuple(picks) if len(picks) == n else None


def pick_contiguous(free: FreeGpus, model: str, n: int, current: Sequence[str] = ()) -> Ids | None:
    """A running job (``current``, its GPUs in node/index order) grows in place when the
    neighbours of its block are free and it spans no more nodes; otherwise the smallest
    run of consecutive free GPUs inside one node that holds ``n``."""
    order = [g for v in free.by_model.get(model, []) for g in free.gpu_ids[v]]
    if current:
        grown = _grow_in_place(free, order, current, n)
        if grown is not None:
            return grown
    best = None
    run: list[str] = []
    for g in [*order, None]:
        if (
            g is not None
            and free.free_of(g)
            and (not run or free.node_of(run[-1]) == free.node_of(g))
        ):
            run.append(g)
            continue
        if len(run) >= n and (best is None or len(run) < len(best)):
            best = run
        run = [g] if g is not None and free.free_of(g) else []
    return tuple(best[:n]) if best else None


def _grow_in_place(free: FreeGpus, order: list[str], cur: Sequence[str], n: int) -> Ids | None:
    if not free.valid(cur, free.model[free.node_of(cur[0])]):
        return None
    lo = order.index(cur[0])
    for start in range(max(lo - (n - len(cur)), 0), lo + 1):
        window = order[start : start + n]
        if len(window) == n and set(cur) <= set(window) and all(free.free_of(g) for g in window):
            if free.n_nodes(window) == free.n_nodes(cur):
                return tuple(window)
    return None


Picker = Callable[..., "Ids | None"]

PICKERS: dict[str, Picker] = {
    "buddy": pick_buddy,
    "first_fit": pick_first_fit,
    "packed": pick_packed,
    "spread": pick_spread,
    "contiguous": pick_contiguous,
}


# --- placers: a round's requests ------------------------------------------------------


def _keep_in_place(
    free: FreeGpus, requests: Sequence[PlacementRequest], out: dict[str, tuple[str, ...]]
) -> None:
    for r in requests:
        if r.current_gpu_ids and len(r.current_gpu_ids) == r.n_gpus:
            locs = free.locate(r.current_gpu_ids, r.gpu_model)
            if locs is not None and free.all_free(locs):
                free.take_at(locs)
                out[r.job_id] = tuple(r.current_gpu_ids)


def _is_buddy_block(free: FreeGpus, locs: Sequence[Loc]) -> bool:
    nodes = {v for v, _ in locs}
    n = len(locs)
    if len(nodes) == 1:
        ps = sorted(p for _, p in locs)
        return is_power_of_two(n) and ps[0] % n == 0 and ps == list(range(ps[0], ps[0] + n))
    return all(sum(1 for cv, _ in locs if cv == v) == len(free.gpu_ids[v]) for v in nodes)


def _buddy_pass(
    cluster: Cluster,
    requests: Sequence[PlacementRequest],
    *,
    keep: bool,
    largest_first: bool = True,
) -> PlacementResult:
    free = FreeGpus(cluster)
    out: dict[str, tuple[str, ...]] = {}
    if keep:
        _keep_in_place(free, requests, out)
    # Largest first: power-of-two blocks placed in decreasing size never fragment.
    rest = [r for r in requests if r.job_id not in out]
    if largest_first:
        rest.sort(key=lambda r: -r.n_gpus)
    failed = set()
    for r in rest:
        if not keep and r.current_gpu_ids and len(r.current_gpu_ids) == r.n_gpus:
            locs = free.locate(r.current_gpu_ids, r.gpu_model)
            if locs is not None and free.all_free(locs) and _is_buddy_block(free, locs):
                out[r.job_id] = free.take_at(locs)
                continue
        ids = pick_buddy(free, r.gpu_model, r.n_gpus, r.current_gpu_ids)
        if ids is None:
            failed.add(r.job_id)
        else:
            out[r.job_id] = free.take(ids)
    return PlacementResult(out, tuple(r.job_id for r in requests if r.job_id in failed))


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
    free = FreeGpus(cluster)
    out: dict[str, tuple[str, ...]] = {}
    _keep_in_place(free, requests, out)
    failed = []
    for r in requests:
        if r.job_id in out:
            continue
        ids = pick_first_fit(free, r.gpu_model, r.n_gpus)
        if ids is None:
            failed.append(r.job_id)
        else:
            out[r.job_id] = free.take(ids)
    return PlacementResult(out, tuple(failed))


PLACERS = {"buddy": place_buddy, "first_fit": place_first_fit}
"""Placers by a policy's ``placement`` name. A policy whose ``placement`` is None names
the GPUs of every grant itself (with ``FreeGpus`` and ``PICKERS``); no placer runs for it."""
