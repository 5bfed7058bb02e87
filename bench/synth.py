"""The synthetic market's simulator (``foxhunt.data.synth.simulate_session``, a numba loop over book
events): events a second of CPU time, for a session alone and with its MBO records, beside the first
call's compile. Speed is measured here, not asserted in a test (tests/data/test_synth.py checks what
the simulator writes).

    .venv/bin/python bench/synth.py [--events 1000000] [--repeats 3] [--out synth.json]

CPU time of this process (``time.process_time``: the simulator runs on one thread), so a shared,
loaded box gives about an idle core's figure; wall time beside it.
"""

from __future__ import annotations

import argparse
import json
import time

from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import simulate_session


def _time(cfg: SynthConfig, *, with_mbo: bool) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    simulate_session(cfg, 0, with_mbo=with_mbo)
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    compile_cpu, _ = _time(SynthConfig(events_per_session=1_000), with_mbo=True)  # numba compiles here
    cfg = SynthConfig(seed=1, events_per_session=args.events)
    rows = []
    for label, mbo in (("book and trades", False), ("with MBO records", True)):
        runs = [_time(cfg, with_mbo=mbo) for _ in range(args.repeats)]
        cpu = min(r[0] for r in runs)
        wall = min(r[1] for r in runs)
        rate = args.events / cpu
        row = {"what": label, "events": args.events, "cpu_s": cpu, "wall_s": wall}
        rows.append(row | {"events_per_cpu_s": rate})
    print(f"first call (numba compile, 1,000 events): {compile_cpu:.2f} s CPU")
    print(f"{'session':<18} {'events':>10} {'CPU s':>8} {'wall s':>8} {'events/CPU s':>14}")
    for r in rows:
        line = f"{r['what']:<18} {r['events']:>10,} {r['cpu_s']:>8.2f} {r['wall_s']:>8.2f}"
        print(f"{line} {r['events_per_cpu_s']:>14,.0f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"compile_cpu_s": compile_cpu, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
