//! The viewer's HTTP server: axum on a single-threaded tokio runtime,
//! bound to 127.0.0.1 only. Every URL starts with a random token
//! (`http://127.0.0.1:PORT/TOKEN/`), printed as the first line on standard
//! output: another user of the machine, or a web page in the browser
//! guessing ports, gets 403 for anything without it. A request whose
//! `Host` is not this address (a DNS-rebinding page: its own name
//! resolving to 127.0.0.1) gets 403 too. No CORS header is sent, and
//! no file is served but the viewer's own assets: the data are answers
//! computed from the profile.

use super::Viewer;
use anyhow::{Context, Result};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::io::Write;
use std::sync::{Arc, Mutex};

struct Shared {
    token: String,

    /// The profile (its store's connection is used by one request at a
    /// time).
    viewer: Mutex<Viewer>,
}

/// 128 random bits, in hex.
fn token() -> Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .context("cannot read /dev/urandom for the viewer's token")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found").into_response()
}

fn forbidden() -> Response {
    (StatusCode::FORBIDDEN, "forbidden").into_response()
}

/// Answers 403 to a request without the token or for another host.
async fn guard(
    State(s): State<Arc<Shared>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let token_ok = req
        .uri()
        .path()
        .strip_prefix('/')
        .and_then(|p| p.strip_prefix(s.token.as_str()))
        .is_some_and(|rest| rest.starts_with('/'));
    if !token_ok || !loopback_host(host) {
        return forbidden();
    }
    next.run(req).await
}

fn reply(content_type: &'static str, body: impl Into<axum::body::Body>) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body.into(),
    )
        .into_response()
}

async fn index(State(s): State<Arc<Shared>>, Path(token): Path<String>) -> Response {
    if token != s.token {
        return not_found();
    }
    reply("text/html; charset=utf-8", super::served_page())
}

async fn asset(
    State(s): State<Arc<Shared>>,
    Path((token, file)): Path<(String, String)>,
) -> Response {
    if token != s.token {
        return not_found();
    }
    let (kind, body) = match file.as_str() {
        "app.js" => ("text/javascript", super::APP_JS),
        "app.css" => ("text/css", super::APP_CSS),
        "uplot.js" => ("text/javascript", super::UPLOT_JS),
        "uplot.css" => ("text/css", super::UPLOT_CSS),
        _ => return not_found(),
    };
    reply(kind, body)
}

async fn api(
    State(s): State<Arc<Shared>>,
    Path((token, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    if token != s.token {
        return not_found();
    }
    let s = s.clone();
    // Off the runtime's thread: a large profile takes seconds.
    let answer = tokio::task::spawn_blocking(move || {
        let mut v = s.viewer.lock().unwrap_or_else(|e| e.into_inner());
        v.answer(&name, query.as_deref().unwrap_or(""))
    })
    .await;
    match answer {
        Ok(Ok((kind, body))) => reply(kind, body.as_ref().clone()),
        Ok(Err(e)) => (StatusCode::BAD_REQUEST, format!("{e:#}")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Serves `viewer` on 127.0.0.1:`port` (0: a free port) until Ctrl-C;
/// prints the URL first, and opens it in the browser where there is one
/// and `open_browser`.
pub fn serve(mut viewer: Viewer, port: u16, open_browser: bool) -> Result<()> {
    let token = token()?;
    // The first views' answers before the URL: they then come at once.
    viewer.warm()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the viewer's runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{port}"))?;
        let port = listener.local_addr()?.port();
        let url = format!("http://127.0.0.1:{port}/{token}/");
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}")?;
        out.flush()?;
        drop(out);
        say!("heapledger: serving the viewer at {url} (Ctrl-C stops it)");
        if open_browser && has_display() {
            // Whatever the desktop's opener does; the URL is printed anyway.
            let _ = std::process::Command::new("xdg-open")
                .arg(&url)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
        }
        let shared = Arc::new(Shared {
            token,
            viewer: Mutex::new(viewer),
        });
        let app = Router::new()
            .route("/{token}/", get(index))
            .route("/{token}/{file}", get(asset))
            .route("/{token}/api/{name}", get(api))
            .layer(axum::middleware::from_fn_with_state(shared.clone(), guard))
            .with_state(shared);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("the viewer's server stopped")?;
        Ok(())
    })
}

/// Whether a `Host` header names this machine's loopback (any port: an
/// SSH tunnel may forward another local port to this one). A page of
/// another site whose name was rebound to 127.0.0.1 sends its own name.
fn loopback_host(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "127.0.0.1" | "localhost" | "[::1]")
}

fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}
