"""The batch probe of ``benchmarks/bench_online_model.py --explore-batch``: one of a replayed
job's first five observations is the same job at half (or double) its first batch, at the
first observation's GPU count, power limit and clock; everything else keeps its order."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from scheduling.core.online_model import Observation

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_online_model.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_online_model", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _obs(batch: float, limit_w: float | None, n_gpus: int = 1) -> Observation:
    return Observation(
        n_gpus=n_gpus,
        n_nodes=1,
        local_batch=batch / n_gpus,
        iter_time_s=0.001 * batch + 0.01 * n_gpus,
        power_w=None if limit_w is None else 0.5 * limit_w,
        power_limit_w=limit_w,
    )


def _zeus_like(bench, batches_after: list[float]):
    """A Zeus-style replay: batch 64 at five limits from 300 W down, then ``batches_after``
    each at 300 W and at 200 W."""
    configs = [_obs(64, w) for w in (300, 275, 250, 225, 200)]
    configs += [_obs(b, w) for b in batches_after for w in (300, 200)]
    truth = [(o.iter_time_s, o.iter_time_s * o.power_w) for o in configs]
    return bench.Case("zeus_test", "w", configs, truth, [])


def _key(o: Observation) -> tuple:
    return (o.n_gpus, o.local_batch * o.n_gpus, o.power_limit_w)


def test_half_takes_the_fifth_place_at_the_first_limit(bench):
    case = _zeus_like(bench, [128, 32, 16])
    probed = bench.batch_probe(case, "half")
    assert [_key(o) for o in probed.configs[:6]] == [
        (1, 64, 300),
        (1, 64, 275),
        (1, 64, 250),
        (1, 64, 225),
        (1, 32, 300),  # the probe: half the first batch, at the first (default) limit
        (1, 64, 200),  # the limit it replaced, one later
    ]
    # Nothing lost or added, and each configuration keeps its own truth.
    assert sorted(map(_key, probed.configs)) == sorted(map(_key, case.configs))
    for o, (t, e) in zip(probed.configs, probed.truth, strict=True):
        assert t == o.iter_time_s and e == o.iter_time_s * o.power_w
    # The configurations after the probe keep the replay's order.
    rest = [_key(o) for o in case.configs if _key(o) != (1, 32, 300)]
    assert [_key(o) for o in probed.configs if _key(o) != (1, 32, 300)] == rest


def test_double_and_the_fallback_to_the_other(bench):
    case = _zeus_like(bench, [128, 32])
    assert _key(bench.batch_probe(case, "double").configs[4]) == (1, 128, 300)
    only_half = _zeus_like(bench, [32, 16])
    assert _key(bench.batch_probe(only_half, "double").configs[4]) == (1, 32, 300)
    only_double = _zeus_like(bench, [128, 256])
    assert _key(bench.batch_probe(only_double, "half").configs[4]) == (1, 128, 300)


def test_no_probe_where_the_data_lack_one_or_it_is_already_early(bench):
    # Neither half nor double measured (48 and 96 are not 32 or 128): unchanged.
    case = _zeus_like(bench, [48, 96])
    assert bench.batch_probe(case, "half") is case
    # Half measured only at another limit than the first observation's: unchanged.
    configs = [_obs(64, w) for w in (300, 275, 250, 225, 200)] + [_obs(32, 200)]
    other_limit = bench.Case("zeus_test", "w", configs, [(1.0, 1.0)] * len(configs), [])
    assert bench.batch_probe(other_limit, "half") is other_limit
    # Already among the first five: unchanged.
    early = [_obs(64, 300), _obs(32, 300)] + [_obs(64, w) for w in (275, 250, 225, 200)]
    early_case = bench.Case("zeus_test", "w", early, [(1.0, 1.0)] * len(early), [])
    assert bench.batch_probe(early_case, "half") is early_case


def test_several_gpus_probe_the_global_batch_at_the_first_gpu_count(bench):
    # An ElasticFlow-style replay: global batch 128 on 1, 2, 4, 8, 16 GPUs, then 64 and 256.
    configs = [_obs(128, None, n) for n in (1, 2, 4, 8, 16)]
    configs += [_obs(64, None, 2), _obs(64, None, 1), _obs(256, None, 1)]
    case = bench.Case("ef_test", "w", configs, [(o.iter_time_s, None) for o in configs], [])
    probed = bench.batch_probe(case, "half")
    # Half the global batch on the first observation's one GPU, not the 2-GPU row before it.
    assert _key(probed.configs[4]) == (1, 64, None)
    assert _key(probed.configs[5]) == (16, 128, None)


def test_the_probe_and_the_configuration_it_displaces_are_marked_both_ways(bench):
    case = _zeus_like(bench, [128, 32])
    probed = bench.batch_probe(case, "half")
    # With the probe: it is fifth, the limit it displaced sixth.
    assert probed.unscored == {4, 5}
    assert {_key(probed.configs[i]) for i in probed.unscored} == {(1, 32, 300), (1, 64, 200)}
    # Without it (``move=False``): the order kept, the same two configurations marked.
    kept = bench.batch_probe(case, "half", move=False)
    assert kept.configs == case.configs
    assert {_key(kept.configs[i]) for i in kept.unscored} == {(1, 32, 300), (1, 64, 200)}
