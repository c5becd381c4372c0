// Checking a large workflow is allocation-bound (many small strings and boxes);
// mimalloc makes `rondo check` of 10,000 roles markedly faster than glibc malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Before anything holds a secret: no process of the user reads rondo's memory.
    let _ = rondo_env::harden_self();
    std::process::exit(rondo::cli::main_entry());
}
