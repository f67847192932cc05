//! The program a process runs, as people name it: the agent's `program` label and the name of
//! a JUnit test case both come from here.

/// The program a process runs: the file name of `argv[0]`, or for an interpreter (python,
/// torchrun, ...) that of its script, e.g. `python3 train.py`.
pub fn program_of(argv: &[String]) -> String {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let Some(first) = argv.first().filter(|a| !a.is_empty()) else {
        return "unknown".to_string();
    };
    let prog = base(first);
    let interpreter = ["python", "torchrun", "accelerate", "deepspeed"]
        .iter()
        .any(|p| prog.starts_with(p));
    if interpreter {
        // The first argument that is not an option: the script (`-m mod` keeps `mod`).
        let mut it = argv[1..].iter();
        while let Some(a) = it.next() {
            if a == "-m" {
                if let Some(m) = it.next() {
                    return format!("{prog} -m {m}");
                }
            } else if !a.starts_with('-') {
                return format!("{prog} {}", base(a));
            }
        }
    }
    prog
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn programs_are_named_by_binary_or_script() {
        assert_eq!(
            program_of(&argv(&["/usr/bin/cudacalls", "--iters", "3"])),
            "cudacalls"
        );
        assert_eq!(
            program_of(&argv(&["python3", "-u", "/work/train.py", "--lr", "1"])),
            "python3 train.py"
        );
        assert_eq!(
            program_of(&argv(&["python", "-m", "torch.distributed.run"])),
            "python -m torch.distributed.run"
        );
        assert_eq!(program_of(&argv(&["python3"])), "python3");
        assert_eq!(program_of(&[]), "unknown");
    }
}
