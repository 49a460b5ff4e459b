#!/usr/bin/env bash
# The real-GPU check of issue 24, as one script of a few minutes: run it as root in the repo
# root of a machine with an NVIDIA GPU, its driver, and this project installed in .venv with
# nvidia-ml-py (`.venv/bin/pip install -e '.[gpu]'`; the device machines reach no registry,
# so bring the venv along). It prints what it sees and ends with one line per check,
#   PASS|FAIL|INFO <check>: <what was seen>
# and exits 1 if any check failed. Everything it starts is stopped by pid, the cgroups its
# tasks used are swept, its temporary directory removed. Results go to $OUT (default
# /tmp/gpu-check-out) as well.
#
# Checks: NVML detection (the agent's inventory and node labels, and `tcl dev`'s agent
# detection), `tcl submit --gpus 1 -- nvidia-smi -L` lists exactly one GPU, a task without
# --gpus lists none, CUDA's own count inside a confined task (libcuda cuDeviceGetCount with
# the CUDA_VISIBLE_DEVICES the agent set, and with the node's index instead: which of the
# two numberings CUDA uses under the device cgroup), and usage in `tcl status -o json` and on
# /metrics (DCGM_FI_DEV_GPU_UTIL).
set -u
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
BIN=$VENV/bin
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /var/tmp/tcl-gpu-check-XXXXXX)
chmod 755 "$WORK"
NODE=gpucheck-$$
RESULTS=()
PIDS=()

result() { RESULTS+=("$1 $2: $3"); echo "== $1 $2: $3"; }
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
    "$BIN/python" -c "from testkit.procs import sweep_node; sweep_node('$NODE')" 2>/dev/null
    cp "$WORK"/*.log "$OUT"/ 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
wait_for() {   # FILE PATTERN SECONDS
    for _ in $(seq 1 $(($3 * 10))); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

echo "== the machine"
nvidia-smi -L | tee "$OUT/nvidia-smi-L.txt"
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
uname -r; stat -fc %T /sys/fs/cgroup

echo "== NVML detection"
"$BIN/python" - <<'EOF' | tee "$OUT/inventory.txt"
from tcluster.agent.gpudetect import inventory
from tcluster.agent.gpus import Selection, node_labels
inv = inventory(Selection(all=True))
print("source", inv.source, "devices", [(g.index, g.path, g.model, g.memory_bytes) for g in inv.devices])
print("shared", inv.shared_paths, "labels", node_labels(inv.devices))
EOF
if grep -q "^source nvml" "$OUT/inventory.txt"; then result PASS nvml "$(head -1 "$OUT/inventory.txt")"
else result FAIL nvml "$(cat "$OUT/inventory.txt")"; fi

echo "== tcl dev detects the GPU (its agent log line)"
mkdir -p "$WORK/home"
HOME="$WORK/home" timeout 40 "$BIN/tcl" dev --node "$NODE-dev" --data-dir "$WORK/dev" --listen 127.0.0.1:0 --http off \
    > "$WORK/dev.log" 2>&1 &
DEVPID=$!
if wait_for "$WORK/dev.log" "runtime [a-z0-9]+, [0-9]+ GPUs?: " 30; then result PASS tcl-dev "$(grep -oE '[0-9]+ GPUs?: [^)]*\)' "$WORK/dev.log")"
else result INFO tcl-dev "no GPU line within 30 s (see dev.log)"; fi
kill -INT "$DEVPID" 2>/dev/null; wait "$DEVPID" 2>/dev/null
"$BIN/python" -c "from testkit.procs import sweep_node; sweep_node('$NODE-dev')" 2>/dev/null

echo "== a master and an agent"
"$BIN/tcl-master" --listen 127.0.0.1:0 --http 127.0.0.1:0 --data-dir "$WORK/master" \
    --heartbeat-interval-s 0.5 > "$WORK/master.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/master.log" "dashboard on http" 60 || { cat "$WORK/master.log"; exit 1; }
MASTER=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$WORK/master.log" | head -1 | cut -d' ' -f3)
HTTP=$(grep -oE 'dashboard on http://[0-9.:]+' "$WORK/master.log" | cut -d/ -f3)
"$BIN/tcl-agent" --master "$MASTER" --node "$NODE" --state-dir "$WORK/agent" --gpus all \
    --heartbeat-interval-s 0.5 > "$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/agent.log" "registered with" 60 || { cat "$WORK/agent.log"; exit 1; }
TCL=("$BIN/tcl" --master "$MASTER")
"${TCL[@]}" nodes -o json | tee "$OUT/nodes.json"
run_job() {    # ARGS... -> prints the job's stdout once it ended
    local id
    id=$("${TCL[@]}" submit --cpu 0.1 --mem 256Mi "$@") || return 1
    for _ in $(seq 1 600); do
        "${TCL[@]}" status "$id" -o json | grep -qE '"state": "(SUCCEEDED|FAILED|CANCELLED)"' && break
        sleep 0.1
    done
    "${TCL[@]}" status "$id" -o json > "$WORK/status-$id.json"
    "${TCL[@]}" logs "$id"
}

echo "== nvidia-smi -L in a task with --gpus 1, and in one without"
ONE=$(run_job --gpus 1 -- nvidia-smi -L)
echo "$ONE" | tee "$OUT/task-gpus1.txt"
N=$(echo "$ONE" | grep -c '^GPU ')
[ "$N" = 1 ] && result PASS gpus-1 "lists exactly one GPU: $ONE" || result FAIL gpus-1 "lists $N: $ONE"
NONE=$(run_job -- sh -c 'nvidia-smi -L 2>&1; echo "CUDA=[$CUDA_VISIBLE_DEVICES] NVIDIA=[$NVIDIA_VISIBLE_DEVICES]"')
echo "$NONE" | tee "$OUT/task-gpus0.txt"
N=$(echo "$NONE" | grep -c '^GPU ')
[ "$N" = 0 ] && result PASS gpus-0 "lists none: $(echo "$NONE" | tr '\n' ' ')" \
             || result FAIL gpus-0 "lists $N: $(echo "$NONE" | tr '\n' ' ')"

echo "== CUDA's numbering inside a confined task (libcuda from the driver)"
cat > "$WORK/cuda_count.py" <<'PY'
import ctypes, os, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    sys.exit("no libcuda: %s" % e)
n = ctypes.c_int(-1)
rc = cuda.cuInit(0)
cuda.cuDeviceGetCount(ctypes.byref(n))
env = os.environ
print("CUDA_VISIBLE_DEVICES=%r TCL_GPUS=%r cuInit=%d count=%d"
      % (env.get("CUDA_VISIBLE_DEVICES"), env.get("TCL_GPUS"), rc, n.value))
PY
chmod 644 "$WORK/cuda_count.py"
# With 2+ GPUs a holder takes index 0, so the probe is bound to the node's index 1.
HOLD=""
if [ "$GPUS" -ge 2 ]; then
    HOLD=$("${TCL[@]}" submit --cpu 0.1 --mem 64Mi --gpus 1 -- sleep 120)
    sleep 3
fi
AS_SET=$(run_job --gpus 1 -- python3 "$WORK/cuda_count.py")
AS_NODE=$(run_job --gpus 1 -- sh -c "CUDA_VISIBLE_DEVICES=\$TCL_GPUS exec python3 $WORK/cuda_count.py")
[ -n "$HOLD" ] && "${TCL[@]}" cancel "$HOLD" > /dev/null
echo "as set: $AS_SET"; echo "node index: $AS_NODE"
echo "$AS_SET" | grep -q "count=1" && result PASS cuda-visible "$AS_SET" || result FAIL cuda-visible "$AS_SET"
result INFO cuda-node-index "with the node's index instead: $AS_NODE"

echo "== usage of a busy GPU task in tcl status -o json and /metrics"
# A real load where the machine has PyTorch (TORCH_PYTHON, default: the first python3 that
# imports torch), else nvidia-smi queries (which keep the GPU near 0%).
TORCH_PYTHON=${TORCH_PYTHON:-$(for p in /opt/torch/.venv/bin/python3 $(command -v python3); do
    "$p" -c 'import torch' 2>/dev/null && echo "$p" && break; done)}
if [ -n "$TORCH_PYTHON" ]; then
    LOAD="$TORCH_PYTHON -c 'import time, torch
a = torch.randn(8192, 8192, device=\"cuda\"); end = time.time() + 12
while time.time() < end: b = a @ a; torch.cuda.synchronize()'"
else
    LOAD='for i in $(seq 1 30); do nvidia-smi -q > /dev/null; done; sleep 5'
fi
BUSY=$("${TCL[@]}" submit --cpu 1 --mem 4Gi --gpus 1 -- sh -c "$LOAD")
sleep 9
"${TCL[@]}" status "$BUSY" -o json > "$OUT/busy-status.json"
grep -A8 '"gpu_usage"' "$OUT/busy-status.json"
grep -q '"gpu_usage"' "$OUT/busy-status.json" && result PASS usage-status "gpu_usage present" \
                                              || result FAIL usage-status "no gpu_usage in tcl status -o json"
LOADNAME="nvidia-smi -q"; [ -n "$TORCH_PYTHON" ] && LOADNAME="PyTorch 8192x8192 matmuls ($TORCH_PYTHON)"
result INFO usage-seen "load: $LOADNAME; $(tr -d ' \n' < "$OUT/busy-status.json" | grep -oE '"util_percent":[0-9.]+,"memory_used_bytes":[0-9]+' | head -1)"
python3 -c "import urllib.request,sys; print(urllib.request.urlopen('http://$HTTP/metrics').read().decode())" \
    > "$OUT/metrics.txt" 2>&1
grep '^DCGM_FI_DEV' "$OUT/metrics.txt"
grep -q '^DCGM_FI_DEV_GPU_UTIL' "$OUT/metrics.txt" && result PASS usage-metrics "DCGM series present" \
                                                   || result FAIL usage-metrics "no DCGM_FI_DEV_GPU_UTIL on /metrics"
"${TCL[@]}" top --once > "$OUT/top.txt" 2>&1; cat "$OUT/top.txt"
"${TCL[@]}" top --once -o json > "$OUT/top.json" 2>&1
UTIL=$(tr -d ' \n' < "$OUT/top.json" | grep -oE '"gpu_util_percent":[0-9.]+' | head -1)
[ -n "$UTIL" ] && result PASS usage-top "tcl top -o json: $UTIL; table: $(grep -E 'GPU' "$OUT/top.txt" | head -1 | tr -s ' ')" \
               || result FAIL usage-top "no gpu_util_percent in tcl top -o json"
python3 -c "import urllib.request; print(urllib.request.urlopen('http://$HTTP/api/v1/jobs/$BUSY/usage').read().decode())" \
    > "$OUT/job-usage.json" 2>&1
grep -q '"gpu"' "$OUT/job-usage.json" && result PASS usage-chart "the job page's usage API has the task's gpu series" \
                                        || result INFO usage-chart "no gpu series in /api/v1/jobs/ID/usage: $(head -c 300 "$OUT/job-usage.json")"
"${TCL[@]}" cancel "$BUSY" > /dev/null

echo
printf '%s\n' "${RESULTS[@]}" | tee "$OUT/summary.txt"
! printf '%s\n' "${RESULTS[@]}" | grep -q '^FAIL'
