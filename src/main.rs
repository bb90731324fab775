use clap::Parser as _;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = hookgate::cli::Cli::parse();
    match hookgate::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
