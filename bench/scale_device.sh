#!/usr/bin/env bash
# bench/cluster_scale.py on a lent quiet machine (the `device` tool: 16 cores, so the master
# has a core of its own and the simulated fleet others): issue 26's idle and burst goals.
# Dependencies travel as wheels in .whl/ as for bench/gpu_device.sh (which says how to make
# them); the bench runs from a copy outside the checkout, whose ./tcluster folder would shadow
# the installed package, with a venv whose bin/ holds tcl-master (testkit/loadgen/master.py
# starts the one beside sys.executable).
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m venv --without-pip --system-site-packages /tmp/v || exit 1
for b in tcl tcl-master tcl-agent; do ln -sf /tmp/site/bin/$b /tmp/v/bin/$b; done
mkdir -p /tmp/run && cp -r bench testkit /tmp/run/ && cd /tmp/run
echo "== $(nproc) cpus; load $(cut -d' ' -f1 /proc/loadavg); $(python3 --version)"
run() { echo "\$ cluster_scale.py $*"; /tmp/v/bin/python bench/cluster_scale.py --fairness mch --placement anbf "$@"; }
for phase in ${PHASES:-idle burst churn}; do
    case $phase in
        idle) run --agents 10000 --processes 6 --phases idle ;;
        burst) run --agents 1000 --processes 4 --tasks-per-agent 50 --jobs 50 --phases burst ;;
        churn) run --agents 1000 --processes 4 --phases churn --churn-s 30 ;;
    esac
done
