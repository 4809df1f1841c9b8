#!/bin/busybox sh
# /init of the QEMU test guests (vm-tests/src/qemu/init.sh, built into every initramfs).
#
# Kernel command line (set by the harness):
#   llc.name=NAME llc.role=task|service llc.ip=A.B.C.D/N [llc.mtu=MTU]
# fw_cfg file opt/llc/script: the test script, run with `sh -e` in /tmp.
# fw_cfg file opt/llc/hosts: /etc/hosts naming every guest (the hostname is NAME).
# fw_cfg file opt/llc/hostroot (optional): the script runs chrooted in a root built
#   from host directories shared read-only over virtio-9p, one line each:
#     share TAG PATH     mount the 9p export TAG at PATH
#     link NAME TARGET   a symlink /NAME -> TARGET (the host's /bin -> usr/bin ...)
#   with its own /proc, /sys, /dev, /dev/pts, /dev/shm, and tmpfs on /tmp, /run,
#   /root and /var/tmp; /etc/hosts is the guest's.
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

hostname "$VM_NAME"
fw_cfg=/sys/firmware/qemu_fw_cfg/by_name/opt/llc
if [ -e $fw_cfg/hosts/raw ]; then
    cp $fw_cfg/hosts/raw /etc/hosts || fail "cannot write /etc/hosts"
fi
cp $fw_cfg/script/raw /tmp/test.sh 2>/dev/null || fail "no test script in fw_cfg (opt/llc/script)"
cd /tmp

# The command that runs the script: here, or chrooted into the root of host directories.
set -- sh -e /tmp/test.sh
if [ -e $fw_cfg/hostroot/raw ]; then
    for m in $(cat /lib/modules/hostfs-order); do
        insmod "/lib/modules/$m.ko" || fail "insmod $m"
    done
    r=/hostroot
    mkdir -p $r && mount -t tmpfs -o mode=755 root $r || fail "cannot mount the root's tmpfs"
    # The guest's own directories first: a shared directory below one of them
    # (a target directory under /tmp) is then mounted inside it, not hidden.
    mkdir -p $r/proc $r/sys $r/dev $r/tmp $r/run $r/root $r/var/tmp
    mount -t proc proc $r/proc &&
        mount -t sysfs sysfs $r/sys &&
        mount -t devtmpfs devtmpfs $r/dev &&
        mkdir -p $r/dev/pts $r/dev/shm &&
        mount -t devpts devpts $r/dev/pts &&
        mount -t tmpfs -o mode=1777 shm $r/dev/shm &&
        mount -t tmpfs -o mode=1777 tmp $r/tmp &&
        mount -t tmpfs -o mode=755 run $r/run &&
        mount -t tmpfs -o mode=700 home $r/root &&
        mount -t tmpfs -o mode=1777 vartmp $r/var/tmp ||
        fail "cannot mount /proc, /sys, /dev or the tmpfs directories in the host root"
    while read -r kind a b; do
        case "$kind" in
            share)
                mkdir -p "$r$b" || fail "mkdir $b"
                mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 \
                    "$a" "$r$b" || fail "cannot mount the host's $b (9p tag $a)"
                ;;
            link) ln -s "$b" "$r/$a" || fail "ln -s $b /$a" ;;
            *) fail "bad hostroot line: $kind $a $b" ;;
        esac
    done < $fw_cfg/hostroot/raw
    if [ -e $r/etc/hosts ]; then
        mount -o bind /etc/hosts $r/etc/hosts || fail "cannot bind /etc/hosts"
    fi
    cp /tmp/test.sh $r/tmp/test.sh || fail "cannot copy the script into the host root"
    [ -x $r/bin/sh ] || fail "the host root has no /bin/sh"
    export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    set -- chroot $r /bin/sh -c 'cd /tmp && exec /bin/sh -e /tmp/test.sh'
fi
echo "LLC-VM-UP $VM_NAME"

if [ "$VM_ROLE" = service ]; then
    setsid "$@" &
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
    "$@"
    rc=$?
fi
finish "$rc"
