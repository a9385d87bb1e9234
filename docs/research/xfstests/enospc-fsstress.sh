#!/bin/bash
# generic/083's workload by hand (xfstests cannot make a sized fuse scratch device): fsstress
# write ops to ENOSPC on a rampart store on a 96 MiB ext4, then `rampart fsck` of the store.
# usage: enospc-fsstress.sh RAMPART_BIN FSSTRESS_BIN WORKDIR [SEED]   (root: loop device)
set -u
rampart=$1 fsstress=$2 w=$3 seed=${4:-12345}
mkdir -p "$w/disk" "$w/m"
truncate -s 96M "$w/disk.img" && mkfs.ext4 -q -F -m 0 "$w/disk.img"
loop=$(losetup -f --show "$w/disk.img") && mount "$loop" "$w/disk"
"$rampart" mkfs "$w/disk/s" >/dev/null
"$rampart" mount -o allow_other,default_permissions,memory_cap=16M "$w/disk/s" "$w/m" >/dev/null
nice -n 10 "$fsstress" -d "$w/m/work" -w -p 8 -n 800 -v -s "$seed" > "$w/fsstress.log" 2>&1
"$rampart" umount "$w/m"   # its final checkpoint fails for lack of room: expected
"$rampart" fsck "$w/disk/s"; rc=$?
umount "$w/disk"; losetup -d "$loop"
exit $rc
