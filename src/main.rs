/// The gateway allocates many small short-lived buffers per request on several threads;
/// mimalloc serves them with less CPU than the system allocator
/// (docs/decisions/mimalloc-allocator.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = hookgate::cli::Cli::parse();
    let runtime = match hookgate::startup::background_runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(hookgate::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            hookgate::telemetry::print_error(&e);
            std::process::ExitCode::FAILURE
        }
    }
}
