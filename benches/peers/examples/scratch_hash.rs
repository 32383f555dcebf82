use std::hint::black_box;
use std::time::Instant;
fn main() {
    let reqs: Vec<Vec<u32>> = (0..256u32)
        .map(|r| {
            (0..8192u32)
                .map(|t| (t ^ r).wrapping_mul(2654435761) % 128000)
                .collect()
        })
        .collect();
    let mut buf = Vec::with_capacity(512);
    for _ in 0..3 {
        let n = 5000;
        let t = Instant::now();
        for i in 0..n {
            black_box(ours::kv::sequence_hashes_for_tokens(
                black_box(&reqs[i % 256]),
                16,
            ));
        }
        println!(
            "ours seq hashes cold: {:.2} µs",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
        let t = Instant::now();
        for i in 0..n {
            buf.clear();
            buf.extend(ours::kv::sequence_hashes_iter(
                black_box(&reqs[i % 256]),
                16,
            ));
            black_box(&buf);
        }
        println!(
            "ours iter cold: {:.2} µs",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
        let t = Instant::now();
        for i in 0..n {
            black_box(ours::kv::block_hashes(black_box(&reqs[i % 256]), 16));
        }
        println!(
            "ours local only cold: {:.2} µs",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
        let t = Instant::now();
        for i in 0..n {
            black_box(upstream::protocols::compute_block_hash_for_seq(
                black_box(&reqs[i % 256]),
                16,
                Default::default(),
            ));
        }
        println!(
            "upstream local cold: {:.2} µs",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
    }
}
