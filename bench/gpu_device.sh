#!/usr/bin/env bash
# bench/gpu_check.sh on a lent GPU machine that reaches no package registry (the `device`
# tool): the dependencies travel as cp312 wheels in .whl/ (ignored by git), made here with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 ... -d .whl \
#     aetcd annotated-types cffi cryptography docker grpcio orjson protobuf pycparser \
#     pydantic pydantic_core pyroute2 typing_extensions typing-inspection   (versions of .venv)
# and tcluster as its own wheel with the task supervisor compiled in
#   .venv/bin/python -m pip wheel --no-deps --no-build-isolation -w .whl .
# The rest (numpy, scipy, aiohttp, psutil, PyYAML, prometheus_client, nvidia-ml-py) is in the
# machine's image. The check runs from a copy outside the checkout, whose ./tcluster folder
# would shadow the installed package.
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/v/bin /tmp/run/bench
# A wrapper, not a link: a venv's python reached through a link elsewhere loses its venv.
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/v/bin/python && chmod +x /tmp/v/bin/python
for b in tcl tcl-master tcl-agent; do ln -sf /tmp/site/bin/$b /tmp/v/bin/$b; done
cp -r testkit /tmp/run/ && cp bench/gpu_check.sh /tmp/run/bench/
# Tasks get PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin and no
# LD_LIBRARY_PATH: where the driver's tools and libraries live elsewhere, say so and link them.
smi=$(command -v nvidia-smi)
case "$smi" in /usr/bin/*|/usr/local/bin/*|/bin/*|/usr/sbin/*) ;; *) echo "linking $smi into /usr/local/bin"; ln -sf "$smi" /usr/local/bin/nvidia-smi;; esac
if ! ldconfig -p | grep -q 'libnvidia-ml.so.1'; then
    lib=$(dirname "$(find / -xdev -name 'libnvidia-ml.so.1' 2>/dev/null | head -1)")
    echo "adding $lib to the loader's path"; echo "$lib" > /etc/ld.so.conf.d/zz-tcl-gpu-check.conf; ldconfig
fi
python3 --version; echo "python3: $(command -v python3)"; ls -la /dev/nvidia* 2>&1 | head
VENV=/tmp/v bash /tmp/run/bench/gpu_check.sh
