#!/bin/busybox sh
# /init of the QEMU test guests (vm-tests/src/qemu/init.sh, built into every initramfs).
#
# Kernel command line (set by the harness):
#   llc.name=NAME llc.role=task|service llc.ip=A.B.C.D/N [llc.mtu=MTU]
# fw_cfg file opt/llc/script: the test script, run with `sh -e` in /tmp.
#
# Protocol on the serial console (ttyS0; the harness reads QEMU's stdout and
# writes to its stdin):
#   "LLC-VM-UP NAME"    printed once modules are loaded and eth0 is configured.
#   task:    waits for a line "go" on the console, then runs the script.
#   service: runs the script at once, in its own session; a line "stop" on the
#            console sends SIGTERM to that session.
#   "LLC-VM-RESULT RC"  printed when the script ended with status RC; the same
#            RC is written to the isa-debug-exit port (0xf4), so QEMU exits
#            with status RC*2+1 (its low 8 bits: RC's low 7 bits survive).
#            Failures of this file itself use RC 199.
/bin/busybox --install -s
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
export HOME=/root

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp

say() { echo "llc-vm: $*"; }

# Reports RC through both channels and stops the machine.
finish() {
    echo "LLC-VM-RESULT $1"
    printf "\\$(printf '%03o' "$1")" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
    # Only reached without the isa-debug-exit device.
    poweroff -f
}

fail() {
    say "init failed: $*"
    finish 199
}

VM_NAME=vm VM_ROLE=task VM_IP= VM_MTU=
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        llc.name=*) VM_NAME=${arg#llc.name=} ;;
        llc.role=*) VM_ROLE=${arg#llc.role=} ;;
        llc.ip=*) VM_IP=${arg#llc.ip=} ;;
        llc.mtu=*) VM_MTU=${arg#llc.mtu=} ;;
    esac
done

for m in $(cat /lib/modules/order); do
    insmod "/lib/modules/$m.ko" || fail "insmod $m"
done

i=0
while [ ! -e /sys/class/net/eth0 ]; do
    i=$((i + 1))
    [ $i -le 100 ] || fail "no eth0 after 10 s (is the virtio-net-pci device there?)"
    usleep 100000
done
ip link set lo up
if [ -n "$VM_MTU" ]; then
    ip link set eth0 mtu "$VM_MTU" || fail "cannot set MTU $VM_MTU on eth0"
fi
if [ -n "$VM_IP" ]; then
    ip addr add "$VM_IP" dev eth0 || fail "cannot add $VM_IP to eth0"
fi
ip link set eth0 up || fail "cannot bring eth0 up"

script=/sys/firmware/qemu_fw_cfg/by_name/opt/llc/script/raw
cp "$script" /tmp/test.sh 2>/dev/null || fail "no test script in fw_cfg (opt/llc/script)"
cd /tmp
echo "LLC-VM-UP $VM_NAME"

if [ "$VM_ROLE" = service ]; then
    setsid sh -e /tmp/test.sh &
    pid=$!
    (
        while read -r line; do
            case "$line" in
                *stop*)
                    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
                    break
                    ;;
            esac
        done
    ) </dev/console &
    wait "$pid"
    rc=$?
else
    while read -r line; do
        case "$line" in *go*) break ;; esac
    done
    sh -e /tmp/test.sh
    rc=$?
fi
finish "$rc"
