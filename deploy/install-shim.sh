#!/bin/sh
# Installs podward-shim on a host: the binary, its systemd socket + service units, and a commented
# /etc/default/podward-shim. Idempotent: a file whose content is already in place is left alone (and
# reported "unchanged"); a changed file is replaced atomically (write beside it, then rename), so a
# running shim keeps executing its old binary until it is restarted.
#
# It never changes kubelet's configuration: repointing kubelet at the shim is a separate, reviewed step
# (docs/operations.md, "Point kubelet at the shim").
#
# POSIX sh: it runs on the host and in the chart's installer image (busybox).
set -eu

usage() {
	cat <<'EOF'
Usage: install-shim.sh [OPTIONS]

Install (or update, or remove) podward-shim and its systemd units on this host.

Options:
  --root=DIR       Install under DIR instead of / (the chart's installer uses /host).      [default: /]
  --source=DIR     Where the payload is: DIR/podward-shim and DIR/systemd/*.
                   [default: the directory of this script]
  --binary=FILE    The podward-shim binary to install.              [default: SOURCE/podward-shim]
  --units=DIR      Directory holding podward-shim.socket and podward-shim.service.
                   [default: SOURCE/systemd]
  --bin-dir=DIR    Host directory of the binary.                             [default: /usr/local/bin]
  --unit-dir=DIR   Host directory of the units.                         [default: /etc/systemd/system]
  --enable         After installing, run `systemctl daemon-reload` and
                   `systemctl enable --now podward-shim.socket podward-shim.service`.
  --restart        If the binary or a unit changed, restart podward-shim.service (the socket stays
                   open, so kubelet's calls wait in its backlog instead of failing).
  --no-systemctl   Never run systemctl, even when systemd runs (the chart's installer sets this).
  --no-defaults    Do not create ROOT/etc/default/podward-shim (the chart's installer sets this: it
                   mounts only the binary and unit directories).
  --uninstall      Stop and disable the units (unless --no-systemctl) and remove the installed files.
                   Point kubelet back at containerd FIRST.
  -h, --help       Show this help.

Exit status: 0 on success (also when nothing changed), 1 on error, 2 on bad usage.
EOF
}

die() {
	echo "install-shim: $*" >&2
	exit 1
}

ROOT=/
SOURCE=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
BINARY=
UNITS=
BIN_DIR=/usr/local/bin
UNIT_DIR=/etc/systemd/system
ENABLE=0
RESTART=0
SYSTEMCTL=1
DEFAULTS=1
UNINSTALL=0

for arg in "$@"; do
	case "$arg" in
	--root=*) ROOT=${arg#*=} ;;
	--source=*) SOURCE=${arg#*=} ;;
	--binary=*) BINARY=${arg#*=} ;;
	--units=*) UNITS=${arg#*=} ;;
	--bin-dir=*) BIN_DIR=${arg#*=} ;;
	--unit-dir=*) UNIT_DIR=${arg#*=} ;;
	--enable) ENABLE=1 ;;
	--restart) RESTART=1 ;;
	--no-systemctl) SYSTEMCTL=0 ;;
	--no-defaults) DEFAULTS=0 ;;
	--uninstall) UNINSTALL=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		echo "install-shim: unknown argument: $arg" >&2
		usage >&2
		exit 2
		;;
	esac
done

: "${BINARY:=$SOURCE/podward-shim}"
: "${UNITS:=$SOURCE/systemd}"
ROOT=${ROOT%/}
DEST_BIN=$ROOT$BIN_DIR
DEST_UNITS=$ROOT$UNIT_DIR
DEST_DEFAULT=$ROOT/etc/default
UNIT_FILES="podward-shim.socket podward-shim.service"

# systemctl only acts on the running system, so only when installing into / and systemd is PID 1.
use_systemctl() {
	[ "$SYSTEMCTL" -eq 1 ] && [ -z "$ROOT" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1
}

CHANGED=0

# install_file SRC DEST MODE: copy only if different, atomically.
install_file() {
	src=$1
	dest=$2
	mode=$3
	[ -f "$src" ] || die "missing $src"
	if [ -f "$dest" ] && cmp -s "$src" "$dest"; then
		chmod "$mode" "$dest"
		echo "unchanged $dest"
		return 0
	fi
	mkdir -p "$(dirname -- "$dest")"
	tmp="$dest.podward-new.$$"
	trap 'rm -f "$tmp"' EXIT INT TERM
	cp "$src" "$tmp"
	chmod "$mode" "$tmp"
	mv -f "$tmp" "$dest"
	trap - EXIT INT TERM
	echo "installed $dest"
	CHANGED=1
}

if [ "$UNINSTALL" -eq 1 ]; then
	if use_systemctl; then
		systemctl disable --now podward-shim.service podward-shim.socket || true
	fi
	for f in $UNIT_FILES; do
		if [ -e "$DEST_UNITS/$f" ]; then
			rm -f "$DEST_UNITS/$f"
			echo "removed $DEST_UNITS/$f"
		fi
	done
	if [ -e "$DEST_BIN/podward-shim" ]; then
		rm -f "$DEST_BIN/podward-shim"
		echo "removed $DEST_BIN/podward-shim"
	fi
	if use_systemctl; then
		systemctl daemon-reload
	fi
	echo "install-shim: removed (left $DEST_DEFAULT/podward-shim, your settings, in place)"
	exit 0
fi

[ -x "$BINARY" ] || die "no executable shim binary at $BINARY (build it: deploy/build-release.sh)"
install_file "$BINARY" "$DEST_BIN/podward-shim" 0755
for f in $UNIT_FILES; do
	install_file "$UNITS/$f" "$DEST_UNITS/$f" 0644
done

# Operator settings: created once, never overwritten.
if [ "$DEFAULTS" -eq 0 ]; then
	:
elif [ ! -e "$DEST_DEFAULT/podward-shim" ]; then
	mkdir -p "$DEST_DEFAULT"
	cat >"$DEST_DEFAULT/podward-shim" <<'EOF'
# Settings of podward-shim (read by podward-shim.service). Every flag has a variable:
#   PODWARD_SHIM_<FLAG>, e.g.
# PODWARD_SHIM_LOG_LEVEL=info
# PODWARD_SHIM_ADMIN_ADDR=127.0.0.1:9641
# PODWARD_SHIM_SUBSCRIBER_QUEUE=1024
# PODWARD_SHIM_CONFIG=/etc/podward/shim.toml
EOF
	chmod 0644 "$DEST_DEFAULT/podward-shim"
	echo "installed $DEST_DEFAULT/podward-shim"
else
	echo "unchanged $DEST_DEFAULT/podward-shim (operator settings are never overwritten)"
fi

if use_systemctl; then
	systemctl daemon-reload
	if [ "$ENABLE" -eq 1 ]; then
		systemctl enable --now podward-shim.socket podward-shim.service
	fi
	if [ "$RESTART" -eq 1 ] && [ "$CHANGED" -eq 1 ] && systemctl is-active -q podward-shim.service; then
		systemctl restart podward-shim.service
		echo "restarted podward-shim.service (its sockets stayed open)"
	fi
else
	echo "install-shim: systemctl not run; on the host run:"
	echo "  systemctl daemon-reload && systemctl enable --now podward-shim.socket podward-shim.service"
fi
if [ "$CHANGED" -eq 0 ]; then
	echo "install-shim: nothing changed"
else
	echo "install-shim: done; kubelet is unchanged (see docs/operations.md to point it at unix:///run/podward/cri.sock)"
fi
