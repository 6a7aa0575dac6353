#!/usr/bin/env python3
"""every_size.py DEV BLOCK MAX: every transfer size from BLOCK to MAX bytes, in steps of BLOCK,
written once and read back through the Linux host's block device DEV with O_DIRECT.

Size n goes to offset (n / BLOCK - 1) * MAX, so no two sizes overlap; MAX must be at most the
device's max_hw_sectors_kb (what the host derived from MDTS), so each write and each read is
one NVMe command of exactly n bytes. The data is random per size and every byte is compared.
Exits 1 naming the first sizes that differ, 2 on a usage or device error. Not a random
sample: fio's --bsrange draws sizes at random and can miss some, this cannot.
"""
import mmap
import os
import sys


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    dev, block, maxb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if block <= 0 or maxb < block or maxb % block:
        print(f"every_size: MAX {maxb} must be a multiple of BLOCK {block}", file=sys.stderr)
        return 2
    name = os.path.basename(os.path.realpath(dev))
    with open(f"/sys/block/{name}/queue/max_hw_sectors_kb") as f:
        hw = int(f.read()) * 1024
    if maxb > hw:
        print(f"every_size: {dev} takes at most {hw} B per command (MDTS), not {maxb}",
              file=sys.stderr)
        return 2
    need = (maxb // block) * maxb
    fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        if size < need:
            print(f"every_size: {dev} has {size} B, {need} needed", file=sys.stderr)
            return 2
        wbuf = mmap.mmap(-1, maxb)  # page-aligned, as O_DIRECT needs
        rbuf = mmap.mmap(-1, maxb)
        bad = []
        for n in range(block, maxb + 1, block):
            off = (n // block - 1) * maxb
            data = os.urandom(n)
            wbuf[:n] = data
            if os.pwritev(fd, [memoryview(wbuf)[:n]], off) != n:
                bad.append(f"{n} (short write)")
                continue
            rbuf[:n] = bytes(n)
            if os.preadv(fd, [memoryview(rbuf)[:n]], off) != n or rbuf[:n] != data:
                bad.append(str(n))
    finally:
        os.close(fd)
    count = maxb // block
    if bad:
        print(f"every_size: {dev}: {len(bad)} of {count} sizes read back wrong: "
              f"{', '.join(bad[:10])}")
        return 1
    print(f"every_size: {dev}: all {count} sizes from {block} to {maxb} B written and read "
          "back whole, one command each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
