// sqlx::migrate! and the provider registry embed files at compile time; rebuild when they
// change (the provider fixtures are test data and do not count). The registry's list of
// embedded definitions is generated here from providers/*.toml, so a new file is built in.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=providers");
    let mut files: Vec<String> = std::fs::read_dir("providers")
        .expect("providers/ exists")
        .map(|entry| entry.expect("readable providers/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            println!("cargo:rerun-if-changed={}", p.display());
            p.file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let entries: String = files
        .iter()
        .map(|f| format!("    (\"providers/{f}\", include_str!(\"{root}/providers/{f}\")),\n"))
        .collect();
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("embedded_providers.rs");
    std::fs::write(out, format!("&[\n{entries}]\n")).expect("OUT_DIR is writable");
}
