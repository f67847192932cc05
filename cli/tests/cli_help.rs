//! Snapshots of every `--help` (tests/cmd/*.toml): the documentation a user reads cannot drift
//! without a reviewed change here. Regenerate with `TRYCMD=overwrite cargo test --test cli_help`.

#[test]
fn help_snapshots() {
    trycmd::TestCases::new().case("tests/cmd/*.toml");
}
