#!/bin/sh
# install.sh: install tcluster on a node, join it to the cluster and start its agent.
#
#   sh install.sh [PACKAGE.deb ...] --master HOST:PORT --token-file FILE|- [--node NAME] [--skip-preflight]
#
# PACKAGE.deb: the packages to install (`make deb` builds them: tcluster, and tcluster-master
# where a master runs; give both there, so that they upgrade together), named explicitly;
# without one, the tcluster package already installed (this script is also /opt/tcluster/install.sh).
# Nothing is downloaded, and no .deb is picked up from any directory by name.
# --master (or $TCL_MASTER): the master's client address; --token-file (- reads stdin; or
# $TCL_JOIN_TOKEN): a token from `tcl-master join-token create`, handed to the join on stdin,
# never on a command line (--token TOKEN still works, visible in ps); the join is skipped
# on a node that already joined.
# Then the preflight (`tcl doctor`: cgroups, kernel features, the task supervisor, the
# master's ports and clock) must pass, and the tcl-agent unit is enabled and started.
# Every failure stops the script with the reason, on stderr, and a non-zero exit.
set -eu

STATE_DIR=${TCL_INSTALL_STATE_DIR:-/var/lib/tcluster/agent}   # overridden by tests only
CONFIG=/etc/tcluster/agent.toml
MASTER=${TCL_MASTER:-}
TOKEN=${TCL_JOIN_TOKEN:-}
TOKEN_FILE=
NODE=
PACKAGE=
PREFLIGHT=yes

say() { echo "install.sh: $*" >&2; }
die() { echo "install.sh: error: $*" >&2; exit 1; }

usage() {
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --master) [ $# -ge 2 ] || die "--master needs HOST:PORT"; MASTER=$2; shift 2 ;;
        --token) [ $# -ge 2 ] || die "--token needs a token"; TOKEN=$2; shift 2 ;;
        --token-file) [ $# -ge 2 ] || die "--token-file needs a file (or - for stdin)"; TOKEN_FILE=$2; shift 2 ;;
        --node) [ $# -ge 2 ] || die "--node needs a name"; NODE=$2; shift 2 ;;
        --skip-preflight) PREFLIGHT=no; shift ;;
        -h|--help) usage 0 ;;
        -*) say "unknown option $1"; usage 2 ;;
        *) case "$1" in *" "*) die "$1: a package path with a space is not supported" ;; esac
           PACKAGE="${PACKAGE:+$PACKAGE }$1"; shift ;;
    esac
done

[ "$(id -u)" = 0 ] || die "run as root (it installs a package and a systemd unit)"
command -v dpkg >/dev/null || die "dpkg not found: this script installs the Debian package"

install_package() {
    if [ -z "$PACKAGE" ]; then
        dpkg-query -W -f='${Status}' tcluster 2>/dev/null | grep -q "install ok installed" || \
            die "no package given and tcluster is not installed: sh install.sh ./tcluster_VERSION_all.deb ..."
        say "using the installed tcluster $(dpkg-query -W -f='${Version}' tcluster)"
        return
    fi
    for deb in $PACKAGE; do
        [ -f "$deb" ] || die "$deb: no such file"
        case "$deb" in
            *.deb) ;;
            *) die "$deb: not a .deb (give the package file that make deb built)" ;;
        esac
    done
    say "installing $PACKAGE"
    # --force-confold: an upgrade keeps the operator's /etc/tcluster files without asking.
    # One dpkg run: tcluster-master depends on tcluster of its own version.
    # shellcheck disable=SC2086  # the paths, split on the spaces put between them above
    DEBIAN_FRONTEND=noninteractive dpkg --force-confold -i $PACKAGE || \
        die "dpkg -i $PACKAGE failed (missing python3 3.11? see the messages above)"
}

join_cluster() {
    if [ -f "$STATE_DIR/joined.json" ]; then
        say "this node already joined ($STATE_DIR/joined.json); not joining again"
        return
    fi
    [ -n "$MASTER" ] || die "--master HOST:PORT is needed to join (or \$TCL_MASTER)"
    if [ -n "$TOKEN_FILE" ] && [ "$TOKEN_FILE" != - ]; then
        [ -r "$TOKEN_FILE" ] || die "--token-file $TOKEN_FILE: cannot read it"
        TOKEN=$(head -c 4096 "$TOKEN_FILE")
    elif [ "$TOKEN_FILE" = - ]; then
        TOKEN=$(head -c 4096)
    fi
    [ -n "$TOKEN" ] || die "a join token is needed: --token-file FILE (or - for stdin); on the master: \
tcl-master join-token create (or \$TCL_JOIN_TOKEN)"
    set -- --master "$MASTER" --token-file - --state-dir "$STATE_DIR"
    [ -z "$NODE" ] || set -- "$@" --node "$NODE"
    # printf is a shell builtin: the token reaches the join on stdin, in no process's argv.
    printf '%s\n' "$TOKEN" | tcl-agent join "$@" || \
        die "the join failed (the reason is above); a token is single-use and expires"
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
