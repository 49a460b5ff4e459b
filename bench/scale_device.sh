#!/usr/bin/env bash
# bench/cluster_scale.py on a lent quiet machine (the `device` tool: 16 cores, so the master
# has a core of its own and the simulated fleet others): issue 26's idle and burst goals.
# Dependencies travel as wheels in .whl/ as for bench/gpu_device.sh (which says how to make
# them); the bench runs from a copy outside the checkout, whose ./tcluster folder would shadow
# the installed package; tcl-master is linked beside the machine's python3 (testkit/loadgen/
# master.py starts the one beside sys.executable; python3 there is itself a venv's, so a new
# venv on top would lose its packages). The machine is lent and discarded afterwards.
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
# bench/etcd_local.py imports testkit.etcd_cluster (for free_ports), whose fixtures need
# pytest's decorators at import; the lent machine has no pytest: a stub that only decorates.
if ! python3 -c "import pytest" 2>/dev/null; then
    mkdir -p /tmp/stub/pytest
    printf 'def fixture(*a, **k):\n    return a[0] if a and callable(a[0]) else (lambda f: f)\n\n\nclass TempPathFactory:\n    pass\n\n\ndef skip(reason):\n    raise RuntimeError(reason)\n' > /tmp/stub/pytest/__init__.py
    export PYTHONPATH=/tmp/site:/tmp/stub
fi
PYBIN=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
for b in tcl tcl-master tcl-agent; do ln -sf /tmp/site/bin/$b "$PYBIN/$b"; done
mkdir -p /tmp/run && cp -r bench testkit /tmp/run/ && cd /tmp/run
echo "== $(nproc) cpus; load $(cut -d' ' -f1 /proc/loadavg); $(python3 --version)"
run() { echo "\$ cluster_scale.py $*"; python3 bench/cluster_scale.py --fairness mch --placement anbf "$@"; }
for phase in ${PHASES:-idle burst churn}; do
    case $phase in
        idle) run --agents 10000 --processes 6 --phases idle ;;
        burst) run --agents 1000 --processes 4 --tasks-per-agent 50 --jobs 50 --phases burst ;;
        churn) run --agents 1000 --processes 4 --phases churn --churn-s 30 ;;
    esac
done
