fn main() {
    std::process::exit(rondo::cli::main_entry());
}
