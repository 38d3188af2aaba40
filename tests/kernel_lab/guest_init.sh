#!/bin/busybox sh
# Kernel lab: /init of the initramfs (PID 1 before switch_root).
# Loads the virtio/9p/overlay modules, mounts the host root read-only over 9p under a tmpfs
# overlay, shares the run folder read-write at its host path, exposes the guest kernel's
# modules at /usr/lib/modules/<release>, then execs the stage-2 script named on the cmdline.
/bin/busybox mkdir -p /proc /sys /dev
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s /bin
export PATH=/bin

die() {
    echo "LAB-INIT-FAIL: $*"
    # isa-debug-exit: qemu exits with (0x7f << 1) | 1 = 255
    printf '\177' | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
    echo o > /proc/sysrq-trigger
    sleep 5
    exit 1
}

for m in $(cat /modules.order.lab); do
    insmod "/mods/$m.ko" || die "insmod $m"
done

STAGE2=; RUN=; MODULES=
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        lab.stage2=*) STAGE2=${arg#lab.stage2=} ;;
        lab.run=*) RUN=${arg#lab.run=} ;;
        lab.modules=*) MODULES=${arg#lab.modules=} ;;
    esac
done
[ -n "$STAGE2" ] || die "no lab.stage2= on the kernel command line"

# the virtio 9p device can appear a moment after its module loads
n=0
until mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /lower 2>/dev/null; do
    n=$((n + 1)); [ $n -gt 50 ] && die "mount 9p hostroot"; sleep 0.1
done
mount -t tmpfs -o mode=0755 tmpfs /rw || die "tmpfs"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
    || die "overlay"
mount -t tmpfs -o mode=0755 tmpfs /newroot/run
# a fresh /tmp, unless the project itself lives under /tmp (a CI clone may): then the
# overlay's writable view of the host /tmp must stay visible
case "$STAGE2" in
    /tmp/*) ;;
    *) mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp ;;
esac
if [ -n "$RUN" ]; then
    mkdir -p "/newroot$RUN"
    mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=262144 labrun "/newroot$RUN" \
        || die "mount 9p labrun"
fi
if [ -n "$MODULES" ]; then
    release=$(uname -r)
    mkdir -p "/newroot/usr/lib/modules/$release"
    mount --bind "/newroot$MODULES" "/newroot/usr/lib/modules/$release" || die "bind modules"
fi
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh "$STAGE2"
