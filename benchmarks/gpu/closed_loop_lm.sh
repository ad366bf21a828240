#!/usr/bin/env bash
# The closed loop's tiny-LM row on a lent GPU (issue #35 item 7), as one prepared call.
#
# Prepared on the CPU machine (nothing can be fetched on the GPU machine):
#   .whl/                 wheels the GPU image lacks (benchmarks/gpu/README.md lists how they are fetched)
#   .bench/closed_loop/   the pretrained solvers (one per seed) and the bootstrapped generator, built there
# Run there (the device tool): PROPEL_BENCH_COMMIT=$(git rev-parse HEAD) bash benchmarks/gpu/closed_loop_lm.sh
# (the copy there carries a stale .git: the commit must be passed in)
#
# 1. installs the wheels under /tmp/site, records the card (nvidia-smi) and checks the imports;
# 2. runs every (seed, arm) of the LM row as its own process, all at once, each under a deadline: the
#    trainer and the in-band measurement on the GPU, the arms' servers (daemons) on the CPU; beside them
#    the continuous arm of the first GPU_DAEMON_SEEDS seeds with the daemon on the GPU too (its CUDA path);
# 3. merges the CPU-daemon parts into one result ($OUT/$NAME.json + .png), the GPU-daemon parts into
#    $OUT/${NAME}_gpu_daemon.json, and packs the logs.
# Knobs (environment): SEEDS (5), ARMS, ROUNDS (4), STEPS (50 per round), MEASURE (256), PRETRAIN (2500),
# HELDOUT (512), HELDOUT_KIND (mix), GPU_DAEMON_SEEDS (1), DEADLINE_S (seconds for step 2), NAME, DEVICE (cuda).
set -u
OUT=${OUT:-/tmp/propel-gpu-out}
SEEDS=${SEEDS:-5}
ARMS=${ARMS:-continuous,static,base,trainer_labels}
ROUNDS=${ROUNDS:-4}
STEPS=${STEPS:-50}
MEASURE=${MEASURE:-256}
PRETRAIN=${PRETRAIN:-2500}
HELDOUT=${HELDOUT:-512}
HELDOUT_KIND=${HELDOUT_KIND:-mix}  # the run at c0b9b4b used sums (the only kind then)
DEADLINE_S=${DEADLINE_S:-480}  # the run at c0b9b4b: 420, and 4 of 5 continuous seeds missed it
GPU_DAEMON_SEEDS=${GPU_DAEMON_SEEDS:-1}
NAME=${NAME:-closed_loop_lm_gpu}
DEVICE=${DEVICE:-cuda}  # cpu: a dry run of this script on the CPU machine
PARTS=$(mktemp -d /tmp/propel-gpu-parts.XXXXXX)  # fresh every call: a rerun never merges old parts
mkdir -p "$OUT" "$PARTS/logs"
started=$(date +%s)
say() { echo "[gpu $(($(date +%s) - started)) s] $*"; }

WHEELS=${WHEELS:-.whl}  # a dry run here: WHEELS=none (they are CPython 3.12 builds for the GPU image)
if [ -d "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || { echo "wheel install failed"; exit 3; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
nproc
python3 - <<'EOF' || { echo "imports failed"; exit 4; }
import torch, transformers, trl, peft, fastapi, sqlalchemy, celery, uvicorn, datasets
import benchmarks.closed_loop, daemon.cli.main, examples.trl_trainer, testkit.closed_loop_lm  # noqa: F401
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
print("transformers", transformers.__version__, "trl", trl.__version__, "peft", peft.__version__)
EOF
say "setup done"

export PROPEL_BENCH_RESULTS=$PARTS
common=(--rows lm --device "$DEVICE" --rounds "$ROUNDS" --lm-steps-per-round "$STEPS" --lm-measure-tasks "$MEASURE"
        --lm-held-out "$HELDOUT" --lm-held-out-kind "$HELDOUT_KIND" --lm-pretrain-steps "$PRETRAIN")
pids=()
part() {  # NAME ARM SEED DAEMON_DEVICE: one (seed, arm) in its own process, under the deadline
  timeout "$DEADLINE_S" python3 -m benchmarks.closed_loop "${common[@]}" --daemon-device "$4" --arms "$2" \
    --seed-start "$3" --seeds 1 --name "$1" > "$PARTS/logs/$1.log" 2>&1 &
  pids+=($!)
}
for ((seed = 0; seed < SEEDS; seed++)); do
  for arm in ${ARMS//,/ }; do part "part_${seed}_${arm}" "$arm" "$seed" cpu; done
done
# the daemon itself on the GPU (its CUDA path), beside the same seeds' CPU daemons
for ((seed = 0; seed < GPU_DAEMON_SEEDS; seed++)); do part "gpud_${seed}" continuous "$seed" auto; done
say "${#pids[@]} processes started"
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
say "parts done; $failed failed"

export PROPEL_BENCH_RESULTS=$OUT
merge() {  # NAME ARMS DAEMON_DEVICE FILES…: one result of the given parts
  local name=$1 arms=$2 dd=$3; shift 3
  local from=(); for f in "$@"; do [ -e "$f" ] && from+=(--merge-from "$f"); done
  [ ${#from[@]} -gt 0 ] || { say "$name: no parts to merge"; return; }
  python3 -m benchmarks.closed_loop "${common[@]}" --daemon-device "$dd" --arms "$arms" --seeds 0 "${from[@]}" \
    --name "$name" > "$PARTS/logs/merge_$name.log" 2>&1 || { say "merge $name failed"; failed=$((failed + 1)); }
  tail -n 25 "$PARTS/logs/merge_$name.log"
}
merge "$NAME" "$ARMS" cpu "$PARTS"/part_*.json
merge "${NAME}_gpu_daemon" continuous auto "$PARTS"/gpud_*.json
tar -czf "$OUT/logs.tgz" -C "$PARTS" logs
say "done; $failed part(s) or merge(s) failed"
[ "$failed" -eq 0 ] || exit 5
