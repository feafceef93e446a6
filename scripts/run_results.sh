#!/usr/bin/env bash
# The measured results of RESULTS.md. Every stage resumes where it stopped, so re-running the
# script after an interruption continues the work. CPU budget choices (steps, max lengths,
# subsets) are stated here and in RESULTS.md. Pick stages with STAGES (default: all, in order):
#   nohup bash scripts/run_results.sh > runs/results.log 2>&1 &
#   STAGES="single" SINGLE_TASKS="mr r8" nohup bash scripts/run_results.sh > runs/single.log 2>&1 &
# Stages: grad_conflict multi_exit single tsne lambda_sens gloss_ablation gloss_probe latest
# glue_rerun.
# The body is functions and `main "$@"; exit $?` is one line, so bash has read all of it
# before the work starts: editing this file while a run is going does not change that run.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
DATA=${DATA:-../shared/data}
OUT=${OUT:-runs/results}
# Every finished run's records (not its checkpoints) are copied to ARCHIVE, a tree inside the
# checkout that is committed: a fresh machine restores them (scripts/archive_runs.py) and the
# stages go on from there instead of training every run again. Only the default OUT has a
# default archive (another OUT must not mix its runs into the committed one); ARCHIVE= turns
# it off.
if [ "$OUT" = runs/results ]; then ARCHIVE=${ARCHIVE-results/runs}; else ARCHIVE=${ARCHIVE-}; fi
stage() { echo "=== $* $(date -u +%FT%TZ)"; }

# reuse RUN SOURCE...: a grid point that is the very same run as a finished run of another
# stage (same protocol, config and seed: e.g. the lambda stage's SCL at lambda 0.9 is the
# single stage's SCL) becomes a link to it instead of a second training run. RUN is left
# alone when it exists; the first SOURCE with a results.json is used.
reuse() {
  local run=$1 src
  [ -e "$run" ] || [ -L "$run" ] && return 0  # a dangling link too: sweep.py reports it
  for src in "${@:2}"; do
    if [ -f "$src/results.json" ]; then
      mkdir -p "$(dirname "$run")"
      ln -s "$(realpath --relative-to="$(dirname "$run")" "$src")" "$run"
      echo "reuse: $run -> $src"
      return 0
    fi
  done
}

# archive_of ROOT: ROOT's place in the archive ($OUT/single/mr -> $ARCHIVE/single/mr); empty
# (no archive) without one.
archive_of() { [ -z "$ARCHIVE" ] || echo "$ARCHIVE/${1#"$OUT"/}"; }

# has_weights RUN: whether the run still has checkpoints (a run restored from the archive has
# its records only: evaluations that need weights skip it; its archived outputs stay).
has_weights() { compgen -G "$1/best/[0-9]*" > /dev/null || compgen -G "$1/ckpt/[0-9]*" > /dev/null; }

# in_list VALUE COMMA_LIST: whether VALUE is one of the list's items.
in_list() { case ",$2," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# task -> "config data_dir"
task_args() {
  case "$1" in
    mr|r8|r52|ohsumed|20ng) echo "configs/textgcn.py:$1 $DATA" ;;
    *) echo "configs/glue.py:$1 $DATA/glue" ;;
  esac
}

grad_conflict() {
  # Gradient-conflict pilot (issue 3): CE/SCL and CE/ACL angles at every step. Its outputs
  # are small (angles per step, summary, histograms): they go straight to results/.
  stage grad_conflict rte
  $PY scripts/grad_conflict.py --task rte --data_dir "$DATA/glue" --steps 100 --batch_size 16 \
      --max_length 128 --out results/grad_conflict/rte | tail -n 40
  stage grad_conflict mr
  $PY scripts/grad_conflict.py --task mr --data_dir "$DATA" --steps 100 --batch_size 16 \
      --max_length 64 --out results/grad_conflict/mr | tail -n 40
}

multi_exit() {
  # Multi-exit strategies (issue 4): 300 steps of B32 (9,600 train examples), max length 64,
  # MiniLM-L6 with 6 exits, seeds ME_SEEDS (default 0; ME_SEEDS=0,1,2 for issue 6), encoder
  # lr 5e-5 and exit heads at 20x (1e-3): at 5e-5 the lower exits stayed at the majority
  # class in 300 steps. ME_POOLING=mean makes the
  # exits read the token mean instead of [CLS] (model.exit_pooling; results go to
  # multi_exit_mean/).
  local pool=${ME_POOLING:-cls}
  local root="$OUT/multi_exit" thr=${ME_THRESHOLDS:-0.1,0.2,0.3,0.4,0.5}
  [ "$pool" = cls ] || root="$OUT/multi_exit_$pool"
  local me="--set task.max_length=64 --set num_steps=300 --set eval_every=100 --set optim.lr=5e-5 --set optim.head_lr_mult=20 --set model.exit_pooling=$pool"
  for task in ${ME_TASKS:-sst2 mr}; do
    read -r cfg dd <<< "$(task_args "$task")"
    stage multi_exit "$task" "$pool"
    # Runs that a later library change made stale move out of the tables (kept under
    # <task>/<tag>/), so the sweep below trains them again with the current code (if a
    # retirement fails, the task is not swept: its table would mix two codes):
    # earlier KD and 2ST runs (KD's default became SPEC's additive form, recorded as
    # multi_exit.kd_form; 2ST's frozen gradients stopped counting in the clipping);
    local arch
    arch=$(archive_of "$root/$task")
    $PY scripts/retire_runs.py "$root/$task" --archive "$arch" --methods kd,2st --tag pre_s3 \
        --without_field multi_exit.kd_form &&
    # 2ST and ALT before 1c77d98 stepped a frozen exit group's AdamW (see optim.py);
    $PY scripts/retire_runs.py "$root/$task" --archive "$arch" --methods 2st,alt --tag pre_optfix \
        --before 1c77d98f0d1a8516bbc00cd96742b5eec86bbaca &&
    # gated ACL-CL before ed80301 measured its angle against every exit's loss.
    $PY scripts/retire_runs.py "$root/$task" --archive "$arch" --methods acl_cl --tag pre_gate_ce \
        --before ed80301497295df386729ab49d2a5801d234c9ad ||
      { echo "retire_runs.py failed: $root/$task not swept" >&2; continue; }
    $PY scripts/sweep.py --root "$root/$task" --archive "$arch" \
        --config "$cfg" --methods jt,2st,alt,kd,acl_cl --seeds "${ME_SEEDS:-0}" \
        --set task.data_dir="$dd" $me --keep_going
    # Committed copies go to results/<root name>/<task>/: the per-exit table and plot over
    # every seed (with each strategy's paired per-exit gain over JT), and the seed-0 runs'
    # results and early-exit sweeps.
    local pub
    pub="results/$(basename "$root")/$task"
    mkdir -p "$pub"
    cp "$root/$task/summary.md" "$pub/summary.md"
    $PY scripts/plot_per_exit.py --root "$root/$task" --vs jt --out "$pub/per_exit.png" \
        > "$pub/per_exit.md"
    # Tasks with a labelled test split (MR) also get the test table: dev chose the checkpoint.
    if grep -q '"test/exit_1/' "$root/$task/summary.json"; then
      $PY scripts/plot_per_exit.py --root "$root/$task" --vs jt --split test \
          --out "$pub/per_exit_test.png" > "$pub/per_exit_test.md"
    fi
    stage early_exit "$task" "$pool" seed 0
    local dirs=() todo=() d m
    for d in "$root/$task"/method=*,seed=0; do  # finished runs only: a failed one has no checkpoint
      [ -f "$d/results.json" ] || continue
      dirs+=("$d")
      # Resumable: a run whose early-exit sweep is newer than its training is not re-timed.
      has_weights "$d" || continue
      [ "$d/early_exit_entropy_dev.json" -nt "$d/results.json" ] || todo+=("--workdir=$d")
    done
    if [ ${#dirs[@]} -eq 0 ]; then echo "no finished runs under $root/$task"; continue; fi
    [ ${#todo[@]} -eq 0 ] || $PY eval.py "${todo[@]}" --exit_policy entropy \
        --thresholds "$thr" --split dev | grep -v "^I[0-9]\{4\} "
    local sweeps=() labels=()
    for d in "${dirs[@]}"; do
      m=${d##*/method=}
      m=${m%%,*}
      sweeps+=("$d/early_exit_entropy_dev.json")
      labels+=("$m")
      cp "$d/results.json" "$pub/results_$m.json"
      cp "$d/early_exit_entropy_dev.md" "$pub/early_exit_entropy_$m.md"
      cp "$d/early_exit_entropy_dev.json" "$pub/early_exit_entropy_$m.json"
    done
    $PY scripts/plot_quality_speed.py "${sweeps[@]}" --labels "${labels[@]}" \
        --out "$pub/quality_speed_entropy.png"
    # The other seeds, untimed: the metric change and layer speed-up over every seed.
    todo=()
    for d in "$root/$task"/method=*,seed=*; do
      [ -f "$d/results.json" ] && [ "${d##*,seed=}" != 0 ] && has_weights "$d" || continue
      [ "$d/early_exit_entropy_dev.json" -nt "$d/results.json" ] || todo+=("--workdir=$d")
    done
    [ ${#todo[@]} -eq 0 ] || $PY eval.py "${todo[@]}" --exit_policy entropy --thresholds "$thr" \
        --split dev --exit_repeats 0 | grep -v "^I[0-9]\{4\} "
    $PY scripts/early_exit_seeds.py "$root/$task" --out "$pub/early_exit_seeds.md" \
        --plot "$pub/quality_speed_seeds.png" > /dev/null
  done
}

# The single-exit protocol's fixed settings (the max length follows the task, below).
PROTO="--set eval_every=100 --set optim.lr=5e-5"

# task_steps TASK: the step budget. 200 steps for every task but CoLA, which gets the standard
# three GLUE epochs (800 steps of 8,551 examples): at 200 steps (0.75 epoch) all five methods
# still predicted the majority class on seed 0 (MCC 0; RESULTS.md). Those runs are kept under
# $OUT/single_200steps/cola.
task_steps() { case "$1" in cola) echo 800 ;; *) echo 200 ;; esac; }

# each_seed_task FN SEEDS TASKS: FN seed task config data_dir max_length, seed-major so a
# partial sweep already has every task at the first seeds.
each_seed_task() {
  local fn=$1 seed task cfg dd len
  for seed in $2; do
    for task in $3; do
      read -r cfg dd <<< "$(task_args "$task")"
      # CoLA's longest sentence is 47 tokens (train), 35 (dev): 48 truncates nothing.
      case "$task" in mrpc|rte|qnli|mnli|qqp) len=128 ;; cola) len=48 ;; *) len=64 ;; esac
      "$fn" "$seed" "$task" "$cfg" "$dd" "$len"
    done
  done
}

# protocol_sweep ROOT SEED TASK CONFIG DATA_DIR MAX_LEN SWEEP_ARGS...: one sweep.py call.
protocol_sweep() {
  $PY scripts/sweep.py --root "$1" --archive "$(archive_of "$1")" --config "$4" --seeds "$2" \
      --set task.data_dir="$5" --set task.max_length="$6" --set num_steps="$(task_steps "$3")" \
      $PROTO --keep_going "${@:7}"
}

single() {
  # Single-exit protocol (issues 5 and 6): MiniLM-L6, B32, 200 steps (6,400 train examples:
  # 1.0 epoch of MR's train split (6,397 after the 10% dev split), 1.3 of R8's (4,937)), max
  # length 64 (MR sentences fit; R8 documents are truncated; sentence pairs get 128), lr 5e-5,
  # seeds 0-2; CoLA alone gets 800 steps at max length 48 (task_steps). TextGCN corpora get
  # the G-Loss baselines too (issue 5); GLUE tasks the five methods of issue 6:
  # SINGLE_TASKS="sst2 cola mrpc rte".
  each_seed_task single_one "${SINGLE_SEEDS:-0 1 2}" "${SINGLE_TASKS:-mr r8}"
  # Tables over every task with runs: the headline metrics of the five issue-6 methods (and
  # their per-seed differences to CE), MR and R8's full method set, and CE against CE+G-Loss
  # on R52, Ohsumed and 20NG.
  local t glue=() tg=() more=()
  for t in sst2 cola mrpc rte mr r8; do [ -d "$OUT/single/$t" ] && glue+=("$t"); done
  for t in mr r8; do [ -d "$OUT/single/$t" ] && tg+=("$t"); done
  for t in r52 ohsumed 20ng; do [ -d "$OUT/single/$t" ] && more+=("$t"); done
  local IFS=,
  [ ${#glue[@]} -gt 0 ] && $PY scripts/results_tables.py --root "$OUT/single" \
      --tasks "${glue[*]}" --metrics headline --methods ce,scl,acl_embed,acl,gloss --vs ce \
      --out results/single/headline.md > /dev/null
  [ ${#tg[@]} -gt 0 ] && $PY scripts/results_tables.py --root "$OUT/single" --tasks "${tg[*]}" \
      --metrics test/accuracy,test/macro_f1,test/silhouette_macro,dev/macro_f1 --vs ce \
      --out results/single/tables.md > /dev/null
  # The other TextGCN corpora: CE against CE+G-Loss (claim 7), SINGLE_METHODS=ce,gloss.
  [ ${#more[@]} -gt 0 ] && $PY scripts/results_tables.py --root "$OUT/single" \
      --tasks "${more[*]}" --methods ce,gloss --vs ce \
      --metrics test/accuracy,test/macro_f1,test/silhouette_macro \
      --out results/single/textgcn_more.md > /dev/null
  return 0
}
glue_rerun() {
  # The GLUE tasks' single-exit runs trained again on a fresh machine (the
  # run folders behind results/single/headline.md gone), tabulated from their records alone:
  # the single stage's runs (same roots, protocol and seeds), in a table of their own.
  local tasks=${GR_TASKS:-mrpc cola rte} t have=()
  each_seed_task single_one "${GR_SEEDS:-0 1 2}" "$tasks"
  for t in $tasks; do [ -d "$OUT/single/$t" ] && have+=("$t"); done
  local IFS=,
  [ ${#have[@]} -gt 0 ] && $PY scripts/results_tables.py --root "$OUT/single" \
      --tasks "${have[*]}" --metrics headline --methods ce,scl,acl_embed,acl,gloss --vs ce \
      --out results/single/glue_rerun.md > /dev/null
  return 0
}
single_one() {
  local methods
  case "$2" in
    mr|r8|r52|ohsumed|20ng) methods=ce,scl,gloss,gloss_sqrt,triplet,cosine,acl_embed,acl ;;
    *) methods=ce,scl,acl_embed,acl,gloss ;;
  esac
  stage single "$2" seed "$1"
  local lam=$OUT/lambda/$2 ga=$OUT/gloss_gamma/$2 gs=$OUT/gloss_sigma/$2
  reuse "$OUT/single/$2/method=scl,seed=$1" "$lam/method=scl,loss.lam=0.9,seed=$1"
  reuse "$OUT/single/$2/method=acl,seed=$1" "$lam/method=acl,loss.lam=0.5,seed=$1"
  reuse "$OUT/single/$2/method=gloss,seed=$1" "$ga/method=gloss,loss.gamma_keep=0.7,seed=$1" \
      "$gs/method=gloss,loss.sigma=0.667,seed=$1"
  protocol_sweep "$OUT/single/$2" "$@" --methods "${SINGLE_METHODS:-$methods}" | tail -n 12
}

lambda_sens() {
  # lambda sensitivity (issue 6): CE+SCL against ACL (ACL-Embed + ACL-Grad) over loss.lam,
  # single-exit protocol. lambda weighs differently in the two: (1-lam) CE + lam SCL against
  # CE + lam ACL-Embed. LAM_SCL_ADDITIVE=1 adds the control that separates the two effects:
  # SCL in ACL's additive form, CE + lam SCL (loss.combine=additive).
  each_seed_task lambda_one "${LAM_SEEDS:-0 1 2}" "${LAM_TASKS:-mr}"
  local task
  for task in ${LAM_TASKS:-mr}; do
    $PY scripts/plot_lambda.py "$OUT/lambda/$task" --metric test/accuracy --vs acl \
        --baseline "$OUT/single/$task/summary.json" --out "results/lambda/$task.png" \
        --table "results/lambda/$task.md"
  done
}
lambda_one() {
  local lams=${LAM_VALUES:-0.1,0.3,0.5,0.7,0.9}
  stage lambda "$2" seed "$1"
  # The presets' own lambdas (SCL 0.9, ACL 0.5) are the single stage's runs.
  in_list 0.9 "$lams" && reuse "$OUT/lambda/$2/method=scl,loss.lam=0.9,seed=$1" \
      "$OUT/single/$2/method=scl,seed=$1"
  in_list 0.5 "$lams" && reuse "$OUT/lambda/$2/method=acl,loss.lam=0.5,seed=$1" \
      "$OUT/single/$2/method=acl,seed=$1"
  protocol_sweep "$OUT/lambda/$2" "$@" --methods scl,acl --grid loss.lam="$lams" | tail -n 14
  # The plot's CE line is the single stage's CE run: trained there when it is missing (as on a
  # fresh machine whose single runs are gone), so the curves never lack their baseline.
  protocol_sweep "$OUT/single/$2" "$@" --methods ce | tail -n 4
  if [ "${LAM_SCL_ADDITIVE:-0}" = 1 ]; then
    protocol_sweep "$OUT/lambda/$2" "$@" --methods scl --grid loss.lam="$lams" \
        --grid loss.combine=additive | tail -n 20
  fi
}

gloss_ablation() {
  # G-Loss ablations (issue 6): gamma_keep and a fixed sigma grid (sqrt sigma is in the single
  # stage), single-exit protocol.
  each_seed_task gloss_ablation_one "${GA_SEEDS:-0 1 2}" "${GA_TASKS:-mr}"
  # Per axis, the table over tasks, then each task's curve and spreads over the axis, seed by
  # seed too (claim 14: stable over gamma_keep), with CE's band from the single stage.
  local tasks=${GA_TASKS:-mr} axis task field flags base
  for axis in gamma sigma; do
    $PY scripts/results_tables.py --root "$OUT/gloss_$axis" --tasks "${tasks// /,}" \
        --metrics test/accuracy,test/macro_f1,test/silhouette_macro,dev/macro_f1 \
        --out "results/gloss_ablation/$axis.md" > /dev/null
    field=loss.gamma_keep flags=()
    [ $axis = sigma ] && field=loss.sigma flags=(--logx)
    for task in $tasks; do
      base=()
      [ -f "$OUT/single/$task/summary.json" ] && base=(--baseline "$OUT/single/$task/summary.json")
      $PY scripts/plot_lambda.py "$OUT/gloss_$axis/$task" --axis $field --metric test/accuracy \
          "${base[@]}" "${flags[@]}" --out "results/gloss_ablation/${task}_$axis.png" \
          --table "results/gloss_ablation/${task}_${axis}_spread.md" > /dev/null
    done
  done
}
gloss_ablation_one() {
  stage gloss_ablation "$2" seed "$1"
  # gamma_keep 0.7 and sigma 0.667 are the G-Loss preset: the single stage's run.
  reuse "$OUT/gloss_gamma/$2/method=gloss,loss.gamma_keep=0.7,seed=$1" \
      "$OUT/single/$2/method=gloss,seed=$1"
  reuse "$OUT/gloss_sigma/$2/method=gloss,loss.sigma=0.667,seed=$1" \
      "$OUT/single/$2/method=gloss,seed=$1" "$OUT/gloss_gamma/$2/method=gloss,loss.gamma_keep=0.7,seed=$1"
  protocol_sweep "$OUT/gloss_gamma/$2" "$@" --methods gloss \
      --grid loss.gamma_keep=0.3,0.5,0.7,0.9 | tail -n 8
  protocol_sweep "$OUT/gloss_sigma/$2" "$@" --methods gloss \
      --grid loss.sigma=0.1,0.3,0.667,1.5,5.0 | tail -n 9
}

gloss_probe() {
  # Claim 7 follow-up: why CE+G-Loss loses to CE on R8. Two changes, one at a time, against
  # the single stage's CE and G-Loss (linked in, not retrained): G-Loss in the additive form
  # CE + 0.8 G-Loss (CE keeps its full weight), and class-balanced CE (sklearn "balanced",
  # as the G-Loss reference runs use) for both CE and G-Loss. Seeds GP_SEEDS (default 0).
  local root="$OUT/gloss_r8_probe/r8" seed
  for seed in ${GP_SEEDS:-0}; do
    stage gloss_probe r8 seed "$seed"
    reuse "$root/method=ce,seed=$seed" "$OUT/single/r8/method=ce,seed=$seed"
    reuse "$root/method=gloss,seed=$seed" "$OUT/single/r8/method=gloss,seed=$seed"
    read -r cfg dd <<< "$(task_args r8)"
    protocol_sweep "$root" "$seed" r8 "$cfg" "$dd" 64 --methods gloss \
        --grid loss.combine=additive | tail -n 6
    protocol_sweep "$root" "$seed" r8 "$cfg" "$dd" 64 --methods gloss,ce \
        --grid loss.class_weights=balanced | tail -n 6
  done
  $PY scripts/results_tables.py --root "$OUT/gloss_r8_probe" --tasks r8 \
      --metrics test/accuracy,test/macro_f1,test/silhouette_macro --out results/gloss_probe/r8.md \
      > /dev/null
}

latest() {
  # Selection-free numbers: every finished run's final weights (its last checkpoint, not the
  # one dev-set selection kept) on the test split, to results_latest.json; then the tables of
  # LATEST_ROOTS (sweep roots under $OUT, default the MR/R8 single runs and MR's lambda grid)
  # from those files. A run already evaluated after its training is skipped. GLUE tasks have
  # no test labels: their final weights are scored on dev, the split their selection used.
  local r d todo split metrics cfg
  for r in ${LATEST_ROOTS:-single/mr single/r8 lambda/mr}; do
    stage latest "$r"
    split=test metrics=test/accuracy,test/macro_f1
    read -r cfg _ <<< "$(task_args "${r##*/}")"
    [[ $cfg == configs/glue.py:* ]] && split=dev metrics=headline,dev/accuracy
    todo=()
    for d in "$OUT/$r"/method=*; do
      [ -f "$d/results.json" ] && has_weights "$d" || continue
      [ "$d/results_latest.json" -nt "$d/results.json" ] || todo+=("$d")
    done
    for d in "${todo[@]}"; do
      $PY eval.py --workdir="$d" --checkpoint latest --split "$split" > /dev/null 2>&1 \
          || echo "latest: eval failed for $d"
    done
    local name=${r//\//_}
    $PY scripts/results_tables.py --root "$OUT/${r%/*}" --tasks "${r##*/}" \
        --results results_latest.json --metrics "$metrics" \
        --out "results/latest/$name.md" > /dev/null
    if [ "${r%/*}" = lambda ]; then  # the lambda curves from the final weights too
      local base="$OUT/single/${r##*/}/summary_latest.json"
      [ -f "$base" ] || base="$OUT/single/${r##*/}/summary.json"
      $PY scripts/plot_lambda.py "$OUT/$r" --summary summary_latest.json --metric test/accuracy \
          --vs acl \
          --baseline "$base" --out "results/lambda/${r##*/}_latest.png" \
          --table "results/lambda/${r##*/}_latest.md" > /dev/null
    fi
  done
}

tsne() {
  # t-SNE of dev features (issue 6): CE, CE+SCL and ACL of the single stage, seed 0.
  for task in ${TSNE_TASKS:-mr}; do
    stage tsne "$task"
    local dirs=() wd
    for m in ce scl acl; do
      wd="$OUT/single/$task/method=$m,seed=0"
      [ -f "$wd/features_dev.npz" ] || ! has_weights "$wd" ||
        $PY eval.py --workdir="$wd" --split dev --dump_features > /dev/null
      dirs+=("$wd")
    done
    for wd in "${dirs[@]}"; do
      [ -f "$wd/features_dev.npz" ] || { echo "tsne: $wd has no features and no weights"; continue 2; }
    done
    mkdir -p "results/tsne"
    $PY scripts/plot_tsne.py "${dirs[@]}" --labels CE CE+SCL ACL --out "results/tsne/$task.png"
  done
}

main() {
  mkdir -p "$OUT"
  [ -n "$ARCHIVE" ] && [ -d "$ARCHIVE" ] &&
    $PY scripts/archive_runs.py "$OUT" "$ARCHIVE" --restore | tail -n 1
  for st in ${STAGES:-grad_conflict multi_exit single tsne lambda_sens gloss_ablation gloss_probe}; do
    "$st"
    # The records stages write after training (final-weight and early-exit evaluations) too.
    [ -z "$ARCHIVE" ] || $PY scripts/archive_runs.py "$OUT" "$ARCHIVE" | tail -n 1
  done
  $PY scripts/sync_results.py  # RESULTS.md's quoted tables follow the files just written
  stage done
}

main "$@"; exit $?
