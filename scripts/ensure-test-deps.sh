#!/usr/bin/env bash
# Installs what the tests start for real when it is missing: the ZooKeeper
# server from Debian's `zookeeper` package (its jars in /usr/share/java), a
# Java runtime, and iptables and iproute2 for the network-fault tests
# (internal/netfault: namespaces, veth pairs, a bridge and iptables rules). Idempotent; needs root (or sudo) only when something is
# missing.
set -euo pipefail

need=()
if ! ls /usr/share/java/zookeeper*.jar >/dev/null 2>&1; then need+=(zookeeper); fi
if ! command -v java >/dev/null 2>&1; then need+=(default-jre-headless); fi
if ! command -v iptables >/dev/null 2>&1; then need+=(iptables); fi
if ! command -v ip >/dev/null 2>&1; then need+=(iproute2); fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing test dependencies: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
