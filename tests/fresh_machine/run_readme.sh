#!/bin/sh
# Runs inside `unshare --mount --pid --fork --propagation private` (its own mount and PID
# namespaces: every mount below, the lab's /run/netns entries and any process left behind
# go when it ends). Usage: run_readme.sh BASE_ROOTFS WORKDIR BUNDLE [NAME=VALUE...]
# The NAME=VALUE pairs are the site's network settings (CA bundle path, proxies), passed on.
# Puts a writable overlay on the cached base, gives it /proc, /sys, /dev, an empty /run and
# the host's network settings (DNS; its CA bundle and pip.conf: this site's egress proxy
# re-signs TLS with its own CA, which a newcomer's machine on it trusts too), then as root with an empty HOME and a bare environment runs what
# the README says: git clone, then make lab.
set -eu
base=$1 work=$2 bundle=$3
shift 3
mkdir -p "$work/upper" "$work/work" "$work/root"
mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/work" "$work/root"
root=$work/root
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
rm -rf "$root/root" && mkdir -m 700 "$root/root"
cp "$bundle" "$root/tmp/dra-multi-network.bundle"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
if [ -f /etc/pip.conf ]; then cp -L /etc/pip.conf "$root/etc/pip.conf"; fi
exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@" \
  sh -c 'cd /root && git -c advice.detachedHead=false clone -q /tmp/dra-multi-network.bundle dra-multi-network &&
    cd dra-multi-network && make lab' </dev/null
