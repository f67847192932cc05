//! The bearer token of `/api/v1/snapshot` and `POST /api/v1/gpu-trace`: random, written at
//! start to a 0600 file (the agent's user and root read it), removed at the end.

/// Writes a new random token to `path` (0600, replacing the file whole) and returns it.
pub(crate) fn write_token(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    // tempfile creates 0600 with O_EXCL under a random name; the rename replaces whatever
    // was at the path (a link included) without writing through it.
    let mut tmp = tempfile::Builder::new()
        .prefix(".syncspy-agent-token.")
        .tempfile_in(dir)?;
    writeln!(tmp, "{token}")?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(token)
}

/// Removes the token file if it still holds `token` (another agent may have replaced it).
pub(crate) fn remove_token(path: &std::path::Path, token: &str) {
    if std::fs::read_to_string(path).is_ok_and(|t| t.trim() == token) {
        if let Err(e) = std::fs::remove_file(path) {
            eprintln!(
                "syncspy: warning: cannot remove the token file {}: {e}",
                path.display()
            );
        }
    }
}

/// Whether `headers` carry `Authorization: Bearer <token>` (compared in constant time).
pub(crate) fn authorized(headers: &hyper::HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
