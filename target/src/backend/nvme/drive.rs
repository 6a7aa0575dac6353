//! What an NVMe namespace's generic character device (`/dev/ngXnY`) says about itself: its
//! namespace ID (`NVME_IOCTL_ID`), the drive's Identify Controller and Identify Namespace
//! (admin commands through `NVME_IOCTL_ADMIN_CMD`), and what the kernel's driver makes of the
//! drive in sysfs (poll queues, the largest transfer one command may carry).
//!
//! The layouts are the kernel's UAPI (`include/uapi/linux/nvme_ioctl.h`): `struct
//! nvme_passthru_cmd` for the ioctl and `struct nvme_uring_cmd` for io_uring, 72 bytes each,
//! the same up to `cdw15`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use rdmablk::nvme::identify::{
    cns, IdentifyCmd, IdentifyController, IdentifyNamespace, IDENTIFY_LEN,
};
use rdmablk::nvme::sqe::Sqe;
use rdmablk::nvme::status::Status;

/// `_IO('N', 0x40)`: the namespace ID of the device node.
const NVME_IOCTL_ID: libc::c_ulong = 0x4E40;
/// `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = 0xC048_4E41;
/// `_IOWR('N', 0x80, struct nvme_uring_cmd)`: the `cmd_op` of an I/O command through io_uring.
pub const NVME_URING_CMD_IO: u32 = 0xC048_4E80;

/// The command layout both the ioctl and io_uring take (72 bytes).
pub const PASSTHRU_LEN: usize = 72;

/// Lays `sqe` out as a `struct nvme_passthru_cmd` / `struct nvme_uring_cmd`, with the data at
/// `addr` for `data_len` bytes (no metadata) and the driver's default timeout. The flags byte
/// stays 0 (the kernel refuses any other: the driver chooses PRPs or SGLs itself), and so
/// does the command identifier (the driver's).
pub fn passthru(sqe: &Sqe, addr: u64, data_len: u32) -> [u8; PASSTHRU_LEN] {
    let mut b = [0u8; PASSTHRU_LEN];
    b[0] = sqe.opcode;
    b[4..8].copy_from_slice(&sqe.nsid.to_ne_bytes());
    b[8..12].copy_from_slice(&sqe.cdw2.to_ne_bytes());
    b[12..16].copy_from_slice(&sqe.cdw3.to_ne_bytes());
    b[24..32].copy_from_slice(&addr.to_ne_bytes());
    b[36..40].copy_from_slice(&data_len.to_ne_bytes());
    for (i, dw) in [
        sqe.cdw10, sqe.cdw11, sqe.cdw12, sqe.cdw13, sqe.cdw14, sqe.cdw15,
    ]
    .into_iter()
    .enumerate()
    {
        b[40 + 4 * i..44 + 4 * i].copy_from_slice(&dw.to_ne_bytes());
    }
    b
}

/// The io_uring entry passing `sqe` through (`NVME_URING_CMD_IO`) to registered file 0, with
/// its data at `addr` for `data_len` bytes, in fixed buffer `buf_index` if given.
pub fn uring_cmd(
    sqe: &Sqe,
    addr: u64,
    data_len: u32,
    buf_index: Option<u16>,
) -> io_uring::squeue::Entry128 {
    let mut area = [0u8; 80];
    area[..PASSTHRU_LEN].copy_from_slice(&passthru(sqe, addr, data_len));
    io_uring::opcode::UringCmd80::new(io_uring::types::Fixed(0), NVME_URING_CMD_IO)
        .cmd(area)
        .buf_index(buf_index)
        .build()
}

/// The namespace ID behind the device node.
pub fn namespace_id(file: &File) -> std::io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument and returns the NSID or -1.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ID) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as u32)
}

/// Why an admin command through the ioctl failed.
#[derive(Debug)]
pub enum AdminError {
    /// The system call failed (EACCES/EPERM: no permission).
    Os(std::io::Error),
    /// The drive answered with an error status.
    Status(Status),
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminError::Os(e) => write!(f, "{e}"),
            AdminError::Status(s) => write!(f, "the drive answered {s}"),
        }
    }
}

fn identify(file: &File, sqe: &Sqe) -> Result<Box<[u8; IDENTIFY_LEN]>, AdminError> {
    let mut data = Box::new([0u8; IDENTIFY_LEN]);
    let mut cmd = passthru(sqe, data.as_mut_ptr() as u64, IDENTIFY_LEN as u32);
    // SAFETY: `cmd` is a valid struct nvme_passthru_cmd naming `data`, which lives (and is
    // IDENTIFY_LEN bytes long) until the ioctl returns.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ADMIN_CMD, cmd.as_mut_ptr()) };
    match r {
        0 => Ok(data),
        r if r < 0 => Err(AdminError::Os(std::io::Error::last_os_error())),
        status => Err(AdminError::Status(Status::from_field(status as u16))),
    }
}

/// The drive's Identify Controller.
pub fn identify_controller(file: &File) -> Result<IdentifyController, AdminError> {
    let sqe = IdentifyCmd {
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
        nsid: 0,
    }
    .to_sqe(0);
    let b = identify(file, &sqe)?;
    IdentifyController::decode(&b).map_err(|e| {
        AdminError::Os(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("Identify Controller: {e}"),
        ))
    })
}

/// The drive's Identify Namespace of `nsid`.
pub fn identify_namespace(file: &File, nsid: u32) -> Result<IdentifyNamespace, AdminError> {
    let sqe = IdentifyCmd {
        cns: cns::NAMESPACE,
        cntid: 0,
        csi: 0,
        nsid,
    }
    .to_sqe(0);
    Ok(IdentifyNamespace::decode(&*identify(file, &sqe)?))
}

/// What the kernel's driver says of the namespace's block device in sysfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverLimits {
    /// The driver has poll queues for it (`queue/io_poll` is 1: `nvme.poll_queues` > 0).
    pub poll_queues: bool,
    /// The most bytes one command may carry without the kernel copying it.
    pub max_transfer: u32,
    /// The driver's segment limit in bytes (`max_segments` pages): the size of the fixed
    /// buffers the arena is registered in.
    pub segment_bytes: u32,
}

/// The block device `/dev/nvmeXnY` shares its queues with `/dev/ngXnY` (same numbers).
pub fn block_device_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("ng").map(|rest| format!("nvme{rest}"))
}

/// Reads [`DriverLimits`] from `/sys/block/<block>/queue` (`sysfs` is the sysfs root, `/sys`
/// outside tests). A namespace without a block device (a format the block layer cannot
/// serve) has no such directory: no poll queues, and `mdts_bytes` as the transfer limit.
pub fn driver_limits(sysfs: &Path, block: Option<&str>, mdts_bytes: u32) -> DriverLimits {
    let read = |attr: &str| -> Option<u64> {
        let p = sysfs.join("block").join(block?).join("queue").join(attr);
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    };
    let poll_queues = read("io_poll") == Some(1);
    let hw = read("max_hw_sectors_kb").map(|kb| kb.saturating_mul(1024));
    // Each segment is at least a page: a transfer over more pages than segments is copied.
    let segs = read("max_segments").map(|n| n.saturating_mul(4096));
    let segment_bytes = segs.unwrap_or(u64::from(mdts_bytes)).clamp(4096, 1 << 30) as u32;
    let max_transfer = [Some(u64::from(mdts_bytes)), hw, segs]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(u64::from(mdts_bytes))
        .clamp(4096, u64::from(u32::MAX)) as u32;
    DriverLimits {
        poll_queues,
        max_transfer,
        segment_bytes,
    }
}

/// The largest transfer Identify Controller's MDTS allows (in units of the minimum memory
/// page size, taken as 4 KiB; 0: no limit, capped here at 8 MiB like the Linux driver).
pub fn mdts_bytes(mdts: u8) -> u32 {
    if mdts == 0 || mdts > 11 {
        8 << 20
    } else {
        4096u32 << mdts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthru_layout_is_the_kernels() {
        let mut sqe = Sqe::new(0x01, 7);
        sqe.flags = 0x40;
        sqe.nsid = 3;
        sqe.cdw10 = 0x1111_2222;
        sqe.cdw11 = 0x3333_4444;
        sqe.cdw12 = 0x4000_00ff;
        sqe.cdw15 = 9;
        let b = passthru(&sqe, 0xdead_beef_0000, 4096);
        assert_eq!(b[0], 0x01);
        assert_eq!(u32::from_ne_bytes(b[4..8].try_into().unwrap()), 3);
        assert_eq!(
            u64::from_ne_bytes(b[24..32].try_into().unwrap()),
            0xdead_beef_0000
        );
        assert_eq!(u32::from_ne_bytes(b[36..40].try_into().unwrap()), 4096);
        assert_eq!(
            u32::from_ne_bytes(b[40..44].try_into().unwrap()),
            0x1111_2222
        );
        assert_eq!(
            u32::from_ne_bytes(b[48..52].try_into().unwrap()),
            0x4000_00ff
        );
        assert_eq!(u32::from_ne_bytes(b[60..64].try_into().unwrap()), 9);
        // PSDT and the command identifier are the driver's: never passed.
        assert_eq!(&b[1..4], &[0, 0, 0]);
        assert_eq!(&b[64..72], &[0; 8], "timeout 0: the driver's default");
    }

    #[test]
    fn ioctl_numbers_are_the_uapis() {
        // _IOC(dir = read|write (3), type 'N', nr, size 72)
        let iowr = |nr: libc::c_ulong| {
            (3 << 30) | ((PASSTHRU_LEN as libc::c_ulong) << 16) | (0x4E << 8) | nr
        };
        assert_eq!(NVME_IOCTL_ADMIN_CMD, iowr(0x41));
        assert_eq!(libc::c_ulong::from(NVME_URING_CMD_IO), iowr(0x80));
    }

    #[test]
    fn limits_come_from_sysfs_and_mdts() {
        let dir = std::env::temp_dir().join(format!("rdmablk-sysfs-{}", std::process::id()));
        let q = dir.join("block/nvme0n1/queue");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("io_poll"), "1\n").unwrap();
        std::fs::write(q.join("max_hw_sectors_kb"), "512\n").unwrap();
        std::fs::write(q.join("max_segments"), "127\n").unwrap();
        let l = driver_limits(&dir, Some("nvme0n1"), mdts_bytes(7));
        assert!(l.poll_queues);
        assert_eq!(l.max_transfer, 127 * 4096);
        assert_eq!(l.segment_bytes, 127 * 4096);
        std::fs::write(q.join("io_poll"), "0\n").unwrap();
        let l = driver_limits(&dir, Some("nvme0n1"), mdts_bytes(5));
        assert!(!l.poll_queues);
        assert_eq!(l.max_transfer, 128 << 10);
        let l = driver_limits(&dir, Some("nvme9n9"), mdts_bytes(0));
        assert_eq!((l.poll_queues, l.max_transfer), (false, 8 << 20));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            block_device_name(Path::new("/dev/ng1n2")).as_deref(),
            Some("nvme1n2")
        );
    }
}
