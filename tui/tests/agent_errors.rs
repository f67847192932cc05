//! `syncspy-top --agent URL --print` when the agent refuses: the agent's answer on stderr and
//! exit 1, not an empty screen and 0. The agent here is a listener that answers 401 to
//! everything, as `syncspy agent` does without the right token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

#[test]
fn print_with_an_agent_that_answers_401_fails_with_its_answer() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            // The whole request head first: answering and closing while the client still
            // writes would make its write fail (EPIPE) before it reads the answer.
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let tokens = std::env::temp_dir().join(format!("syncspy-top-401-{}", std::process::id()));
    std::fs::write(&tokens, "0".repeat(64)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_syncspy-top"))
        .args(["--agent", &format!("http://{addr}"), "--token-file"])
        .arg(&tokens)
        .args(["--print", "--after", "1"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&tokens);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.starts_with("syncspy-top: --print: http://"), "{err}");
    assert!(err.contains("401"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
