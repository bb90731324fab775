//! `hookgate send`: sign a webhook exactly as a source's provider would and post it to a
//! running gateway, like a provider's "send test event" button.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::config::{GatewayConfig, Settings};
use crate::verify::{sample_body, sign_request};

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    #[arg(long, short, env = "HOOKGATE_CONFIG")]
    pub config: PathBuf,
    /// The source to send as (its provider decides how the request is signed).
    #[arg(long)]
    pub source: String,
    /// Send this file as the body (its event id is read where the provider reads it).
    #[arg(long)]
    pub body: Option<PathBuf>,
    /// The event type: of the generated sample body, or with `--body`, in the header where
    /// the provider sends it (GitHub's `X-GitHub-Event`, ...).
    #[arg(long)]
    pub event: Option<String>,
    /// The gateway's base URL (default: from `server.listen`).
    #[arg(long)]
    pub url: Option<String>,
}

pub async fn send(args: SendArgs) -> anyhow::Result<()> {
    let settings = Settings::load(&args.config)?;
    let gateway = GatewayConfig::from_settings(&settings)?;
    let source = gateway.sources.get(&args.source).with_context(|| {
        format!(
            "no source named {:?} in {}",
            args.source,
            args.config.display()
        )
    })?;
    let event_id = format!("evt_test_{}", uuid::Uuid::now_v7().simple());
    let event_type = args.event.as_deref().unwrap_or("hookgate.test");
    let body = match &args.body {
        Some(path) => read(path)?,
        None => sample_body(&source.verifier, &event_id, event_type),
    };
    let signed = sign_request(
        &source.verifier,
        body,
        &event_id,
        event_type,
        chrono::Utc::now().timestamp(),
    )?;
    let base = match args.url {
        Some(url) => url,
        None if settings.server.listen.ends_with(":0") => {
            bail!("server.listen picks a random port; pass the gateway's address with --url")
        }
        None => format!("http://{}", settings.server.listen),
    };
    let mut url = format!("{}/webhooks/{}", base.trim_end_matches('/'), source.name);
    if !signed.query.is_empty() {
        url = format!("{url}?{}", signed.query);
    }
    let mut request = reqwest::Client::new().post(&url);
    for (name, value) in signed.headers.iter() {
        request = request.header(name, value);
    }
    let response = request
        .body(signed.body)
        .send()
        .await
        .with_context(|| format!("could not reach the gateway at {url}"))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    println!("{} {}", status.as_u16(), text);
    if !status.is_success() {
        bail!("the gateway answered {status}");
    }
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}
