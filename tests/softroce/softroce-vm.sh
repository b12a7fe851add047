#!/usr/bin/env bash
# tests/softroce/softroce-vm.sh — run a command inside a QEMU VM that has a real RDMA stack: Debian's own kernel
# (it has rdma_rxe, Soft-RoCE), booted under software emulation (TCG, no KVM needed), with the host's root file
# system shared read-only, so host-built binaries and the host's libibverbs, rxe provider, OpenMPI and perftest
# run unchanged inside. The command's exit status is this script's exit status.
#
# usage: tests/softroce/softroce-vm.sh [options] -- COMMAND [ARGS...]
#   --ranks N          ranks (default 2)                 --devices D   rxe devices per rank (default 1)
#   --netem SPEC       tc qdisc add dev <every rank veth> root netem SPEC, before COMMAND
#   --timeout S        host-side limit for the whole VM run (default 900); a hang fails with 124
#   --out DIR          writable directory shared into the VM as $SOFTROCE_OUT (default: a new run directory)
#   --workdir DIR      cache for the kernel and initramfs (default ${ROCENANTE_SOFTROCE_CACHE:-/tmp/rocenante-softroce})
#   --mem MB  --smp N  guest memory (1024) and vCPUs (2: keep it at 2 on shared machines)
#   --no-install       never apt-get; fail naming the missing packages
#   -v                 stream the VM console
#
# Inside the VM, rank r owns devices rxe(r*D+k), k < D, each on its own veth r(r*D+k) with address
# 198.18.0.(r*D+k+1)/24; all veths hang off one bridge; policy routing makes rank-to-rank RoCE traffic really
# cross the veths (so tc netem on them bites). rdma_rxe in kernel 6.1 works only in the initial network namespace,
# hence one namespace and routing instead of a namespace per rank. COMMAND runs from the caller's directory with
#   SOFTROCE_RANKS, SOFTROCE_DEVICES (per rank), SOFTROCE_RXE (all devices), SOFTROCE_NETDEVS, SOFTROCE_OUT
# set, plus the caller's own SOFTROCE_* and ROCENANTE_* variables; tests/softroce/rank-env.sh turns them into ROCENANTE_IB_HCA for each mpirun rank.
#
# Exit status: COMMAND's (0-127); 124 when the VM hit --timeout; 125 when the VM ended without reporting (kernel
# panic, QEMU error); 2 for a set-up error here (missing packages that could not be installed, no kernel). A VM
# that cannot run is a failure, never a pass or a skip.
set -u -o pipefail

RANKS=2 DEVS=1 NETEM="" TIMEOUT=900 MEM=1024 SMP=2 VERBOSE=0 INSTALL=1 OUT=""
WORKDIR=${ROCENANTE_SOFTROCE_CACHE:-/tmp/rocenante-softroce}
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) RANKS=$2; shift 2 ;;
    --devices) DEVS=$2; shift 2 ;;
    --netem) NETEM=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --mem) MEM=$2; shift 2 ;;
    --smp) SMP=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    -v) VERBOSE=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "softroce-vm: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "softroce-vm: no command given (see --help)" >&2; exit 2; }
USER_CMD=("$@")
log() { echo "[softroce-vm $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 2; }
T_START=$(date +%s.%N)
NDEV=$((RANKS * DEVS))
[ "$NDEV" -ge 1 ] && [ "$NDEV" -le 16 ] || die "--ranks x --devices must be 1..16"

# ---- 1. host packages (installed when missing; a machine where they cannot be installed fails here, loudly)
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
{ [ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; } || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v modprobe >/dev/null || need+=(kmod)
command -v xz >/dev/null || need+=(xz-utils)
command -v file >/dev/null || need+=(file)
command -v rdma >/dev/null || need+=(iproute2)
command -v ibv_devinfo >/dev/null || need+=(ibverbs-utils)
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || need+=(ibverbs-providers rdma-core)
command -v ib_write_lat >/dev/null || need+=(perftest)
command -v mpirun >/dev/null || need+=(openmpi-bin)
if [ ${#need[@]} -gt 0 ]; then
  [ "$INSTALL" = 1 ] || die "missing packages: ${need[*]} (apt-get install ${need[*]})"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
  log "apt-get install ${need[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
    >"/tmp/rocenante-softroce-apt.$$.log" 2>&1 || die "apt-get install ${need[*]} failed: see /tmp/rocenante-softroce-apt.$$.log"
fi

# ---- 2. Debian's kernel (cached): the package behind linux-image-amd64, unpacked, with an uncompressed vmlinux
mkdir -p "$WORKDIR" || die "cannot create $WORKDIR"
KDIR=$WORKDIR/kernel
if [ ! -f "$KDIR/ok" ]; then
  kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
  KPKG=$(kpkg)
  [ -n "$KPKG" ] || { apt-get update -qq >/dev/null 2>&1; KPKG=$(kpkg); }
  [ -n "$KPKG" ] || die "cannot resolve the Debian kernel package behind linux-image-amd64"
  log "downloading and unpacking $KPKG"
  rm -rf "$KDIR" && mkdir -p "$KDIR/deb" || die "mkdir $KDIR"
  (cd "$KDIR/deb" && apt-get download -qq "$KPKG" >/dev/null 2>&1) || die "apt-get download $KPKG failed"
  dpkg-deb -x "$KDIR"/deb/*.deb "$KDIR/root" || die "dpkg-deb -x failed"
  rm -rf "$KDIR/deb"
  KVER=$(ls "$KDIR/root/lib/modules" | head -1)
  depmod -b "$KDIR/root" "$KVER" || die "depmod failed"
  # The XZ stream inside vmlinuz starts at FD 37 7A 58 5A; the ELF inside boots directly (PVH), ~3 s faster.
  VZ=$KDIR/root/boot/vmlinuz-$KVER
  off=$(LC_ALL=C grep -obUa $'\xfd7zXZ' "$VZ" | head -1 | cut -d: -f1)
  [ -n "$off" ] && tail -c +$((off + 1)) "$VZ" | xz -dc 2>/dev/null >"$KDIR/vmlinux"
  file "$KDIR/vmlinux" 2>/dev/null | grep -q ELF || rm -f "$KDIR/vmlinux"
  echo "$KVER" >"$KDIR/ok"
fi
KVER=$(cat "$KDIR/ok")
KROOT=$KDIR/root
KERNEL=$KROOT/boot/vmlinuz-$KVER
[ -f "$KDIR/vmlinux" ] && KERNEL=$KDIR/vmlinux

# ---- 3. initramfs (cached): static busybox, /init, and the modules with their dependencies in load order.
# crc32_generic first: rxe needs the "crc32" transform and the initramfs has no modprobe to request it
# (without it, `rdma link add` fails with "No such file or directory").
MODS="virtio_pci virtio_mmio 9pnet_virtio 9p overlay crc32_generic rdma_rxe ib_uverbs rdma_ucm veth bridge sch_netem"
INITRD=$WORKDIR/initrd-$KVER.gz
INIT_SRC=$(cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod /mods/$m || echo "insmod $m failed"; done
H=/host
ok=1
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot $H || ok=0
mount -t proc proc $H/proc; mount -t sysfs sys $H/sys; mount -t devtmpfs dev $H/dev
mkdir -p $H/dev/pts $H/dev/shm; mount -t devpts devpts $H/dev/pts; mount -t tmpfs shm $H/dev/shm
mkdir -p /ovl && mount -t tmpfs ovl /ovl && mkdir -p /ovl/u /ovl/w
mount -t overlay overlay -o lowerdir=$H/tmp,upperdir=/ovl/u,workdir=/ovl/w $H/tmp || mount -t tmpfs tmp $H/tmp
mount -t tmpfs run $H/run
mkdir -p $H/tmp/job; mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job $H/tmp/job || ok=0
if [ $ok = 1 ]; then
  chroot $H /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb LANG=C.UTF-8 /bin/bash /tmp/job/vm-main.sh
  rc=$?
else
  echo "9p mounts failed"; rc=125
fi
echo "SOFTROCE_VM_RC=$rc"
echo $rc > $H/tmp/job/rc
sync
[ $rc -gt 127 ] && rc=127
printf "\\$(printf %03o $rc)" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
poweroff -f
EOF
)
key=$(printf '%s\n%s\n%s\n' "$MODS" "$INIT_SRC" "$(md5sum </bin/busybox)" | md5sum | cut -c1-12)
if [ ! -f "$INITRD" ] || [ "$(cat "$INITRD.key" 2>/dev/null)" != "$key" ]; then
  log "building the initramfs"
  IR=$WORKDIR/initramfs.d
  rm -rf "$IR" && mkdir -p "$IR"/{bin,dev,proc,sys,host,mods,tmp}
  cp /bin/busybox "$IR/bin/busybox"
  for m in $MODS; do
    modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" || die "module $m not found in kernel $KVER"
  done | awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' >"$IR/mods/paths"
  while read -r f; do
    case "$f" in
      *.ko) cp "$f" "$IR/mods/" ;;
      *.ko.xz) xz -dc "$f" >"$IR/mods/$(basename "$f" .xz)" ;;
      *.ko.zst) zstd -qdc "$f" >"$IR/mods/$(basename "$f" .zst)" ;;
    esac
    basename "$f" | sed 's/\.\(xz\|zst\)$//' >>"$IR/mods/order"
  done <"$IR/mods/paths"
  printf '%s\n' "$INIT_SRC" >"$IR/init" && chmod +x "$IR/init"
  (cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1 >"$INITRD.tmp") && mv "$INITRD.tmp" "$INITRD"
  echo "$key" >"$INITRD.key"
fi

# ---- 4. the job: network and RDMA set-up inside the VM, then COMMAND
mkdir -p "$WORKDIR/runs"
RUN=$(mktemp -d "$WORKDIR/runs/run.XXXXXX")
JOB=$RUN/job
if [ -n "$OUT" ]; then mkdir -p "$OUT" && JOB=$(cd "$OUT" && pwd); fi
mkdir -p "$JOB" && rm -f "$JOB/rc"
CONSOLE=$RUN/console.log
{
  printf 'RANKS=%q\nDEVS=%q\nNETEM=%q\nCWD=%q\n' "$RANKS" "$DEVS" "$NETEM" "$PWD"
  printf 'USER_CMD=('; printf '%q ' "${USER_CMD[@]}"; printf ')\n'
  # The VM starts from an empty environment: carry the test's SOFTROCE_* and ROCENANTE_* variables over.
  while IFS='=' read -r k _; do
    case "$k" in SOFTROCE_OUT) ;; SOFTROCE_*|ROCENANTE_*) printf 'export %s=%q\n' "$k" "${!k}" ;; esac
  done < <(env)
} >"$JOB/params.sh"
cat >"$JOB/vm-main.sh" <<'EOF'
# Runs inside the VM, chrooted into the read-only host root; /tmp is writable (overlay), /tmp/job is shared.
. /tmp/job/params.sh
NDEV=$((RANKS * DEVS))
hostname softroce-vm  # OpenMPI refuses the kernel's default "(none)"
# Every exec over 9p under TCG costs 0.1-0.2 s: batch the set-up (ip -batch, rdma -b).
sysctl -qw net.ipv4.conf.all.accept_local=1 net.ipv4.conf.default.accept_local=1 \
  net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
  net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 || exit 120
{
  echo "link set lo up"
  echo "link add br0 type bridge"
  echo "link set br0 up"
  for i in $(seq 0 $((NDEV - 1))); do
    a=198.18.0.$((i + 1))
    echo "link add r$i type veth peer name b$i"
    echo "link set b$i master br0"
    echo "link set b$i up"
    echo "addr add $a/24 dev r$i"
    echo "link set r$i up"
    echo "rule add pref $((10 + i)) iif r$i lookup local"             # arriving on rI: deliver locally
    echo "rule add pref $((50 + i)) from $a to $a lookup local"        # to itself: loopback
    echo "route add 198.18.0.0/24 dev r$i src $a table $((100 + i))"   # to other addresses: out of rI
    echo "rule add pref $((100 + i)) from $a lookup $((100 + i))"
  done
  echo "rule add pref 1000 lookup local"
  echo "rule del pref 0"
} >/tmp/net.batch
ip -batch /tmp/net.batch || { echo "network set-up failed"; exit 120; }
RXE="" NETDEVS=""
for i in $(seq 0 $((NDEV - 1))); do
  echo "link add rxe$i type rxe netdev r$i"
  RXE="$RXE rxe$i" NETDEVS="$NETDEVS r$i"
done >/tmp/rdma.batch
rdma -b /tmp/rdma.batch || { echo "rdma link add failed"; dmesg | tail -5; exit 121; }
export SOFTROCE_RANKS=$RANKS SOFTROCE_DEVICES=$DEVS SOFTROCE_RXE="${RXE# }" SOFTROCE_NETDEVS="${NETDEVS# }" SOFTROCE_OUT=/tmp/job
if [ -n "$NETEM" ]; then
  for d in $SOFTROCE_NETDEVS; do tc qdisc add dev "$d" root netem $NETEM || exit 122; done
fi
echo "SOFTROCE ready: ranks $RANKS, $DEVS device(s) per rank: $SOFTROCE_RXE${NETEM:+, netem $NETEM}"
cd "$CWD" 2>/dev/null || cd /
"${USER_CMD[@]}"
EOF

# ---- 5. boot. Under TCG the guest's TSC calibration against the PIT sometimes fails and the boot hangs:
# hand it the host's frequency (tsc_early_khz) and keep the host-side timeout anyway.
KARGS=""
TSC_KHZ=$(awk -F: '/^cpu MHz/{printf "%d", $2 * 1000; exit}' /proc/cpuinfo)
[ -n "$TSC_KHZ" ] && [ "$TSC_KHZ" -gt 100000 ] && KARGS="tsc_early_khz=$TSC_KHZ"
QEMU=(qemu-system-x86_64 -accel tcg -cpu max -m "$MEM" -smp "$SMP" -M microvm
  -nodefaults -no-user-config -display none -no-reboot
  -kernel "$KERNEL" -initrd "$INITRD"
  -append "console=ttyS0 panic=-1 quiet tsc=reliable mitigations=off $KARGS"
  -serial "file:$CONSOLE"
  -device isa-debug-exit,iobase=0xf4,iosize=0x01
  -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
  -device "virtio-9p-device,fsdev=hostroot,mount_tag=hostroot"
  -fsdev "local,id=job,path=$JOB,security_model=none"
  -device "virtio-9p-device,fsdev=job,mount_tag=job")
log "booting $KVER (TCG, $SMP vCPU, $MEM MiB): $RANKS rank(s) x $DEVS device(s)${NETEM:+, netem $NETEM}; run dir $RUN"
: >"$CONSOLE"
TAILPID=""
if [ "$VERBOSE" = 1 ]; then tail -n +1 -f "$CONSOLE" & TAILPID=$!; fi
T_BOOT=$(date +%s.%N)
timeout --kill-after=10 "$TIMEOUT" "${QEMU[@]}" </dev/null >"$RUN/qemu.stderr" 2>&1
QST=$?
T_END=$(date +%s.%N)
if [ -n "$TAILPID" ]; then sleep 0.3; kill "$TAILPID" 2>/dev/null; wait "$TAILPID" 2>/dev/null; fi
[ "$VERBOSE" = 1 ] || grep -v -E '^(SOFTROCE_VM_RC=|\[ *[0-9.]+\] )' "$CONSOLE"

# ---- 6. verdict: QEMU exits with (rc << 1) | 1 through isa-debug-exit; a panic gives 0, a hang the timeout.
RC=""
[ -f "$JOB/rc" ] && RC=$(cat "$JOB/rc")
if [ "$QST" = 124 ] || [ "$QST" = 137 ]; then
  log "TIMEOUT: the VM was killed after ${TIMEOUT}s (a hang)"; tail -30 "$CONSOLE" >&2; FINAL=124
elif [ $((QST % 2)) = 1 ] && [ -n "$RC" ]; then
  FINAL=$RC
else
  log "the VM ended without reporting (QEMU status $QST: kernel panic or QEMU error)"
  tail -30 "$CONSOLE" >&2; cat "$RUN/qemu.stderr" >&2; FINAL=125
fi
log "$(awk -v s="$T_START" -v b="$T_BOOT" -v e="$T_END" 'BEGIN{printf "prepare %.1f s, VM %.1f s", b-s, e-b}'); exit status $FINAL; console $CONSOLE"
exit "$FINAL"
