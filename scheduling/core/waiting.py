"""Waiting reasons made when read: a round's ``Plan.waiting`` for a long queue.

``plan_round`` gives every waiting job a ``WaitReason``, and FIFO's names the job's
place in the queue, so no two are alike: made one by one, they cost a long queue of tiny
jobs most of its round (a sentence and a frozen object per waiting job, every round). Yet
past the point where nothing more can start, each reason is a pure function of the job's
place and of what the round had left, and the simulator reads only how many of each code
there are. So a policy may hand the tail of its queue over as a :class:`QueueTail`: the
jobs, where the tail starts in the queue, and the rule that makes each one's reason. The
reason is made when someone reads it (the live service stores every one; ``repr`` and
``==`` read them all), and is then the object the eager loop would have made.

:class:`WaitingReasons` joins such tails and plain dicts, in order, into one read-only
mapping that behaves as the ``dict`` the eager round built: the same keys in the same
order, equal values, ``repr`` to the byte. Its parts never share a key (``plan_round``
checks what it cannot know, and falls back to a ``dict`` where they would). Count codes
with :func:`wait_code_counts`, which asks a tail for its counts without making sentences.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

from scheduling.core.types import WaitCode, WaitReason

_JOB_ID = attrgetter("job.job_id")
_REQUESTED = attrgetter("job.requested_gpus")
_CODE = attrgetter("code")


class QueueTail(Mapping[str, WaitReason]):
    """The reasons of ``views`` (job views, the queue from position ``start`` on), made
    when read: a job asking for more GPUs than its model's ``capacity`` waits as too big
    (``base.too_big``, as ``serve_queue`` says it), every other one with
    ``reason(position, view, requested GPUs)``, whose code is always ``code``. With
    ``capacity`` None there is no too-big rule (a policy that walks its queue itself)."""

    __slots__ = ("_views", "_start", "_reason", "_code", "_capacity", "_ids", "_index", "_made")

    def __init__(
        self,
        views: Sequence[Any],
        start: int,
        reason: Callable[[int, Any, int], WaitReason],
        code: WaitCode,
        capacity: Mapping[str, int] | None,
    ) -> None:
        self._views = views
        self._start = start
        self._reason = reason
        self._code = code
        self._capacity = None if capacity is None else dict(capacity)
        self._ids: list[str] = list(map(_JOB_ID, views))
        self._index: dict[str, int] | None = None
        self._made: dict[int, WaitReason] = {}

    def _at(self, i: int) -> WaitReason:
        made = self._made.get(i)
        if made is None:
            from scheduling.core.policies.base import too_big

            jv = self._views[i]
            n = jv.job.requested_gpus
            cap = None if self._capacity is None else self._capacity[jv.gpu_model]
            if cap is not None and n > cap:
                made = too_big(n, jv.gpu_model, cap)
            else:
                made = self._reason(self._start + i, jv, n)
            self._made[i] = made
        return made

    def _where(self) -> dict[str, int]:
        if self._index is None:
            self._index = dict(zip(self._ids, range(len(self._ids)), strict=True))
        return self._index

    def __getitem__(self, job_id: str) -> WaitReason:
        return self._at(self._where()[job_id])

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._where()

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def values(self):  # type: ignore[override]
        return [self._at(i) for i in range(len(self._ids))]

    def items(self):  # type: ignore[override]
        return list(zip(self._ids, self.values(), strict=True))

    def code_counts(self) -> Counter[WaitCode]:
        """How many of the tail's jobs wait with each code, in the order the codes first
        appear (as ``Counter`` over the reasons would give them), without a sentence."""
        counts: Counter[WaitCode] = Counter()
        views = self._views
        if not views:
            return counts
        cap = self._capacity
        if cap is None or max(map(_REQUESTED, views)) <= min(cap.values()):
            counts[self._code] = len(views)  # none is too big for its model
            return counts
        for jv in views:
            counts[
                WaitCode.NO_MATCHING_GPU
                if jv.job.requested_gpus > cap[jv.gpu_model]
                else self._code
            ] += 1
        return counts

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class WaitingReasons(Mapping[str, WaitReason]):
    """Plain dicts and :class:`QueueTail` s, in order, as one read-only mapping. The
    parts must not share a key (whoever joins them sees to it)."""

    __slots__ = ("_parts",)

    def __init__(self, parts: Sequence[Mapping[str, WaitReason]]) -> None:
        flat: list[Mapping[str, WaitReason]] = []
        for p in parts:
            if isinstance(p, WaitingReasons):
                flat.extend(p._parts)
            elif p:
                flat.append(p)
        self._parts = tuple(flat)

    @property
    def parts(self) -> tuple[Mapping[str, WaitReason], ...]:
        return self._parts

    def __getitem__(self, job_id: str) -> WaitReason:
        for p in self._parts:
            if job_id in p:
                return p[job_id]
        raise KeyError(job_id)

    def __contains__(self, job_id: object) -> bool:
        return any(job_id in p for p in self._parts)

    def __iter__(self) -> Iterator[str]:
        return chain.from_iterable(self._parts)

    def __len__(self) -> int:
        return sum(map(len, self._parts))

    def values(self):  # type: ignore[override]
        return [v for p in self._parts for v in p.values()]

    def items(self):  # type: ignore[override]
        return [kv for p in self._parts for kv in p.items()]

    def code_counts(self) -> Counter[WaitCode]:
        counts: Counter[WaitCode] = Counter()
        for p in self._parts:
            counts.update(wait_code_counts(p))
        return counts

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def wait_code_counts(waiting: Mapping[str, WaitReason]) -> Counter[WaitCode]:
    """How many jobs of ``waiting`` wait with each code, in the order the codes first
    appear in it: ``Counter`` over its reasons' codes, asked of a lazy part without making
    its sentences."""
    counts = getattr(waiting, "code_counts", None)
    if counts is not None:
        return counts()
    return Counter(map(_CODE, waiting.values()))


def join_reasons(
    parts: Sequence[Mapping[str, WaitReason]], admitted: Container[str]
) -> Mapping[str, WaitReason]:
    """``parts`` merged in order as ``dict.update`` merges them (a key keeps its first
    place and takes its last reason): a plain ``dict`` where every part is one, else a
    :class:`WaitingReasons` where no two parts share a key, else the ``dict`` the parts'
    reasons make (every lazy reason made). ``admitted``: the round's admitted job ids,
    which every :class:`QueueTail`'s keys are among (so a key outside them is in no tail,
    and no tail's index need be built to say so)."""
    lazy = [p for p in parts if isinstance(p, (QueueTail, WaitingReasons))]
    if lazy and len(lazy) == 1 and not _clash(parts, admitted):
        return WaitingReasons(parts)
    out: dict[str, WaitReason] = {}
    for p in parts:
        out.update(p.items() if isinstance(p, (QueueTail, WaitingReasons)) else p)
    return out


def _clash(parts: Sequence[Mapping[str, WaitReason]], admitted: Container[str]) -> bool:
    """Whether a key of a plain dict among ``parts`` is in another part (the one lazy part's
    own pieces never share a key)."""
    for i, p in enumerate(parts):
        if isinstance(p, (QueueTail, WaitingReasons)):
            continue
        for j, q in enumerate(parts):
            if j == i or not q:
                continue
            pieces = q.parts if isinstance(q, WaitingReasons) else (q,)
            for piece in pieces:
                if isinstance(piece, QueueTail):
                    if any(k in admitted and k in piece for k in p):
                        return True
                elif any(k in piece for k in p):
                    return True
    return False
