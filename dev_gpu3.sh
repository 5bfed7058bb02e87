set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
git log --oneline -1 2>/dev/null
timeout 140 python3 bench/fused_step.py --envs 16384,1048576 --modes compiled_graph,fused_graph --blocks 128x4,32x1 --warmup 110 --out $OUT/fused_step.json 2>&1 | tail -25
timeout 100 python3 bench/validation_speed.py --device cuda --parts validation --breakdown --out $OUT/validation_speed_val.json 2>&1 | tail -30
