// Included by the binaries' build scripts (`include!`): the commit they are built from, for `--version`
// and the traces. `GIT_COMMIT` when given (an image build, where the context has no `.git`), else
// `git rev-parse`, else `unknown`.

fn emit_git_commit() {
    println!("cargo:rerun-if-env-changed=GIT_COMMIT");
    let git = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.git");
    // Only paths that exist: cargo runs a build script again at every build while one it watches is missing.
    for watched in ["HEAD", "refs", "packed-refs"].map(|p| git.join(p)) {
        if watched.exists() {
            println!("cargo:rerun-if-changed={}", watched.display());
        }
    }
    let from_git = || {
        let out = std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = std::env::var("GIT_COMMIT").ok().filter(|c| !c.trim().is_empty()).or_else(from_git);
    println!("cargo:rustc-env=GIT_COMMIT={}", commit.unwrap_or_else(|| "unknown".into()));
}
