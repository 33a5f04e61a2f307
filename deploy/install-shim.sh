#!/bin/sh
# Installs podward-shim on a host: the binary, its systemd socket + service units, and a commented
# /etc/default/podward-shim. Idempotent: a file whose content is already in place is left alone (and
# reported "unchanged"); a changed file is replaced atomically (write beside it, then rename).
#
# Upgrades only when asked. Each build is kept in a versioned directory of its own,
# BIN_DIR/podward-shim.d/<sha256 prefix>/ (the binary and the units it came with), and
# BIN_DIR/podward-shim is a link to the active one. The first install activates its build. Later,
# a different build is only *staged* beside the running one: the link, the units and the running
# shim stay as they are — so a crash, an OOM kill or a reboot restarts the build that was running,
# under the units it was started with, never an unplanned upgrade (the chart's installer runs at
# every pod (re)creation, `helm rollback` included). `--restart` is the explicit step: it flips the
# link to the staged build, installs its units, reloads systemd and restarts the shim (the socket
# unit too when it changed). The three newest builds are kept (the active, the staged, the one
# before) for a quick `--restart` back.
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
  --restart        Activate the staged build (or the one given): flip BIN_DIR/podward-shim to it,
                   install its units, `systemctl daemon-reload`, and restart podward-shim.service if
                   anything changed (its socket stays open, so kubelet's calls wait in its backlog).
                   A changed socket unit is applied too: the service is stopped, the socket
                   restarted, the service started (kubelet's calls in that moment are refused and
                   retried). Without it, a new build is only staged.
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
	if [ -e "$DEST_BIN/podward-shim" ] || [ -L "$DEST_BIN/podward-shim" ]; then
		rm -f "$DEST_BIN/podward-shim"
		echo "removed $DEST_BIN/podward-shim"
	fi
	if [ -d "$DEST_BIN/podward-shim.d" ]; then
		rm -rf "$DEST_BIN/podward-shim.d"
		echo "removed $DEST_BIN/podward-shim.d"
	fi
	if use_systemctl; then
		systemctl daemon-reload
	fi
	echo "install-shim: removed (left $DEST_DEFAULT/podward-shim, your settings, in place)"
	exit 0
fi

[ -x "$BINARY" ] || die "no executable shim binary at $BINARY (build it: deploy/build-release.sh)"
for f in $UNIT_FILES; do
	[ -f "$UNITS/$f" ] || die "missing $UNITS/$f"
done

# The build's identity: the binary and its units together.
BUILD=$(cat "$BINARY" "$UNITS/podward-shim.socket" "$UNITS/podward-shim.service" | sha256sum | cut -c1-16)
BUILDS="$DEST_BIN/podward-shim.d"
LINK="$DEST_BIN/podward-shim"

# A host installed before builds were versioned has a plain file: keep it as a build of its own
# (renamed, so a shim running it keeps running), then link to it.
if [ -f "$LINK" ] && [ ! -L "$LINK" ]; then
	legacy=$(sha256sum <"$LINK" | cut -c1-16)
	mkdir -p "$BUILDS/$legacy/systemd"
	for f in $UNIT_FILES; do
		if [ -f "$DEST_UNITS/$f" ]; then cp "$DEST_UNITS/$f" "$BUILDS/$legacy/systemd/$f"; fi
	done
	mv -f "$LINK" "$BUILDS/$legacy/podward-shim"
	ln -s "podward-shim.d/$legacy/podward-shim" "$LINK"
	echo "kept the installed binary as build $legacy"
fi

# Stage this build (unchanged when already there).
install_file "$BINARY" "$BUILDS/$BUILD/podward-shim" 0755
for f in $UNIT_FILES; do
	install_file "$UNITS/$f" "$BUILDS/$BUILD/systemd/$f" 0644
done

ACTIVE=
if [ -L "$LINK" ]; then
	ACTIVE=$(readlink "$LINK" | sed -n 's|^podward-shim\.d/\([0-9a-f]*\)/podward-shim$|\1|p')
fi

# Staging alone changes nothing that runs.
CHANGED=0
SOCKET_CHANGED=0
STAGED_ONLY=0
activate() {
	tmp="$LINK.podward-new.$$"
	ln -s "podward-shim.d/$BUILD/podward-shim" "$tmp"
	mv -f "$tmp" "$LINK"
	echo "activated build $BUILD: $LINK"
	CHANGED=1
	for f in $UNIT_FILES; do
		if ! { [ -f "$DEST_UNITS/$f" ] && cmp -s "$BUILDS/$BUILD/systemd/$f" "$DEST_UNITS/$f"; }; then
			[ "$f" = podward-shim.socket ] && [ -f "$DEST_UNITS/$f" ] && SOCKET_CHANGED=1
		fi
		install_file "$BUILDS/$BUILD/systemd/$f" "$DEST_UNITS/$f" 0644
	done
}

if [ -z "$ACTIVE" ]; then
	# First install: nothing runs yet.
	activate
elif [ "$ACTIVE" = "$BUILD" ]; then
	echo "build $BUILD is the active one"
	# Units removed by hand are put back (they are this build's).
	for f in $UNIT_FILES; do
		[ -f "$DEST_UNITS/$f" ] || install_file "$BUILDS/$BUILD/systemd/$f" "$DEST_UNITS/$f" 0644
	done
elif [ "$RESTART" -eq 1 ]; then
	echo "switching from build $ACTIVE to build $BUILD"
	activate
else
	STAGED_ONLY=1
	echo "staged build $BUILD beside the active build $ACTIVE; nothing else changed."
	echo "  The running shim, and any restart of it (a crash, a reboot), stays on build $ACTIVE."
	echo "  To switch: install-shim.sh --restart (with this same binary), on the host."
fi

# Keep the active build, this one, and the newest other.
if [ -d "$BUILDS" ]; then
	current=$(readlink "$LINK" 2>/dev/null | sed -n 's|^podward-shim\.d/\([0-9a-f]*\)/podward-shim$|\1|p')
	# shellcheck disable=SC2012 # build names are hex: ls is safe here
	ls -t "$BUILDS" | while read -r b; do
		case "$b" in "$current" | "$BUILD") continue ;; esac
		if [ -n "${kept:-}" ]; then
			rm -rf "${BUILDS:?}/$b"
			echo "removed old build $b"
		fi
		kept=1
	done
fi

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
		if [ "$SOCKET_CHANGED" -eq 1 ]; then
			# A socket unit applies only when the socket is re-created.
			systemctl stop podward-shim.service
			systemctl restart podward-shim.socket
			systemctl start podward-shim.service
			echo "restarted podward-shim.socket and podward-shim.service (the socket unit changed)"
		else
			systemctl restart podward-shim.service
			echo "restarted podward-shim.service (its sockets stayed open)"
		fi
	fi
elif [ "$CHANGED" -eq 1 ]; then
	echo "install-shim: systemctl not run; on the host run:"
	echo "  systemctl daemon-reload && systemctl enable --now podward-shim.socket podward-shim.service"
	echo "  (or, to switch a running shim: systemctl daemon-reload && systemctl restart podward-shim.service)"
fi
if [ "$STAGED_ONLY" -eq 1 ]; then
	echo "install-shim: staged build $BUILD (active: $ACTIVE)"
elif [ "$CHANGED" -eq 0 ]; then
	echo "install-shim: nothing changed"
else
	echo "install-shim: done; kubelet is unchanged (see docs/operations.md to point it at unix:///run/podward/cri.sock)"
fi
