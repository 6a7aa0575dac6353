//! Connect to an NVMe-oF subsystem and do nothing for a while: the controller's keep-alives
//! are all that goes over the wire. `tools/bench/idle-hosts` runs several of these to measure
//! what connected but idle hosts cost the target.
//!
//! ```text
//! cargo run -p rdmablk-initiator --example idle -- soft://127.0.0.1:4420/NQN 30
//! ```
//! Arguments: URL SECONDS. Prints "connected" once the controller is up (with its I/O queues),
//! then "PASS" after SECONDS if the controller is still the one it connected (no reconnect:
//! the keep-alives kept it) and one read of block 0 at the end succeeds; the keep-alives sent
//! are printed.

use std::process::ExitCode;
use std::time::Duration;

use rdmablk_initiator::Controller;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(secs)) = (args.get(1), args.get(2).and_then(|s| s.parse::<u64>().ok()))
    else {
        eprintln!("usage: idle URL SECONDS");
        return ExitCode::from(2);
    };
    let ctrl = match Controller::connect(url) {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL: connect: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("connected: cntlid {}", ctrl.info().cntlid);
    std::thread::sleep(Duration::from_secs(secs));
    // Still connected: the keep-alives kept the controller.
    let nsid = ctrl.namespace_ids().first().copied().unwrap_or(1);
    let result = ctrl.namespace(nsid).and_then(|ns| {
        let mut buf = vec![0u8; ns.block_size() as usize];
        ns.read_at(0, &mut buf)
    });
    let s = ctrl.stats();
    println!("keep-alives {} reconnects {}", s.keep_alives, s.reconnects);
    match result {
        Ok(_) if s.reconnects > 0 => {
            println!("FAIL: the controller was lost and reconnected while idle");
            ExitCode::FAILURE
        }
        Ok(_) => {
            println!("PASS");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAIL: after {secs} s idle: {e}");
            ExitCode::FAILURE
        }
    }
}
