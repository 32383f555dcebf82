//! `kv-router`: the command-line router build with the built-in catalog linked.

fn main() -> std::process::ExitCode {
    kv_router::run()
}
