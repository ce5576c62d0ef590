#!/bin/sh
# Writes into $1 the root file system of the real node's MPI image: Debian bookworm (minbase)
# with OpenSSH, Open MPI and Python 3 (the e2e suite's real Python trainer reports its progress
# with it, through OpenSSL), set up as mpi-operator's images are, which the shipped mpi-distributed
# runtime expects: a user mpiuser (uid 1000) whose sshd runs unprivileged on port 2222 with
# ~/.sshd_config, taking the mounted private key as its host key, and an ssh client that trusts
# any host on that port. Needs root and debootstrap (hack/realnode-deps.sh).
set -eu
dir=$1
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
rm -rf "$dir"
debootstrap --variant=minbase --include=openssh-server,openssh-client,openmpi-bin,python3 \
	bookworm "$dir" "${mirror:-http://deb.debian.org/debian}" >"$dir.log" 2>&1 ||
	{ tail -20 "$dir.log" >&2; exit 1; }
chroot "$dir" useradd --create-home --uid 1000 --shell /bin/bash mpiuser
cat >"$dir/home/mpiuser/.sshd_config" <<'CONFIG'
Port 2222
PidFile /home/mpiuser/sshd.pid
HostKey /home/mpiuser/.ssh/id_rsa
StrictModes no
CONFIG
chown 1000:1000 "$dir/home/mpiuser/.sshd_config"
printf 'Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    Port 2222\n' >>"$dir/etc/ssh/ssh_config"
mkdir -p "$dir/run/sshd"
# What a container has no use for: documentation, package lists and caches, device nodes (the
# runtime makes /dev), logs.
rm -rf "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
	"$dir"/var/cache/apt/* "$dir"/var/lib/apt/lists/* "$dir"/var/log/* "$dir"/dev/* "$dir.log"
