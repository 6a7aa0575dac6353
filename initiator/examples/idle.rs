//! Connect to an NVMe-oF subsystem and do nothing for a while: the controllers' keep-alives
//! are all that goes over the wire. `tools/bench/idle-hosts` runs several of these to measure
//! what connected but idle hosts cost the target's CPU; `tools/bench/idle-controllers` runs one
//! with a thousand controllers to measure what they cost its memory.
//!
//! ```text
//! cargo run -p rdmablk-initiator --example idle -- soft://127.0.0.1:4420/NQN 30
//! cargo run -p rdmablk-initiator --example idle -- 'tcp://127.0.0.1:4420/NQN?io_queues=1' 30 1000
//! ```
//! Arguments: URL SECONDS [CONTROLLERS (1)]. Connects CONTROLLERS controllers (each with the
//! URL's I/O queues), prints "connected: N controllers" once all are up, then "PASS" after
//! SECONDS if every controller is still the one it connected (no reconnect: the keep-alives
//! kept it) and a read of block 0 through each succeeds; the keep-alives sent are printed.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdmablk_initiator::Controller;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(secs)) = (args.get(1), args.get(2).and_then(|s| s.parse::<u64>().ok()))
    else {
        eprintln!("usage: idle URL SECONDS [CONTROLLERS]");
        return ExitCode::from(2);
    };
    let count = match args.get(3).map(|s| s.parse::<usize>()) {
        None => 1,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("idle: CONTROLLERS must be a positive number");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let mut ctrls = Vec::with_capacity(count);
    for i in 0..count {
        match Controller::connect(url) {
            Ok(c) => ctrls.push(c),
            Err(e) => {
                println!("FAIL: connect of controller {} of {count}: {e}", i + 1);
                return ExitCode::FAILURE;
            }
        }
    }
    if count == 1 {
        println!("connected: cntlid {}", ctrls[0].info().cntlid);
    } else {
        println!(
            "connected: {count} controllers in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    std::thread::sleep(Duration::from_secs(secs));
    // Still connected: the keep-alives kept each controller.
    let (mut keep_alives, mut reconnects) = (0, 0);
    for (i, ctrl) in ctrls.iter().enumerate() {
        let nsid = ctrl.namespace_ids().first().copied().unwrap_or(1);
        let result = ctrl.namespace(nsid).and_then(|ns| {
            let mut buf = vec![0u8; ns.block_size() as usize];
            ns.read_at(0, &mut buf)
        });
        if let Err(e) = result {
            println!(
                "FAIL: controller {} of {count}, after {secs} s idle: {e}",
                i + 1
            );
            return ExitCode::FAILURE;
        }
        let s = ctrl.stats();
        keep_alives += s.keep_alives;
        reconnects += s.reconnects;
    }
    println!("keep-alives {keep_alives} reconnects {reconnects}");
    if reconnects > 0 {
        println!("FAIL: a controller was lost and reconnected while idle");
        return ExitCode::FAILURE;
    }
    println!("PASS");
    ExitCode::SUCCESS
}
