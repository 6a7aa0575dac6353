//! NVMe and NVMe-oF wire format. (Being built.)
