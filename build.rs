//! Links the `rondo` executable at a fixed address (not position-independent) on Linux.
//!
//! A position-independent `rondo` spends each start applying ~46,000 relocations, which
//! write to ~200 pages of its data: 0.6-0.9 ms of every command, a third of
//! `rondo --version` and an eighth of `rondo check` on a large workflow (measured in
//! `bench/check/RESULTS.md`). The price is that the executable's own code and data are
//! not at a random address (shared libraries, heap and stacks still are), as with Go's
//! default build. Tools never run inside the `rondo` process: their confinement does not
//! depend on it. `RONDO_PIE=1` at build time keeps the usual position-independent link.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RONDO_PIE");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    let pie = std::env::var("RONDO_PIE").is_ok_and(|v| v == "1");
    if linux_gnu && !pie {
        println!("cargo:rustc-link-arg-bin=rondo=-no-pie");
    }
}
