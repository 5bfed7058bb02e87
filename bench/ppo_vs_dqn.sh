#!/usr/bin/env bash
# PPO against DQN on the gpu profile with the full action space (4 x 3 x 3 x 3), on markets nobody
# tuned on (synth.seed 611, 612, 613; PPO's settings were chosen on 101), 4 training seeds a market:
# bench/ablation.py's `baseline` (DQN) and `ppo` rows (docs/ppo.md, docs/results/2026-12-07-ppo.md).
#
#     bash bench/ppo_vs_dqn.sh [OUT] [SEEDS]        # defaults: runs/ppo_vs_dqn 701,702,703,704
#
# Each market writes OUT/market<seed>/ablation.md (capture, beat flat, net PnL, trades per row). On one
# H100 a seed of the gpu profile (8 members at once) takes about 6 minutes for DQN; PPO's row trains
# 20 epochs of one rollout each. --workers 1: the members share the GPU already.
set -euo pipefail
OUT=${1:-runs/ppo_vs_dqn}
SEEDS=${2:-701,702,703,704}
FULL=(--set env.branches.magnitude=3 --set "env.branches.magnitude_fractions=[0.25,0.5,1.0]"
      --set env.branches.order_type=3 --set env.branches.urgency=3)
for market in 611 612 613; do
  .venv/bin/python bench/ablation.py --profile gpu --seeds "$SEEDS" --rows ppo \
    --out "$OUT/market$market" --set "synth.seed=$market" "${FULL[@]}" --device cuda
done
for market in 611 612 613; do
  echo "== market $market"; cat "$OUT/market$market/ablation.md"
done
