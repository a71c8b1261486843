//! tansu's `tansu` command (its `broker`, `topic`, … subcommands), as tansu 0.6.0's binary runs
//! it, less the `.env` file it reads.

#[tokio::main]
async fn main() -> tansu_cli::Result<tansu_sans_io::ErrorCode> {
    let _guard = tansu_broker::otel::init(tansu_broker::TracingFormat::Text)?;
    tansu_cli::Cli::main().await
}
