#!/usr/bin/env bash
# The measured results of RESULTS.md, in order; every stage resumes where it stopped, so
# re-running the script after an interruption continues the work. CPU budget choices
# (steps, max lengths, subsets) are stated here and in RESULTS.md.
#   nohup bash scripts/run_results.sh > runs/results.log 2>&1 &
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
DATA=${DATA:-../shared/data}
OUT=runs/results
mkdir -p "$OUT"
stage() { echo "=== $* $(date -u +%FT%TZ)"; }

# 1. Gradient-conflict pilot (issue 3): CE/SCL and CE/ACL angles at every step.
stage grad_conflict rte
$PY scripts/grad_conflict.py --task rte --data_dir "$DATA/glue" --steps 100 --batch_size 16 \
    --max_length 128 --out "$OUT/grad_conflict/rte" | tail -n 40
stage grad_conflict mr
$PY scripts/grad_conflict.py --task mr --data_dir "$DATA" --steps 100 --batch_size 16 \
    --max_length 64 --out "$OUT/grad_conflict/mr" | tail -n 40

# 2. Multi-exit strategies on SST-2 (issue 4): 300 steps of B32 (9,600 of 67,349 train
#    sentences), max length 64, MiniLM-L6 with 6 exits, seed 0, encoder lr 5e-5 and exit
#    heads at 20x (1e-3): at 5e-5 the lower exits stayed at the majority class in 300 steps.
ME="--set task.max_length=64 --set num_steps=300 --set eval_every=100 --set optim.lr=5e-5 --set optim.head_lr_mult=20"
for task in ${ME_TASKS:-sst2}; do
  if [ "$task" = sst2 ]; then cfg=configs/glue.py:sst2; dd="$DATA/glue"; else cfg=configs/textgcn.py:$task; dd="$DATA"; fi
  stage multi_exit "$task"
  $PY scripts/sweep.py --root "$OUT/multi_exit/$task" --config "$cfg" \
      --methods jt,2st,alt,kd,acl_cl --seeds 0 --set task.data_dir="$dd" $ME --keep_going
  stage early_exit "$task"
  dirs=$(for d in "$OUT/multi_exit/$task"/method=*; do printf -- '--workdir=%s ' "$d"; done)
  $PY eval.py $dirs --exit_policy entropy --thresholds 0.1,0.2,0.3,0.4,0.5 \
      --split dev --plot "$OUT/multi_exit/$task/quality_speed_entropy.png" | grep -v "^I1"
done
stage done
