#!/usr/bin/env bash
# bench/start_latency.py on a lent quiet machine (the `device` tool; issue 26's start p50 on
# cgroup v2, with the phase breakdown). Dependencies travel as wheels in .whl/ as for
# bench/gpu_device.sh (which says how to make them); run from a copy outside the checkout,
# whose ./tcluster folder would shadow the installed package.
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/run && cp -r bench testkit /tmp/run/
cd /tmp/run
echo "== $(uname -r); $(stat -fc %T /sys/fs/cgroup); $(nproc) cpus; load $(cut -d' ' -f1 /proc/loadavg)"
python3 bench/start_latency.py --breakdown "${1:-300}"
python3 bench/start_latency.py --starts "${1:-300}" --docker-runs 0
python3 bench/start_latency.py --breakdown "${1:-300}"
