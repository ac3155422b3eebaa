#!/usr/bin/env bash
# Runs on the H200 machine (device tool) over a tree that carries .device-carry/ (scripts/prepare_device_carry.sh):
# installs the carried wheels, then the steps named as arguments, each under its own time limit, writing
# logs and results into $OUT. Steps:
#   probe      which sandbox protections the host's CUDA initialises under (kernelfoundry.sandbox.gpu_probe)
#   ipc-probe  whether CUDA IPC works between the judge and a process sealed like the runner, both ways
#              (kernelfoundry.evaluation.ipc_probe: the ground for a device-to-device output fetch)
#   gpu-tests  the GPU tests of the sealed evaluation and the CUDA attacks of the adversarial suite
#   ab         bench/evaluator_ab.py: the suite's seeds judged by the base evaluator (.device-carry/base/src)
#              and by this tree's, side by side
#   ab-cpu     the same on the machine's CPU (a quiet many-core host: the CPU cost figure)
#   cost       bench/evaluation_cost.py on CUDA: per-phase judge time and GPU-busy fraction (KF_COST_TASKS)
#   probe-speed tests/kernelbench/probe_gpu_speed.py: the proposer's first CUDA seed per op family vs eager
#   probe-grid tests/kernelbench/probe_pointwise_grid.py: the pointwise seed's grid capped and uncapped at
#              KernelBench's sizes, per BLOCK and PER_THREAD, against eager and a copy
#   probe-kernels tests/kernelbench/probe_candidate_kernels.py: eager, torch.compile and the first
#              KF_PROBE_SEEDS (2) CUDA candidates of the KF_PROBE_TASKS (level/stem or level/N) kernel by kernel, and
#              each again built with every KF_PROBE_PARAMS set (NAME=V[,NAME=V...], space-separated sets);
#              KF_PROBE_NO_COMPILE=1 skips torch.compile
#   ncu-kernels Nsight Compute (--set full, clocks left alone) over one launch per KF_NCU_KERNELS pattern
#              (kernel-name regexes, default kf_conv: the candidate's; after KF_NCU_SKIP (2) matching launches)
#              in the probe-kernels run of KF_NCU_TASK's first candidate: $OUT/ncu_<n>.ncu-rep and a text
#              page of its details and its stall reasons (csv) each, to name what limits a kernel before
#              changing it
#   kb:K/N     bench/kernelbench.py run on the K-th of N chunks of the 176 tasks (results appended)
#   kbs:K/N    the same on a spread sample: every N-th task from the K-th (both levels)
#              (KF_KB_LOGS=NAME: the services' logs gzipped into $OUT/NAME)
# e.g. bash scripts/device_checks.sh probe gpu-tests ab
# Limits per step come from KF_STEP_LIMIT_<STEP> (seconds; defaults below); the whole call must end inside
# the device's 600 s per command. KF_KB_BUDGET and KF_KB_PARALLEL set the bench's evaluations per task and runs
# at once (8 and 4), KF_KB_LEVEL one level, KF_KB_ONLY named tasks (stems, level/stem or level/N) within the selection. KF_GPU_TESTS_K narrows
# the GPU tests (pytest -k), KF_GPU_TESTS_PATHS replaces their paths, KF_AB_ONLY the A/B's tasks.
set -uo pipefail
out="${OUT:-/tmp/kf-out}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .device-carry/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export KF_BENCH_COMMIT="$(cat .device-carry/commit)" KF_KERNELBENCH="$PWD/.device-carry/kernelbench"
nvidia-smi -L 2>&1 | tee "$out/device.txt"

for step in "$@"; do
  started=$(date +%s)
  case "$step" in
    probe)
      timeout "${KF_STEP_LIMIT_PROBE:-90}" python3 -c '
from kernelfoundry.sandbox.gpu_probe import LADDER, probe
for rung in LADDER:
    print(rung, probe(rung), flush=True)
' 2>&1 | tee "$out/probe.txt"
      ;;
    ipc-probe)
      timeout "${KF_STEP_LIMIT_IPC_PROBE:-150}" python3 -m kernelfoundry.evaluation.ipc_probe 2>&1 | tee "$out/ipc_probe.txt"
      ;;
    gpu-tests)
      timeout "${KF_STEP_LIMIT_GPU_TESTS:-260}" python3 -m pytest -q -rfEs -m gpu -p no:cacheprovider \
        ${KF_GPU_TESTS_K:+-k "$KF_GPU_TESTS_K"} ${KF_GPU_TESTS_PATHS:-tests/integration/evaluation tests/adversarial/test_cuda_attacks.py} \
        2>&1 | tee "$out/gpu_tests.txt"
      ;;
    ab)
      timeout "${KF_STEP_LIMIT_AB:-300}" python3 bench/evaluator_ab.py --backend cuda \
        --base-src .device-carry/base/src --rounds "${KF_AB_ROUNDS:-3}" ${KF_AB_ONLY:+--only $KF_AB_ONLY} --out "$out/evaluator_ab_cuda.json" \
        2>&1 | tee "$out/evaluator_ab_cuda.txt"
      ;;
    ab-cpu)
      timeout "${KF_STEP_LIMIT_AB_CPU:-300}" python3 bench/evaluator_ab.py --backend cpu \
        --base-src .device-carry/base/src --rounds "${KF_AB_ROUNDS:-3}" ${KF_AB_CPU_ONLY:+--only $KF_AB_CPU_ONLY} --out "$out/evaluator_ab_cpu.json" \
        2>&1 | tee "$out/evaluator_ab_cpu.txt"
      ;;
    cost)
      timeout "${KF_STEP_LIMIT_COST:-240}" python3 bench/evaluation_cost.py --backend cuda --repeats "${KF_COST_REPEATS:-3}" \
        --task ${KF_COST_TASKS:-level1_gelu level2_elementwise_chain} --out "$out/evaluation_cost_cuda.json" \
        2>&1 | tee "$out/evaluation_cost_cuda.txt"
      ;;
    probe-speed)
      timeout "${KF_STEP_LIMIT_PROBE_SPEED:-240}" python3 tests/kernelbench/probe_gpu_speed.py --json "$out/probe_gpu_speed.json" \
        2>&1 | tee "$out/probe_gpu_speed.txt"
      ;;
    probe-grid)
      timeout "${KF_STEP_LIMIT_PROBE_GRID:-150}" python3 tests/kernelbench/probe_pointwise_grid.py \
        --json "$out/probe_pointwise_grid.json" 2>&1 | tee "$out/probe_pointwise_grid.txt"
      ;;
    probe-kernels)
      timeout "${KF_STEP_LIMIT_PROBE_KERNELS:-240}" python3 tests/kernelbench/probe_candidate_kernels.py \
        --seeds "${KF_PROBE_SEEDS:-2}" ${KF_PROBE_NO_COMPILE:+--no-compile} $(for p in ${KF_PROBE_PARAMS:-}; do printf -- '--params %s ' "$p"; done) \
        ${KF_PROBE_TASKS:-} 2>&1 | tee "$out/probe_candidate_kernels.txt"
      ;;
    ncu-kernels)
      ncu_bin="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
      [[ -n "$ncu_bin" ]] || { echo "no ncu on this machine" | tee "$out/ncu.txt"; continue; }
      n=0
      for pattern in ${KF_NCU_KERNELS:-kf_conv}; do
        n=$((n + 1))
        timeout "${KF_STEP_LIMIT_NCU:-150}" "$ncu_bin" --clock-control none --set full --kernel-name "regex:$pattern" \
          --launch-skip "${KF_NCU_SKIP:-2}" --launch-count 1 -f -o "$out/ncu_$n" \
          python3 tests/kernelbench/probe_candidate_kernels.py --seeds 1 --no-compile --no-profile \
          ${KF_NCU_TASK:-level1/56_conv_standard_2D__asymmetric_input__asymmetric_kernel} 2>&1 | tee -a "$out/ncu.txt"
        [[ -f "$out/ncu_$n.ncu-rep" ]] && "$ncu_bin" --import "$out/ncu_$n.ncu-rep" --page details \
          > "$out/ncu_${n}_details.txt" 2>&1
        # where the warps wait: each stall reason's warps per issued instruction
        [[ -f "$out/ncu_$n.ncu-rep" ]] && "$ncu_bin" --import "$out/ncu_$n.ncu-rep" --page raw --csv \
          --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
          > "$out/ncu_${n}_stalls.csv" 2>&1
      done
      ;;
    kb:* | kbs:*)
      [[ "$step" == kbs:* ]] && select=(--sample "${step#kbs:}") || select=(--chunk "${step#kb:}")
      timeout "${KF_STEP_LIMIT_KB:-540}" python3 bench/kernelbench.py run --backend cuda \
        --kernelbench .device-carry/kernelbench "${select[@]}" ${KF_KB_LEVEL:+--level "$KF_KB_LEVEL"} ${KF_KB_ONLY:+--only $KF_KB_ONLY} --compile --budget "${KF_KB_BUDGET:-8}" \
        --parallel-runs "${KF_KB_PARALLEL:-4}" --deadline-s "$(( ${KF_STEP_LIMIT_KB:-540} - 30 ))" \
        --results "$out/kernelbench_cuda.jsonl" ${KF_KB_LOGS:+--logs "$out/$KF_KB_LOGS"} 2>&1 | tee -a "$out/kernelbench_cuda.txt"
      ;;
    *) echo "unknown step $step" >&2 ;;
  esac
  echo "== $step: exit ${PIPESTATUS[0]} after $(( $(date +%s) - started )) s" | tee -a "$out/steps.txt"
done
