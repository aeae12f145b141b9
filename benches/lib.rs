//! Criterion benchmarks of the in-process hot paths (`cargo bench -p
//! fabric-benches`). The library part is empty; the benchmarks are the
//! `[[bench]]` targets next to this file.
