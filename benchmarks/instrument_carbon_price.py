"""GreenFlow's carbon price over a cluster budget's period, round by round, at a
baseline's carbon (the simulator's ``--match-baseline`` budget): at each listed share of
the period, the carbon spent, the straight line and the floor-corrected line the lag is
measured against, the idle floor's carbon to the period's end as the policy's intensity
curve predicted it and as the grid made it, the present work's share of the free
remainder over its cheapest cost, and the price (its median over the slice). Issue 13,
point 1: why GreenFlow at ``fifo_lowclock``'s carbon on Philly 876, US-CAL-CISO, loses.

    OPENBLAS_CORETYPE=Haswell nice -n 19 .venv/bin/python \\
        benchmarks/instrument_carbon_price.py --trace data/trace/elasticflow_philly_876.csv \\
        --cluster data/clusters/n16g8_a100.json --carbon-zone US-CAL-CISO \\
        --baseline fifo_lowclock --cache /tmp/price_cache [--params '{"NAME": VALUE}']
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from budget_variants import cached_run  # noqa: E402

from scheduling.core.policies import budget_greedy, budget_price  # noqa: E402
from scheduling.simulator.compare import budgets_from, in_period  # noqa: E402
from scheduling.simulator.metrics import summarise  # noqa: E402
from scheduling.simulator.scenario import load_scenario, powered_idle_w, run_policy  # noqa: E402

ROWS: list[dict] = []
_SHARE: list[tuple[float, float]] = []  # (share, pmin) of the last price_for_share call


def _wrap() -> None:
    """Record each round's price inputs (this process only)."""
    plain_pfs = budget_price.price_for_share

    def price_for_share(hulls, share, weights):
        pmin = sum(h[0][0] * w for h, w in zip(hulls, weights, strict=True))
        _SHARE.append((share, pmin))
        return plain_pfs(hulls, share, weights)

    budget_price.price_for_share = price_for_share
    plain_price = budget_greedy._Round.price

    def price(self):
        _SHARE.clear()
        plain_price(self)
        for b_i, b in enumerate(self.budgets):
            if b.team is not None or b.co2_limit_g is None:
                continue
            now = self.ctx.now_s
            left = max(b.period_end_s - now, 0.0)
            fw = self.floor_w[b_i]
            ROWS.append(
                {
                    "now": now,
                    "start": b.period_start_s,
                    "end": b.period_end_s,
                    "limit": b.co2_limit_g,
                    "used": b.co2_used_g,
                    "price": self.prices[b_i] if self.prices else None,
                    "lag": self.lags[b_i],
                    "floor_pred": getattr(self, "floor_curve", self.curve).co2_g(fw, left)
                    if fw
                    else 0.0,
                    "tail_ci": self.curve.tail_ci,
                    "ci_now": self.ci_now,
                    "fw": fw,
                    "share": _SHARE[-1] if _SHARE else None,
                }
            )

    budget_greedy._Round.price = price


def _perfect_floor(intensity) -> None:
    """Price every round's idle floor on the grid's true intensity to the period's end
    (an oracle); the jobs keep the policy's own curve."""

    class TrueCurve:
        def __init__(self, now: float) -> None:
            self.now = now

        def co2_g(self, power_w: float, duration_s: float) -> float:
            return intensity.co2_g(power_w, self.now, self.now + duration_s)

    plain = budget_greedy._Round._allowances  # the first stage that reads the floor curve

    def allowances(self, history):
        self.floor_curve = TrueCurve(self.ctx.now_s)
        plain(self, history)

    budget_greedy._Round._allowances = allowances


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--carbon-zone", required=True)
    p.add_argument("--arrival-scale", type=float, default=None)
    p.add_argument("--max-jobs", type=int, default=None)
    p.add_argument("--baseline", default="fifo_lowclock")
    p.add_argument("--params", default="{}", help="GreenFlow's parameters, JSON")
    p.add_argument("--cache", default=None)
    p.add_argument("--slices", type=int, default=10)
    p.add_argument(
        "--perfect-floor",
        action="store_true",
        help="price the idle floor on the grid's true intensity to the period's end (an oracle)",
    )
    p.add_argument(
        "--forecast-hours", type=int, default=None, help="the GreenFlow run's forecast (an oracle)"
    )
    args = p.parse_args(argv)
    try:
        params = json.loads(args.params)
    except ValueError as exc:
        p.error(f"--params is not JSON: {exc}")
    if args.slices < 1:
        p.error("--slices must be at least 1")
    scenario = load_scenario(
        ROOT / args.trace,
        ROOT / args.cluster,
        carbon_zone=args.carbon_zone,
        arrival_scale=args.arrival_scale,
        max_jobs=args.max_jobs,
    )
    scenario = replace(scenario, config=replace(scenario.config, knowledge="oracle"))
    tag = f"{Path(args.trace).stem}_{args.arrival_scale}_{args.max_jobs}_oracle_{args.carbon_zone}"
    base = cached_run(scenario, args.baseline, args.cache, tag)
    budgets = budgets_from(
        base, "carbon", idle_w=powered_idle_w(scenario), intensity=scenario.intensity
    )
    _wrap()
    if args.perfect_floor:
        _perfect_floor(scenario.intensity)
    if args.forecast_hours:
        scenario = replace(
            scenario, config=replace(scenario.config, forecast_hours=args.forecast_hours)
        )
    result = run_policy(scenario, "greenflow", budgets=budgets, policy_params=params)
    s, ip = summarise(result), in_period(result)
    ratio = summarise(base)["avg_jct_s"] / s["avg_jct_s"]
    first = [r for r in ROWS if r["start"] == ROWS[0]["start"]]
    start, end, limit = first[0]["start"], first[0]["end"], first[0]["limit"]
    span = end - start
    ci = scenario.intensity
    sys.stdout.write(
        f"ratio {ratio:.3f}x  in the period {ip['candidate_co2_in_period_kg'] * 1000 / limit:.4%}"
        f"  over {ip['candidate_periods_over_budget']}  unfinished {s['n_unfinished']}\n"
    )
    sys.stdout.write(
        "x     spent  line   fline  floor_pred floor_real tail  ci_mean share/pmin price_med\n"
    )
    for k in range(args.slices):
        lo, hi = start + span * k / args.slices, start + span * (k + 1) / args.slices
        rows = [r for r in first if lo <= r["now"] < hi]
        if not rows:
            continue
        r = rows[0]
        fw = r["fw"]
        real = ci.co2_g(fw, r["now"], end) if fw else 0.0
        x = (r["now"] - start) / span
        prices = [q["price"] for q in rows if q["price"] is not None]
        shares = [q["share"][0] / q["share"][1] for q in rows if q["share"] and q["share"][1] > 0]
        ci_mean = ci.co2_g(1000.0, lo, hi) / ((hi - lo) / 3600.0)
        sys.stdout.write(
            f"{x:.2f}  {r['used'] / limit:6.1%} {x:6.1%} {r['used'] / limit + r['lag']:6.1%} "
            f"{r['floor_pred'] / limit:9.1%} {real / limit:9.1%} {r['tail_ci']:5.0f} "
            f"{ci_mean:5.0f}  {statistics.median(shares) if shares else float('nan'):6.2f} "
            f"{statistics.median(prices) if prices else float('nan'):9.3g}\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
