#!/usr/bin/env bash
# Issue 56's targets with the `full` profile (the full action space learned by PPO, one agent a
# seed), each on 3 markets nobody used and 8 training seeds that chose nothing (1201-1208), two markets'
# studies at once on one GPU (8 seeds each: about 7 minutes on an H100 for the pair, 4 alone).
#
#     bash bench/issue56_targets.sh PART [OUT]      # OUT defaults to runs/issue56
#
# PART (each fits one 10-minute device call when its markets run as two calls, or `PART:M` for one
# market alone):
#   imbalance   markets 1101 1102 1103 (measured 2026-12-07: docs/results/2026-12-07-ppo-full-action-unseen.md)
#   tradeflow   the trade-flow signal at the alpha its reference rule clears costs with (1), markets 1121-1123
#   momentum    the momentum signal at alpha 0.4 (below the 0.5 where it feeds itself), markets 1131-1133
#   nosignal    synth.alpha = 0, markets 1141-1143: the mean net within 2 standard errors of zero or below,
#               and the agent still trades
#   smoke       the smoke profile on the CPU (the `make run` default), markets 1151-1153, 8 one-thread
#               seeds at once on the host's cores
#   production  `foxhunt run --profile production` (DQN, the default network) and the same with PPO
#               (`agent.algo=ppo`, the ladder off as PPO requires), timed end to end
# Every study writes OUT/<part><market>/seeds.json (per seed and fold, the committee, execution) and
# its log; the lines this prints are the study's summary.
set -uo pipefail
PART=${1:?PART: imbalance|tradeflow|momentum|nosignal|smoke|production[:MARKET]}
OUT=${2:-runs/issue56}
SEEDS=1201,1202,1203,1204,1205,1206,1207,1208
FOXHUNT=${FOXHUNT:-foxhunt}
mkdir -p "$OUT"

study() {  # study NAME MARKET PROFILE SETS...: one seeds study in the background
  local name=$1 market=$2 profile=$3; shift 3
  $FOXHUNT seeds --profile "$profile" --seeds $SEEDS --workers 8 --set "synth.seed=$market" "$@" \
    --tracking-uri none --keep reported --out "$OUT/$name$market" >"$OUT/$name$market.log" 2>&1 &
}

summary() {  # the study's printed summary
  grep -E "^(seed |committee of|capture|agent execution|reference rule execution|[0-9]+/[0-9]+ beat)|done in|rror" "$1" | tail -24
}

name=${PART%%:*}
case $name in
  imbalance) markets="1101 1102 1103"; profile=full; sets=() ;;
  tradeflow) markets="1121 1122 1123"; profile=full; sets=(--set synth.signal=trade_flow --set synth.alpha=1) ;;
  momentum) markets="1131 1132 1133"; profile=full; sets=(--set synth.signal=momentum --set synth.alpha=0.4) ;;
  nosignal) markets="1141 1142 1143"; profile=full; sets=(--set synth.alpha=0) ;;
  smoke) markets="1151 1152 1153"; profile=smoke; sets=(--set run.device=cpu --set run.threads=1) ;;
  production)
    for algo in dqn ppo; do
      extra=(); [ "$algo" = ppo ] && extra=(--set agent.algo=ppo --set train.plateau.patience=0)
      start=$(date +%s)
      $FOXHUNT run --profile production "${extra[@]}" --tracking-uri none --out "$OUT/production-$algo" \
        >"$OUT/production-$algo.log" 2>&1
      echo "== production $algo: rc $? in $(( $(date +%s) - start )) s"; tail -30 "$OUT/production-$algo.log"
    done
    exit 0 ;;
  *) echo "unknown PART $PART" >&2; exit 2 ;;
esac
[ "$PART" != "$name" ] && markets=${PART#*:}
for m in $markets; do study "$name" "$m" "$profile" "${sets[@]}"; done
wait
for m in $markets; do echo "== $name market $m"; summary "$OUT/$name$m.log"; done
