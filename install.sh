#!/bin/sh
# install.sh: install tcluster on a node, join it to the cluster and start its agent.
#
#   sh install.sh [PACKAGE.deb] --master HOST:PORT --token TOKEN [--node NAME] [--skip-preflight]
#
# PACKAGE.deb: the package to install (`make deb` builds it); without one, the newest
# tcluster_*.deb beside this script or in the current directory, else the tcluster package
# already installed (this script is also /opt/tcluster/install.sh). Nothing is downloaded.
# --master/--token (or $TCL_MASTER/$TCL_JOIN_TOKEN): the master's client address and a token from
# `tcl-master join-token create`; the join is skipped on a node that already joined.
# Then the preflight (`tcl doctor`: cgroups, kernel features, the task supervisor, the
# master's ports and clock) must pass, and the tcl-agent unit is enabled and started.
# Every failure stops the script with the reason, on stderr, and a non-zero exit.
set -eu

STATE_DIR=/var/lib/tcluster/agent
CONFIG=/etc/tcluster/agent.toml
MASTER=${TCL_MASTER:-}
TOKEN=${TCL_JOIN_TOKEN:-}
NODE=
PACKAGE=
PREFLIGHT=yes

say() { echo "install.sh: $*" >&2; }
die() { echo "install.sh: error: $*" >&2; exit 1; }

usage() {
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --master) [ $# -ge 2 ] || die "--master needs HOST:PORT"; MASTER=$2; shift 2 ;;
        --token) [ $# -ge 2 ] || die "--token needs a token"; TOKEN=$2; shift 2 ;;
        --node) [ $# -ge 2 ] || die "--node needs a name"; NODE=$2; shift 2 ;;
        --skip-preflight) PREFLIGHT=no; shift ;;
        -h|--help) usage 0 ;;
        -*) say "unknown option $1"; usage 2 ;;
        *) [ -z "$PACKAGE" ] || die "one package at a time (got $PACKAGE and $1)"; PACKAGE=$1; shift ;;
    esac
done

[ "$(id -u)" = 0 ] || die "run as root (it installs a package and a systemd unit)"
command -v dpkg >/dev/null || die "dpkg not found: this script installs the Debian package"

find_package() {
    here=$(cd "$(dirname "$0")" && pwd)
    for dir in "$here" "$(pwd)"; do
        found=$(ls -t "$dir"/tcluster_*.deb 2>/dev/null | head -n 1 || true)
        if [ -n "$found" ]; then echo "$found"; return; fi
    done
}

install_package() {
    [ -n "$PACKAGE" ] || PACKAGE=$(find_package)
    if [ -z "$PACKAGE" ]; then
        dpkg-query -W -f='${Status}' tcluster 2>/dev/null | grep -q "install ok installed" || \
            die "no package given, none (tcluster_*.deb) beside this script or here, and tcluster is not installed"
        say "using the installed tcluster $(dpkg-query -W -f='${Version}' tcluster)"
        return
    fi
    [ -f "$PACKAGE" ] || die "$PACKAGE: no such file"
    say "installing $PACKAGE"
    # --force-confold: an upgrade keeps the operator's /etc/tcluster files without asking.
    DEBIAN_FRONTEND=noninteractive dpkg --force-confold -i "$PACKAGE" || \
        die "dpkg -i $PACKAGE failed (missing python3 3.11? see the messages above)"
}

join_cluster() {
    if [ -f "$STATE_DIR/joined.json" ]; then
        say "this node already joined ($STATE_DIR/joined.json); not joining again"
        return
    fi
    [ -n "$MASTER" ] || die "--master HOST:PORT is needed to join (or \$TCL_MASTER)"
    [ -n "$TOKEN" ] || die "--token is needed to join: on the master, tcl-master join-token create (or \$TCL_JOIN_TOKEN)"
    set -- --master "$MASTER" --token "$TOKEN" --state-dir "$STATE_DIR"
    [ -z "$NODE" ] || set -- "$@" --node "$NODE"
    tcl-agent join "$@" || die "the join failed (the reason is above); a token is single-use and expires"
}

preflight() {
    if [ "$PREFLIGHT" = no ]; then say "preflight skipped (--skip-preflight)"; return; fi
    tcl doctor --config "$CONFIG" || die "the preflight found problems (each FAIL line above says the fix); \
fix them and run this script again, or pass --skip-preflight"
}

start_agent() {
    if [ ! -d /run/systemd/system ]; then
        die "systemd is not running here: start the agent yourself: tcl-agent --config $CONFIG"
    fi
    # Type=notify: this returns once the agent says READY=1, or fails if it does not.
    if ! systemctl enable --now tcl-agent.service; then
        journalctl -u tcl-agent.service -n 30 --no-pager >&2 || true
        die "tcl-agent did not start (its journal is above)"
    fi
    say "tcl-agent is running: systemctl status tcl-agent; settings in $CONFIG"
}

install_package
join_cluster
preflight
start_agent
