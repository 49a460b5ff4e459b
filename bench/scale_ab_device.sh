#!/usr/bin/env bash
# bench/cluster_scale.py side by side on a lent quiet machine (the `device` tool, 16 cores):
# the previous revision, then this checkout, one phase at a time, as bench/at_revision.py
# does here. Carry .whl (ignored by git), laid out as
#   .whl/deps/       the dependency wheels (bench/gpu_device.sh says how to make them)
#   .whl/then/       the previous revision's tcluster wheel (pip wheel --no-deps of a `git archive`)
#   .whl/then-tree/  that revision's bench/ and testkit/ (its own bench and load generator)
#   .whl/now/        this checkout's tcluster wheel
# PHASES picks among burst and churn (default both).
set -u
cd "$(dirname "$0")/.."
exec > >(tee "${OUT:-/tmp}/scale_ab.txt") 2>&1
install() {   # $1: then|now -> /tmp/site-$1 (that wheel and the deps), venv /tmp/v-$1 beside it
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-$1 \
        .whl/deps/*.whl .whl/$1/*.whl || exit 1
    python3 -m venv --without-pip --system-site-packages /tmp/v-$1 || exit 1
    for b in tcl tcl-master tcl-agent; do ln -sf /tmp/site-$1/bin/$b /tmp/v-$1/bin/$b; done
    mkdir -p /tmp/run-$1
    if [ "$1" = then ]; then cp -r .whl/then-tree/bench .whl/then-tree/testkit /tmp/run-$1/; else cp -r bench testkit /tmp/run-$1/; fi
}
install then; install now
echo "== $(nproc) cpus; $(python3 --version)"
run() {   # $1: then|now, then cluster_scale's arguments
    local rev=$1; shift
    echo "=== $rev: cluster_scale.py $*  (load average $(cut -d' ' -f1 /proc/loadavg))"
    (cd /tmp/run-$rev && PYTHONPATH=/tmp/site-$rev /tmp/v-$rev/bin/python bench/cluster_scale.py --fairness mch --placement anbf "$@")
}
for phase in ${PHASES:-burst churn}; do
    for rev in then now; do
        case $phase in
            burst) run $rev --agents 1000 --processes 4 --tasks-per-agent 50 --jobs 50 --phases burst ;;
            churn) run $rev --agents 1000 --processes 4 --phases churn --churn-s 20 ;;
        esac
    done
done
