// sqlx::migrate! and the provider registry embed files at compile time; rebuild when they
// change (the provider fixtures are test data and do not count).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    for entry in std::fs::read_dir("providers").expect("providers/ exists") {
        let path = entry.expect("readable providers/ entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
