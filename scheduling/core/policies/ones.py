"""ONES: online evolutionary search over GPU counts, with batch sizes that follow them.

Bian, Li, Wang, You, SC'21 (arXiv 2108.03645; artifact kurisusnowdeng/ones_sc21). Only
the abstract is at hand (``docs/papers.md``), so the operators below are *reconstructed*
from that description; every constant is a parameter.

Elasticity through the batch size: a job's per-GPU batch ``b`` is fixed (``Job.
per_gpu_batch``, else its submitted global batch over its requested GPUs), so on ``n``
GPUs its global batch is ``n * b``. Its learning rate scales linearly from ``base_lr``
at the requested size, and once it would pass ``max_lr`` the global batch stops growing
(``global_batch_for``). Work is useful samples (the core's convention), so a larger
global batch finishes the same work in fewer iterations only as far as the job's
statistical efficiency allows (``scheduling.core.goodput``; unknown efficiency counts
the worst case, ``min(b, b0)`` useful samples per iteration).

An *individual* is a whole assignment ``job -> GPU count`` of one GPU model, holding
the jobs it runs (a job it leaves out waits); the population (``population_size`` = 16)
is carried between rounds in ``policy_state``.
Each round runs ``generations`` generations of:

- **uniform crossover** of two parents (each job's count from either, swap probability
  ``crossover_p`` = 0.5), respecting each job's size cap;
- **mutation**: with probability ``mutation_p`` = 0.3 a random job is dropped (0 GPUs);
- **padding**: every job without GPUs gets one (or its ``min_gpus``, never fewer) while
  GPUs last (submit order, a higher ``Job.priority`` first); if none is left, the
  largest job that has run longer than ``long_running_s`` is halved (not below its
  minimum) to make room; then spare GPUs top up jobs shortest-remaining-first up to
  their caps;
- **fitness** (lower is better): total remaining GPU-time, ``sum n * T(n)`` over jobs
  that run plus ``r * T(r)`` for those that wait (``r`` their request), with ``T`` the
  perf model's remaining time at the batch that ``n`` implies.

The best 16 of parents and children survive. The winner is laid out in **contiguous
blocks with the fewest changes** from the running layout (``layout``). A job's size
cap starts at its request and **doubles once reached**, up to ``cap_factor`` (4) times
the request and never past the job's ``max_gpus``. **Reconfiguration waits** until a job
has run an epoch since its last change (``epochs_per_job`` epochs make a job; the traces
carry no data-set sizes, so this is our stand-in): until then its count is frozen in every
individual. The random generator is seeded from ``seed`` and the round's generation
counter, so a round is deterministic for its context.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from scheduling.core.context import JobView, RoundContext
from scheduling.core.placement import FreeGpus, pick_contiguous, pick_spread
from scheduling.core.policies.base import by_priority, per_gpu_batch, submit_order, too_big
from scheduling.core.registry import register_policy
from scheduling.core.types import Grant, PolicyDecision, WaitCode, WaitReason

Individual = dict[str, int]


def whole_per_gpu_batch(job) -> int:
    """The job's per-GPU batch (``base.per_gpu_batch``) in whole samples, at least one."""
    return max(int(per_gpu_batch(job)), 1)


def global_batch_for(job, n: int) -> int:
    """Global batch on ``n`` GPUs: ``n * b``, capped where the linearly scaled learning
    rate would exceed ``max_lr``, and kept inside the job's ``min_batch..max_batch``
    when it states one."""
    b = whole_per_gpu_batch(job)
    batch = n * b
    if job.base_lr and job.max_lr:
        ref = job.requested_gpus * b  # base_lr belongs to the requested global batch
        cap = ref * (job.max_lr / job.base_lr)
        # A ratio of extreme rates (1e308 / 1e-300) is no cap at all, not an OverflowError
        # that rolls back every round for every team.
        if math.isfinite(cap) and cap < batch:
            batch = max(int(cap), b)
    if job.max_batch:
        batch = min(batch, job.max_batch)
    if job.min_batch:
        batch = max(batch, job.min_batch)
    return max(batch, 1)


def floor_gpus(job) -> int:
    """The fewest GPUs a job may run on (its ``min_gpus``; padding starts there)."""
    return max(job.min_gpus, 1)


def learning_rate_for(job, n: int) -> float | None:
    """Linearly scaled learning rate at ``n`` GPUs (None if the job gives none)."""
    if not job.base_lr:
        return None
    lr = job.base_lr * global_batch_for(job, n) / (job.requested_gpus * whole_per_gpu_batch(job))
    return min(lr, job.max_lr) if job.max_lr else lr


@register_policy("ones")
class Ones:
    name = "ones"
    placement = None  # every grant names its GPUs (``layout``: contiguous blocks)

    def __init__(
        self,
        *,
        population_size: int = 16,
        generations: int = 2,
        crossover_p: float = 0.5,
        mutation_p: float = 0.3,
        cap_factor: int = 4,
        long_running_s: float = 3600.0,
        epochs_per_job: int = 20,
        seed: int = 0,
    ) -> None:
        if population_size < 2:
            raise ValueError("population_size must be at least 2")
        if generations < 1:
            raise ValueError("generations must be at least 1")
        if cap_factor < 1:
            raise ValueError("cap_factor must be at least 1")
        if not (0.0 <= crossover_p <= 1.0 and 0.0 <= mutation_p <= 1.0):
            raise ValueError("crossover_p and mutation_p must be probabilities (0 to 1)")
        if not long_running_s >= 0 or epochs_per_job < 1:
            raise ValueError("long_running_s must be >= 0 and epochs_per_job at least 1")
        self.population_size = population_size
        self.generations = generations
        self.crossover_p = crossover_p
        self.mutation_p = mutation_p
        self.cap_factor = cap_factor
        self.long_running_s = long_running_s
        self.epochs_per_job = epochs_per_job
        self.seed = seed

    # --- per-job quantities -------------------------------------------------------------

    def remaining_s(self, ctx: RoundContext, jv: JobView, n: int) -> float:
        return ctx.estimate(jv, n, global_batch_for(jv.job, n)).remaining_s

    def locked(self, ctx: RoundContext, jv: JobView) -> bool:
        """A running job that has not yet run an epoch since its last change."""
        job = jv.job
        if job.allocation is None or job.last_change_s is None:
            return False
        n = job.allocation.n_gpus
        per_iter_s = ctx.estimate(jv, n, job.allocation.global_batch).remaining_s / max(
            job.remaining_iters, 1e-9
        )
        epoch_s = job.total_iters / self.epochs_per_job * per_iter_s
        return ctx.now_s - job.last_change_s < epoch_s

    def next_caps(self, jobs: list[JobView], caps: Mapping[str, int]) -> dict[str, int]:
        out = {}
        for jv in jobs:
            job = jv.job
            # Up to cap_factor x the request, never past what the job allows: its
            # max_gpus (the live job's request is its max_gpus, so there it never grows;
            # the simulator's --max-gpus sets it). A max_gpus below the request is read
            # as the request.
            limit = min(self.cap_factor * job.requested_gpus, max(job.max_gpus, job.requested_gpus))
            cap = int(caps.get(job.job_id, job.requested_gpus))
            if job.allocation is not None and job.allocation.n_gpus >= cap:
                cap = min(2 * cap, limit)  # reached: double, up to cap_factor x request
            out[job.job_id] = max(min(cap, limit), floor_gpus(job))
        return out

    # --- the round ---------------------------------------------------------------------

    def allocate(self, ctx: RoundContext) -> PolicyDecision:
        """Evolve the carried population for each GPU model; run the fittest layout."""
        state = ctx.policy_state.get("ones", {})
        generation = int(state.get("generation", 0))
        rng = random.Random(f"{self.seed}:{generation}")
        by_model: dict[str, list[JobView]] = {}
        waiting: dict[str, WaitReason] = {}
        for jv in by_priority(submit_order(ctx.jobs)):  # padding order
            if floor_gpus(jv.job) > ctx.capacity[jv.gpu_model]:
                cap = ctx.capacity[jv.gpu_model]
                waiting[jv.job.job_id] = too_big(floor_gpus(jv.job), jv.gpu_model, cap)
                continue
            by_model.setdefault(jv.gpu_model, []).append(jv)
        caps_all = self.next_caps(
            [jv for jvs in by_model.values() for jv in jvs], state.get("caps", {})
        )
        free = FreeGpus(ctx.free_cluster)
        grants: list[Grant] = []
        populations: dict[str, list[Individual]] = {}
        for model in sorted(by_model):
            jobs = by_model[model]
            search = _Search(self, ctx, jobs, caps_all, ctx.capacity[model], rng)
            carried = state.get("population", {}).get(model, [])
            population = search.evolve(carried)
            best = population[0]
            populations[model] = population
            ids = layout(free, model, jobs, best)
            views = {jv.job.job_id: jv for jv in jobs}
            for jid, gpus in ids.items():
                job = views[jid].job
                grants.append(
                    Grant(jid, len(gpus), global_batch_for(job, len(gpus)), model, gpu_ids=gpus)
                )
            behind = WaitReason(  # one (immutable) reason for every job left waiting
                WaitCode.BEHIND_IN_QUEUE,
                f"Waiting: the evolutionary search gave every {model} GPU to jobs "
                "with less remaining work; it gets one when padding reaches it.",
            )
            for jv in jobs:
                if jv.job.job_id not in ids:
                    waiting[jv.job.job_id] = behind
        new_state = {
            "generation": generation + 1,
            "caps": caps_all,
            "population": populations,
        }
        return PolicyDecision(
            grants=tuple(grants), waiting=waiting, policy_state={"ones": new_state}
        )


class _Search:
    """One round's evolutionary search over one GPU model's jobs.

    An individual holds only the jobs it runs (``{job_id: n}``, every ``n`` > 0): with a
    long queue most jobs wait in every individual, and walking them all in every
    operator made ONES the slowest policy (10,000 waiting beside 1,000 running: about
    0.9 s a round, against a 1 s target). Crossover, mutation, repair, padding and the tie
    key give what they gave on the dense form (the random draws are the same, one per
    queued job, in queue order); the fitness is the saving against an all-waiting plan,
    summed exactly, so its ranking is the total's up to rounding: the plans were identical
    in every comparison run (16 bench rounds, 360 random rounds, two simulations).
    """

    def __init__(self, policy: Ones, ctx: RoundContext, jobs, caps, capacity: int, rng) -> None:
        self.p = policy
        self.ctx = ctx
        self.jobs = jobs
        self.ids = [jv.job.job_id for jv in jobs]
        self.position = {jid: i for i, jid in enumerate(self.ids)}
        self.rank = {jid: i for i, jid in enumerate(sorted(self.ids))}
        self.views = {jv.job.job_id: jv for jv in jobs}
        self.caps = {j: caps[j] for j in self.ids}
        self.floor = {jv.job.job_id: floor_gpus(jv.job) for jv in jobs}
        self.capacity = capacity
        self.rng = rng
        self.current = {
            jv.job.job_id: jv.job.allocation.n_gpus for jv in jobs if jv.job.allocation is not None
        }
        self.frozen = {j: n for j, n in self.current.items() if policy.locked(ctx, self.views[j])}
        self._time: dict[tuple[str, int], float] = {}
        self._wait: dict[str, float] = {}  # r * T(r) of a job that waits, once needed

    def t(self, jid: str, n: int) -> float:
        key = (jid, n)
        if key not in self._time:
            self._time[key] = self.p.remaining_s(self.ctx, self.views[jid], n)
        return self._time[key]

    def wait_cost(self, jid: str) -> float:
        """``r * T(r)``: the GPU-time a waiting job still needs at its request ``r``."""
        v = self._wait.get(jid)
        if v is None:
            r = min(self.views[jid].job.requested_gpus, self.capacity)
            v = self._wait[jid] = r * self.t(jid, r)
        return v

    def tie_key(self, ind: Individual) -> tuple[tuple[int, int], ...]:
        """Orders individuals as their GPU counts listed in job-id order (every job,
        0 for one that waits) would compare, without listing the waiting ones: the
        running jobs in id order as ``(-rank, n)``. At the first job where two
        individuals differ, a job one runs and the other does not comes first in the
        one that runs it (a smaller id, so a larger ``-rank``): that one is larger, as
        its count beats the other's 0; a key that is a prefix of another is smaller, as
        the other runs one more job after it."""
        rank = self.rank
        return tuple(sorted(((-rank[j], n) for j, n in ind.items()), reverse=True))

    def fitness(self, ind: Individual) -> float:
        """Total remaining GPU-time, ``sum n * T(n)`` over the jobs that run plus
        ``r * T(r)`` over those that wait, less the same for a plan in which every
        job waits (a constant of the round, so individuals rank as by the total): what
        running each job at ``n`` rather than waiting saves, summed. Summed exactly
        (``fsum``): two individuals that run the same multiset of (job shape, count)
        tie whatever their order, and the tie key decides, not the rounding of a sum
        taken in queue order."""
        times, t, wait = self._time, self.t, self.wait_cost
        terms = []
        for jid, n in ind.items():
            v = times.get((jid, n))
            terms.append(n * (t(jid, n) if v is None else v) - wait(jid))
        return math.fsum(terms)

    # --- operators ----------------------------------------------------------------

    def clip(self, jid: str, n: int) -> int:
        """0 (not running) or a count within the job's floor and cap."""
        return 0 if n <= 0 else min(max(n, self.floor[jid]), self.caps[jid])

    def crossover(self, a: Individual, b: Individual) -> Individual:
        random, p = self.rng.random, self.p.crossover_p
        # One draw per queued job in queue order, whether or not either parent runs it.
        draws = [random() for _ in self.ids]
        position, floor, caps = self.position, self.floor, self.caps
        child = {}
        # In queue order: a set's order follows the strings' hashes, which change from one
        # process to the next (PYTHONHASHSEED), and the child's order is carried in the
        # policy state to the next round.
        for jid in sorted(a.keys() | b.keys(), key=position.__getitem__):
            n = (b if draws[position[jid]] < p else a).get(jid, 0)
            if n > 0:
                child[jid] = min(max(n, floor[jid]), caps[jid])  # clip()
        return child

    def mutate(self, ind: Individual) -> Individual:
        out = dict(ind)
        if self.ids and self.rng.random() < self.p.mutation_p:
            out.pop(self.rng.choice(self.ids), None)
        return out

    def repair(self, ind: Individual) -> Individual:
        """Freeze locked jobs, clip to caps, fit the capacity, then pad."""
        floor, caps = self.floor, self.caps
        out = {j: min(max(n, floor[j]), caps[j]) for j, n in ind.items() if n > 0}  # clip()
        out.update(self.frozen)
        # Over capacity: drop unfrozen jobs, largest first (ties: the larger id), until
        # it fits.
        total = sum(out.values())
        if total > self.capacity:
            movable = sorted(
                (j for j in out if j not in self.frozen), key=lambda j: (out[j], j), reverse=True
            )
            for victim in movable:
                if total <= self.capacity:
                    break
                total -= out.pop(victim)
        return self.pad(out)

    def pad(self, ind: Individual) -> Individual:
        out = dict(ind)
        spare = self.capacity - sum(out.values())
        # Once no job can be halved, none can later in this pass (jobs only shrink, and
        # the ones padded in start at their floor): with no spare GPU left either, no
        # later job fits and the rest of the queue is not walked.
        can_shrink = True
        for jid in self.ids:  # submit order: new jobs get one GPU each (or their minimum)
            if jid in out:
                continue
            if spare <= 0 and not can_shrink:
                break
            need = self.floor[jid]
            while spare < need and can_shrink:
                freed = self.shrink_largest(out)
                if freed <= 0:
                    can_shrink = False
                    break
                spare += freed
            if spare < need:
                continue  # a later, smaller job may still fit
            out[jid] = need
            spare -= need
        # Top up shortest-remaining-first, up to each cap.
        for jid in sorted(out, key=lambda j: (self.t(j, out[j]), j)):
            if spare <= 0:
                break
            if jid in self.frozen:
                continue
            extra = min(self.caps[jid] - out[jid], spare)
            if extra > 0:
                out[jid] += extra
                spare -= extra
        return out

    def shrink_largest(self, ind: Individual) -> int:
        """Halve the largest job that has run longer than ``long_running_s``; the
        number of GPUs freed (0 if none qualifies)."""
        now = self.ctx.now_s
        candidates = [
            j
            for j, n in ind.items()
            if n > self.floor[j]
            and j not in self.frozen
            and self.views[j].job.started_s is not None
            and now - self.views[j].job.started_s >= self.p.long_running_s
        ]
        if not candidates:
            return 0
        j = max(candidates, key=lambda j: (ind[j], j))
        freed = ind[j] - max(ind[j] // 2, self.floor[j])
        ind[j] -= freed
        return freed

    # --- a round ------------------------------------------------------------------

    def seed_population(self, carried: list[Mapping[str, int]]) -> list[Individual]:
        pop = [self.repair(dict(self.current))]
        known = self.position
        for ind in carried:
            pop.append(self.repair({j: int(n) for j, n in ind.items() if j in known}))
        while len(pop) < self.p.population_size:
            pop.append(self.repair(self.mutate(self.mutate(pop[self.rng.randrange(len(pop))]))))
        return pop

    def evolve(self, carried: list[Mapping[str, int]]) -> list[Individual]:
        size = self.p.population_size
        pop = self.seed_population(carried)
        # Each individual's sort key, once: survivors are ranked again every generation.
        # By object identity: every individual stays alive (in ``pop``) until the end.
        keys: dict[int, tuple[float, tuple]] = {}

        def key(ind: Individual) -> tuple[float, tuple]:
            k = keys.get(id(ind))
            if k is None:
                k = keys[id(ind)] = (self.fitness(ind), self.tie_key(ind))
            return k

        for _ in range(self.p.generations):
            scored = sorted(pop, key=key)
            children = []
            for _ in range(size):
                a = self._tournament(scored)
                b = self._tournament(scored)
                children.append(self.repair(self.mutate(self.crossover(a, b))))
            pop = scored + children
        unique: dict[tuple, Individual] = {}
        for ind in pop:
            unique.setdefault(key(ind)[1], ind)
        ranked = sorted(unique.values(), key=key)
        return ranked[:size]

    def _tournament(self, scored: list[Individual]) -> Individual:
        i, k = self.rng.randrange(len(scored)), self.rng.randrange(len(scored))
        return scored[min(i, k)]  # scored is sorted: the lower index is fitter


def layout(
    free: FreeGpus, model: str, jobs: list[JobView], sizes: Mapping[str, int]
) -> dict[str, tuple[str, ...]]:
    """GPU ids for ``sizes`` in contiguous blocks, moving as few jobs as possible:
    unchanged jobs stay; shrinking ones keep the start of their block; growing ones
    extend in place when the neighbours are free; the rest, largest first, take the
    smallest free contiguous run that fits (the ``contiguous`` picker), else the fewest
    nodes (``spread``). Takes from ``free``."""
    out: dict[str, tuple[str, ...]] = {}
    moving = []
    for jv in jobs:
        jid, n = jv.job.job_id, sizes.get(jv.job.job_id, 0)
        cur = jv.job.allocation.gpu_ids if jv.job.allocation else ()
        if n <= 0:
            continue
        # Its GPUs of this model that still exist, in node/index order.
        cur = tuple(sorted((g for g in cur if free.has(g, model)), key=free.where.__getitem__))
        if cur and len(cur) >= n and free.valid(cur[:n], model):
            out[jid] = free.take(cur[:n])
        else:
            moving.append((jv, n, cur))
    for jv, n, cur in sorted(moving, key=lambda t: (-t[1], t[0].job.job_id)):
        picks = pick_contiguous(free, model, n, cur) or pick_spread(free, model, n)
        if picks is not None:
            out[jv.job.job_id] = free.take(picks)
    return out
