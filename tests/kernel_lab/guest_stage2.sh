#!/bin/sh
# Kernel lab: PID 1 after switch_root, running from the host's root (9p, read-only + overlay).
# Runs the guest pytest session (tests.kernel_lab.guest) with the host's venv python; that
# module reports its exit status through isa-debug-exit. If python itself cannot start, report
# its status here so that the host never mistakes a broken guest for a passing one.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mkdir -p /run/netns
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        lab.python=*) PYTHON=${arg#lab.python=} ;;
        lab.repo=*) REPO=${arg#lab.repo=} ;;
        lab.run=*) RUN=${arg#lab.run=} ;;
    esac
done
echo "LAB-STAGE2 uptime=$(cut -d' ' -f1 /proc/uptime)"
cd "$REPO" && "$PYTHON" -m tests.kernel_lab.guest "$RUN"
rc=$?
echo "LAB-GUEST-PYTHON-EXIT rc=$rc"
printf "\\$(printf %o $((rc & 127)))" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
echo o > /proc/sysrq-trigger
sleep 10
