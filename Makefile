# tcluster developer entry points. Everything runs from ./.venv, which these targets
# create and keep in step with pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PROTOS := $(wildcard proto/tcluster/v1/*.proto)
PYTEST_ARGS ?=
ARGS ?=
# -q: pip shows the build backend's output (setuptools' banners) only when the build fails
PIP    := $(BIN)/pip install -q --disable-pip-version-check

.PHONY: dev test proto venv clean deb man docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test]'
	touch $@ $(VENV)/.installed

venv: $(VENV)/.installed

## make dev [ARGS="--listen 127.0.0.1:7171 ..."]: one master and one local agent in the foreground
## (Ctrl-C stops both); ARGS are `tcl dev`'s flags (tcl dev --help).
dev: $(VENV)/.installed
	@$(BIN)/python -m tcluster.agent.shimbuild >/dev/null  # builds the task supervisor once, or says what is missing
	$(BIN)/tcl dev $(ARGS)

## make test: the whole suite (unit, component, system, vm, e2e); skips are counted and the
## 15 slowest tests are listed, so a test that grows slow is seen the day it does.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest --durations=15 $(PYTEST_ARGS)

## make proto: regenerate the checked-in gRPC/protobuf code from proto/.
proto: $(VENV)/.installed-test
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto $(PROTOS)

## make deb [VERSION=0.1.1] [OUT=dist]: dist/tcluster_<version>-1_amd64.deb (tcl, tcl-agent) and
## dist/tcluster-master_<version>-1_amd64.deb (tcl-master, tcl-gm, numpy, scipy), from
## packaging/build_deb.py: one venv under /opt/tcluster unpacked from wheels for the target's
## python3 (3.11), the task supervisor compiled in, hardened units, /etc/tcluster/*.toml as
## conffiles; install.sh inside. The builder needs setuptools >= 68 and wheel in the venv
## (a venv's bundled setuptools has no bdist_wheel): installed here, after `make dev` too.
$(VENV)/.installed-deb: $(VENV)/.installed
	$(PIP) 'setuptools>=68' wheel
	touch $@

deb: $(VENV)/.installed-deb
	$(BIN)/python packaging/build_deb.py $(if $(VERSION),--version $(VERSION)) $(if $(OUT),--out $(OUT))

## make man: tcl(1), tcl-master(8), tcl-agent(8), tcl-gm(8) generated from the parsers into
## build/man (man -l build/man/tcl.1); `make deb` installs them, with bash and zsh completion.
man: $(VENV)/.installed
	$(BIN)/python -m tcluster.cli.manpages build/man

## make docs: docs/reference/{cli,job-file,queue-file,config,metrics}.md generated from the
## parsers, the field tables, the settings and the metrics (cli/refdocs.py); tests/unit/test_docs.py
## fails while they are out of date.
docs: $(VENV)/.installed
	$(BIN)/python -m tcluster.cli.refdocs docs/reference

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
