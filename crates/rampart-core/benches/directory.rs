//! Directory operations against directory size: lookup, create+unlink and a readdir page in a
//! directory of 10, 10,000 and 1,000,000 entries. The hash index and slot cookies should make
//! all three independent of the size (docs/BENCHMARKS.md).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rampart_core::{Ctx, Engine, EngineConfig, ROOT_INO};

const FILE: u32 = libc::S_IFREG | 0o644;

fn filled(n: u32) -> (Engine, u64) {
    let e = Engine::new(EngineConfig::default());
    let c = Ctx::library(0, 0);
    let d = e.mkdir(&c, ROOT_INO, b"d", 0o755).unwrap().ino;
    for i in 0..n {
        e.mknod(&c, d, format!("f{i:07}").as_bytes(), FILE, 0)
            .unwrap();
    }
    (e, d)
}

fn directory(c: &mut Criterion) {
    let mut group = c.benchmark_group("directory");
    group.sample_size(30);
    group.warm_up_time(std::time::Duration::from_millis(300));
    group.measurement_time(std::time::Duration::from_secs(1));
    let ctx = Ctx::library(0, 0);
    for n in [10u32, 10_000, 1_000_000] {
        let (e, d) = filled(n);
        let probe = format!("f{:07}", n / 2);
        group.bench_with_input(BenchmarkId::new("lookup", n), &n, |b, _| {
            b.iter(|| e.lookup(&ctx, d, probe.as_bytes()).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("create_unlink", n), &n, |b, _| {
            b.iter(|| {
                e.mknod(&ctx, d, b"new-entry", FILE, 0).unwrap();
                e.unlink(&ctx, d, b"new-entry").unwrap();
            })
        });
        // A page of 100 entries from a cookie in the middle, as getdents resumes.
        let mut cookies = Vec::new();
        e.readdir(d, 0, |_, next, _, _| {
            cookies.push(next);
            true
        })
        .unwrap();
        let middle = cookies[cookies.len() / 2];
        group.bench_with_input(BenchmarkId::new("readdir_page_100", n), &n, |b, _| {
            b.iter(|| {
                let mut left = 100;
                e.readdir(d, middle, |_, _, _, _| {
                    left -= 1;
                    left > 0
                })
                .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, directory);
criterion_main!(benches);
