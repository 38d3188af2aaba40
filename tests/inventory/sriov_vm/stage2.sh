#!/bin/sh
# SR-IOV inventory VM, stage 2 (PID 1 after the kernel lab's /init switched to the host root).
# Loads the nvme and e1000e drivers, then runs tests.inventory.sriov_vm.guest, which writes its
# findings to the shared run folder; the exit status goes out through isa-debug-exit.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mkdir -p /dev/pts /dev/shm /run/netns
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        lab.python=*) PYTHON=${arg#lab.python=} ;;
        lab.repo=*) REPO=${arg#lab.repo=} ;;
        lab.run=*) RUN=${arg#lab.run=} ;;
    esac
done
modprobe nvme 2>&1
modprobe e1000e 2>&1
modprobe vfio-pci 2>&1
modprobe bonding 2>&1
echo "SRIOV-VM-STAGE2"
cd "$REPO" && "$PYTHON" -m tests.inventory.sriov_vm.guest "$RUN"
rc=$?
echo "SRIOV-VM-EXIT rc=$rc"
printf "\\$(printf %o $((rc & 127)))" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
echo o > /proc/sysrq-trigger
sleep 10
