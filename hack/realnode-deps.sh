#!/bin/sh
# Installs what the local cluster's real node takes from Debian's packages, when it is missing:
# containerd (with its CRI plugin) and ctr, runc, the CNI plugins, iptables (kube-proxy's rules),
# and busybox and debootstrap for the images; and the headless Chromium that the web console's
# tests drive.
set -eu
missing=""
for part in /usr/bin/containerd:containerd /usr/bin/ctr:containerd /usr/sbin/runc:runc \
	/usr/lib/cni/bridge:containernetworking-plugins /usr/lib/cni/host-local:containernetworking-plugins \
	/usr/lib/cni/loopback:containernetworking-plugins /usr/sbin/iptables-restore:iptables /usr/bin/busybox:busybox-static \
	/usr/sbin/debootstrap:debootstrap /usr/bin/chromium-headless-shell:chromium-headless-shell; do
	[ -e "${part%%:*}" ] || missing="$missing ${part#*:}"
done
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$missing postgresql"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "the real node needs Debian's packages$missing; install them as root: apt-get install$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends $missing || { apt-get update && apt-get install -y --no-install-recommends $missing; }
