//! Where mount time goes: encode a checkpoint of N empty files, then time its decode (which
//! includes the invariant check) and a separate check. `cargo run --release --example
//! mount_cost -p rampart-core -- 1000000`
use std::time::Instant;

use rampart_core::persist::checkpoint;
use rampart_core::{Ctx, Engine, EngineConfig, ROOT_INO};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let e = Engine::new(EngineConfig::default());
    let c = Ctx::library(0, 0);
    let per = 1000;
    for d in 0..n.div_ceil(per) {
        let dir = e
            .mkdir(&c, ROOT_INO, format!("d{d:04}").as_bytes(), 0o755)
            .unwrap()
            .ino;
        for f in 0..per.min(n - d * per) {
            e.mknod(
                &c,
                dir,
                format!("f{f:07}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
            )
            .unwrap();
        }
    }
    let image = e.with_state(|s| checkpoint::encode(s, [0; 16], 0, 0));
    let t = Instant::now();
    let (state, _) = checkpoint::decode(&image, &EngineConfig::default()).unwrap();
    let decode = t.elapsed();
    let r = Engine::from_state(state);
    let t = Instant::now();
    let problems = r.check();
    let check = t.elapsed();
    assert!(problems.is_empty());
    println!(
        "{n} files: checkpoint {} bytes; decode (with its check) {:.0} ms; one more check {:.0} ms",
        image.len(),
        decode.as_secs_f64() * 1e3,
        check.as_secs_f64() * 1e3
    );
}
