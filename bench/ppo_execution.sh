#!/usr/bin/env bash
# PPO's execution mechanisms on the gpu profile with the full action space (4 x 3 x 3 x 3), on markets
# nobody tuned on (synth.seed 611, 612, 613), 4 training seeds a market: bench/ablation.py's rows
# `ppo` (the baseline PPO), `ppo_counterfactual` (+ the all-action counterfactual term) and
# `ppo_curriculum` (+ the branch curriculum), and no DQN row (--no-baseline; bench/ppo_vs_dqn.sh has
# DQN against PPO). docs/ppo.md, "Counterfactual execution targets" and "The curriculum".
#
#     bash bench/ppo_execution.sh [OUT] [SEEDS]     # defaults: runs/ppo_vs_dqn 701,702,703,704
#
# The default OUT is bench/ppo_vs_dqn.sh's (the same common overrides): a `ppo` row it finished is
# reused, not retrained. Each market writes OUT/market<seed>/ablation.md (capture, beat flat, net PnL,
# trades per row). --workers 1: the members share the GPU already. Rerun after a cut-off: finished
# parts are reused.
set -euo pipefail
OUT=${1:-runs/ppo_vs_dqn}
SEEDS=${2:-701,702,703,704}
FULL=(--set env.branches.magnitude=3 --set "env.branches.magnitude_fractions=[0.25,0.5,1.0]"
      --set env.branches.order_type=3 --set env.branches.urgency=3)
for market in 611 612 613; do
  .venv/bin/python bench/ablation.py --profile gpu --seeds "$SEEDS" --no-baseline \
    --rows ppo,ppo_counterfactual,ppo_curriculum \
    --out "$OUT/market$market" --set "synth.seed=$market" "${FULL[@]}" --device cuda
done
for market in 611 612 613; do
  echo "== market $market"; cat "$OUT/market$market/ablation.md"
done
