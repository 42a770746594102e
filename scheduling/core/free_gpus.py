"""Free GPUs by node, for policies that name their GPUs themselves (EaCO, ONES, netdelay).

Such a policy keeps the GPUs running jobs hold and picks new ones from what is left,
so it must know which GPUs are free *where*. ``FreeGpus`` is that ledger: GPU ids per
node in node/index order, with two pickers. Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduling.core.types import Cluster


class FreeGpus:
    """Schedulable GPU ids of each GPU model that no kept job holds, per node."""

    def __init__(self, cluster: Cluster) -> None:
        self.nodes: dict[str, list[str]] = {}  # node -> free ids, index order
        self.model_of: dict[str, str] = {}
        self.node_of: dict[str, str] = {}
        self.node_model: dict[str, str] = {}
        self.node_size: dict[str, int] = {}
        self.switch_of: dict[str, str] = {}
        self._index: dict[str, int] = {}
        for node in cluster.nodes:
            if not node.schedulable:
                continue
            ids = [g.gpu_id for g in sorted(node.gpus, key=lambda g: g.index)]
            self.nodes[node.name] = ids
            self.node_size[node.name] = len(ids)
            self.switch_of[node.name] = node.switch
            for g in node.gpus:
                self._index[g.gpu_id] = g.index
                self.model_of[g.gpu_id] = g.model
                self.node_of[g.gpu_id] = node.name
                self.node_model[node.name] = g.model
        # Free GPUs per model, kept by take() and give(): a long queue asks for every job
        # whether enough are free before any picker walks the nodes.
        # (Counted by node model, as the pickers choose nodes by it.)
        self._free_of: dict[str, int] = {}
        for v, ids in self.nodes.items():
            if v in self.node_model:
                self._free_of[self.node_model[v]] = self._free_of.get(self.node_model[v], 0) + len(
                    ids
                )

    def valid(self, gpu_ids: Sequence[str], model: str) -> bool:
        """All ids exist, are schedulable, of ``model`` and still free."""
        return all(
            self.model_of.get(g) == model and g in self.nodes[self.node_of[g]] for g in gpu_ids
        )

    def take(self, gpu_ids: Iterable[str]) -> tuple[str, ...]:
        out = tuple(gpu_ids)
        for g in out:
            self.nodes[self.node_of[g]].remove(g)
            self._free_of[self.node_model[self.node_of[g]]] -= 1
        return out

    def give(self, gpu_ids: Iterable[str]) -> None:
        """Return GPUs (a preempted job's) to the free lists, in index order."""
        for g in gpu_ids:
            node = self.node_of[g]
            if g not in self.nodes[node]:
                self.nodes[node].append(g)
                self.nodes[node].sort(key=self._index.__getitem__)
                self._free_of[self.node_model[node]] += 1

    def count(self, model: str) -> int:
        return self._free_of.get(model, 0)

    def _model_nodes(self, model: str) -> list[str]:
        return [v for v in self.nodes if self.node_model.get(v) == model]

    def consolidated(self, model: str, n: int) -> tuple[str, ...] | None:
        """``n`` GPUs on as few nodes as the size allows (one node if ``n`` fits in one,
        else whole free nodes under one switch), or None. Not taken yet."""
        if self.count(model) < n:
            return None
        nodes = self._model_nodes(model)
        if not nodes:
            return None
        size = max(self.node_size[v] for v in nodes)
        if n <= size:
            # Best fit: the fullest node that still has room keeps empty nodes whole;
            # inside it an aligned power-of-two block (buddy style) when there is one,
            # so that what is left stays in blocks the next jobs can use.
            fits = [v for v in nodes if len(self.nodes[v]) >= n]
            if not fits:
                return None
            order = {v: i for i, v in enumerate(nodes)}
            aligned = [(v, blk) for v in fits if (blk := self._aligned(v, n)) is not None]
            if aligned:
                v, blk = min(aligned, key=lambda t: (len(self.nodes[t[0]]), order[t[0]]))
                return blk
            v = min(fits, key=lambda v: (len(self.nodes[v]), order[v]))
            return tuple(self.nodes[v][:n])
        k = -(-n // size)
        whole = [v for v in nodes if len(self.nodes[v]) == self.node_size[v] == size]
        by_switch: dict[str, list[str]] = {}
        for v in whole:
            by_switch.setdefault(self.switch_of[v], []).append(v)
        fitting = [s for s, vs in by_switch.items() if len(vs) >= k]
        if not fitting:
            return None
        s = min(fitting, key=lambda s: (len(by_switch[s]), s))
        picks = [g for v in by_switch[s][:k] for g in self.nodes[v]]
        return tuple(picks[:n])

    def _aligned(self, node: str, n: int) -> tuple[str, ...] | None:
        """A free block of ``n`` GPUs at an offset that is a multiple of ``n`` (only
        for powers of two), preferring the block whose enclosing pair is most used."""
        if n & (n - 1):
            return None
        free = set(self.nodes[node])
        ids = sorted((g for g in self.node_of if self.node_of[g] == node), key=self._index.get)
        best = None
        for off in range(0, len(ids) - n + 1, n):
            block = ids[off : off + n]
            if all(g in free for g in block):
                outer = (off // (2 * n)) * 2 * n
                outer_free = sum(1 for g in ids[outer : outer + 2 * n] if g in free)
                if best is None or outer_free < best[0]:
                    best = (outer_free, tuple(block))
        return None if best is None else best[1]

    def spread(self, model: str, n: int) -> tuple[str, ...] | None:
        """Any ``n`` free GPUs, emptiest nodes first (fewest nodes among the rest)."""
        if self.count(model) < n:
            return None
        nodes = sorted(self._model_nodes(model), key=lambda v: (-len(self.nodes[v]), v))
        picks: list[str] = []
        for v in nodes:
            for g in self.nodes[v]:
                if len(picks) < n:
                    picks.append(g)
        return tuple(picks) if len(picks) == n else None

    def n_nodes(self, gpu_ids: Iterable[str]) -> int:
        return len({self.node_of[g] for g in gpu_ids})
